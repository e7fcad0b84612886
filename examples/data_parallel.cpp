// Data-parallel training: one process per rank (mpirun -n 2
// example_data_parallel; alone it is a world of one), each reading its shard
// of the data, DistributedDataParallel averaging the gradients during
// backward. Built and run by the tests on 1 and 2 ranks
// (examples_data_parallel_*): the ranks must end with identical weights and
// the loss must fall.
#include <cmath>
#include <cstdio>

#include "mixtape.h"
#include "tools/data/loader.h"

using namespace mt;

struct Classifier : nn::Module {
  std::shared_ptr<nn::Sequential> layers;
  Classifier() {
    layers = register_module("layers", std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
                                           std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(64, 32),
                                           std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(32, 4)}));
  }
  Tensor forward(const Tensor& x) override { return layers->forward(x); }
};

int main() {
  dist::init_process_group();
  dist::ProcessGroup& world = dist::world();
  const data::TensorDataset dataset = data::synthetic_images(512, 4, 8, 8, /*seed=*/1);
  // Every rank shuffles with the same seed and reads every size()-th sample from its rank on.
  data::DataLoader loader(dataset, {.batch = 32, .seed = 7, .shard_rank = world.rank(), .shard_count = world.size()});

  auto model = std::make_shared<Classifier>();
  dist::DistributedDataParallel ddp(model);  // rank 0's weights on every rank
  optim::AdamW opt(model->parameters(), {.lr = 1e-2});
  double first = 0, last = 0;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    loader.start_epoch(epoch);
    while (auto batch = loader.next()) {
      const Tensor loss = cross_entropy(ddp.forward(batch->inputs), batch->targets);
      opt.zero_grad();
      loss.backward();  // returns with the gradients averaged over the ranks
      opt.step();
      (first == 0 ? first : last) = loss.item<double>();
    }
  }
  // Every rank must hold rank 0's weights: compare with a broadcast copy.
  double largest_difference = 0;
  for (const Tensor& p : model->parameters()) {
    const Tensor theirs = p.detach().clone();
    world.broadcast(theirs, 0)->wait();
    largest_difference = std::max(largest_difference, max(abs(theirs - p.detach())).item<double>());
  }
  std::printf("rank %d of %d: loss %.3f -> %.3f, largest weight difference from rank 0: %g\n", world.rank(),
              world.size(), first, last, largest_difference);
  const bool ok = largest_difference == 0 && last < 0.5 * first;
  dist::finalize();
  return ok ? 0 : 1;
}
