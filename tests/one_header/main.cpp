// A training script that includes mixtape.h and nothing else of mixtape's:
// a Linear + LayerNorm model, AdamW with 8-bit state and a warm-up cosine
// schedule, BF16 autocast, a safetensors round trip. Exit 0 when it learned
// and the weights came back.
//
// Catches: mixtape.h missing a header a training script needs (the layers,
// the schedulers, safetensors: this file stops compiling).
#include <cstdio>
#include <memory>

#include "mixtape.h"

struct Net : mt::nn::Module {
  std::shared_ptr<mt::nn::Linear> in = register_module("in", std::make_shared<mt::nn::Linear>(8, 64));
  std::shared_ptr<mt::nn::LayerNorm> norm = register_module("norm", std::make_shared<mt::nn::LayerNorm>(mt::Shape{64}));
  std::shared_ptr<mt::nn::Linear> out = register_module("out", std::make_shared<mt::nn::Linear>(64, 2));
  mt::Tensor forward(const mt::Tensor& x) override { return out->forward(mt::relu(norm->forward(in->forward(x)))); }
};

int main() {
  mt::Generator gen(3);
  const mt::Tensor x = mt::randn({128, 8}, mt::kF32, mt::kCPU, &gen);
  const mt::Tensor y = mt::argmax(x.narrow(1, 0, 2), 1);
  Net net;
  mt::optim::AdamW opt(net.parameters(), {.lr = 1e-2}, {.state_dtype = mt::optim::StateDtype::Int8,
                                                       .min_quantized_numel = 0});
  mt::optim::WarmupCosineLr schedule(opt, 5, 60);
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    mt::Tensor loss;
    {
      mt::amp::Autocast autocast(mt::kCPU, mt::kBF16);
      loss = mt::cross_entropy(net(x), y);
    }
    opt.zero_grad();
    loss.backward();
    opt.step();
    schedule.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  const std::string path = "one_header_net.safetensors";
  mt::save_safetensors(path, net.state_dict());
  Net loaded;
  loaded.load_state_dict(mt::load_safetensors(path).tensors);
  const bool same = mt::max(mt::abs(mt::sub(loaded.out->weight, net.out->weight))).item<double>() == 0.0;
  std::printf("loss %.4f -> %.4f, weights %s after a safetensors round trip\n", first, last, same ? "equal" : "differ");
  return last < 0.5 * first && same ? 0 : 1;
}
