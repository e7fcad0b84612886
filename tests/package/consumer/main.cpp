// A model written outside mixtape's tree: a user's own Module, trained with
// AdamW under bf16 autocast on the CPU, then one f16 step with the GradScaler
// on the `sim` device, on data from mixtape::tools. Exit 0 when it learned.
//
// Catches, through the installed package: headers that were not installed
// (or include something that was not), a layer library missing from the
// link, Tensor's methods not installed at start-up (the whole-archive link of
// mixtape::tensor_methods), and kernels missing for a device.
#include <cstdio>
#include <memory>

#include "mixtape.h"
#include "tools/data/dataset.h"

class TwoLayerNet : public mt::nn::Module {
 public:
  TwoLayerNet(int64_t in, int64_t hidden, int64_t classes)
      : hidden_(register_module("hidden", std::make_shared<mt::nn::Linear>(in, hidden))),
        out_(register_module("out", std::make_shared<mt::nn::Linear>(hidden, classes))) {}
  mt::Tensor forward(const mt::Tensor& x) override {
    return out_->forward(mt::relu(hidden_->forward(x.flatten(1, -1))));
  }

 private:
  std::shared_ptr<mt::nn::Linear> hidden_, out_;
};

double train_steps(TwoLayerNet& model, const mt::data::TensorDataset& data, mt::Device device, mt::DType low,
                   int steps) {
  mt::optim::AdamW optimizer(model.parameters(), {.lr = 1e-2});
  mt::amp::GradScaler scaler({.enabled = low == mt::kF16});
  const mt::Tensor x = data.inputs.to(device), y = data.targets.to(device);
  double loss_value = 0;
  for (int step = 0; step < steps; ++step) {
    mt::Tensor loss;
    {
      mt::amp::Autocast autocast(device, low);
      loss = mt::cross_entropy(model(x), y);
    }
    optimizer.zero_grad();
    scaler.scale(loss).backward();
    scaler.step(optimizer);
    scaler.update();
    loss_value = loss.item<double>();
  }
  return loss_value;
}

int main() {
  const mt::data::TensorDataset data = mt::data::synthetic_images(256, 4, 4, 4, /*seed=*/1);
  TwoLayerNet model(16, 32, 4);
  const double first = train_steps(model, data, mt::kCPU, mt::kBF16, 1);
  const double last = train_steps(model, data, mt::kCPU, mt::kBF16, 60);
  std::printf("cpu bf16 autocast: loss %.4f -> %.4f\n", first, last);

  model.to(mt::kSIM);
  const double sim = train_steps(model, data, mt::kSIM, mt::kF16, 2);
  std::printf("sim f16 autocast with the scaler: loss %.4f\n", sim);
  return last < 0.5 * first && sim < first ? 0 : 1;
}
