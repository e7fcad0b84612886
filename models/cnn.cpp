#include "models/cnn.h"

#include "autograd/checkpoint.h"

namespace mt::models {

Cnn::Cnn(int64_t classes) {
  conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(1, 32, 3, 1, 1));
  bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(32));
  conv2 = register_module("conv2", std::make_shared<nn::Conv2d>(32, 64, 3, 1, 1));
  bn2 = register_module("bn2", std::make_shared<nn::BatchNorm2d>(64));
  fc1 = register_module("fc1", std::make_shared<nn::Linear>(64 * 7 * 7, 128));
  fc2 = register_module("fc2", std::make_shared<nn::Linear>(128, classes));
}

Tensor Cnn::forward(const Tensor& x) {
  const nn::ForwardScope scope(*this);
  Tensor h = max_pool2d(relu(bn1->forward(conv1->forward(x))), 2, 2);
  const auto stage2 = [this](const std::vector<Tensor>& in) {
    return max_pool2d(relu(bn2->forward(conv2->forward(in[0]))), 2, 2);
  };
  h = checkpoint_activations ? checkpoint(stage2, {h}) : stage2({h});
  return fc2->forward(relu(fc1->forward(h.flatten(1))));
}

// conv1 -> bn1 -> relu -> max-pool -> conv2 -> bn2 -> relu -> max-pool ->
// flatten -> fc1 -> relu -> fc2. A batch norm keeps order (and 0) only once
// folded into its convolution, so a handoff across one waits for the fold.
std::vector<nn::Module::Int8Handoff> Cnn::int8_handoffs() const {
  std::vector<Int8Handoff> handoffs;
  if (bn1->is_folded()) handoffs.push_back({"conv1", "conv2", true});
  if (bn2->is_folded()) handoffs.push_back({"conv2", "fc1", true});
  handoffs.push_back({"fc1", "fc2", true});
  return handoffs;
}

BasicBlock::BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride) {
  conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(in_channels, out_channels, 3, stride, 1, 1, 1, false));
  bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(out_channels));
  conv2 = register_module("conv2", std::make_shared<nn::Conv2d>(out_channels, out_channels, 3, 1, 1, 1, 1, false));
  bn2 = register_module("bn2", std::make_shared<nn::BatchNorm2d>(out_channels));
  if (stride != 1 || in_channels != out_channels) {
    downsample = register_module("downsample",
                                 std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
                                     std::make_shared<nn::Conv2d>(in_channels, out_channels, 1, stride, 0, 1, 1, false),
                                     std::make_shared<nn::BatchNorm2d>(out_channels)}));
  }
}

std::vector<std::pair<std::string, std::string>> BasicBlock::conv_batch_norm_pairs() const {
  std::vector<std::pair<std::string, std::string>> pairs = {{"conv1", "bn1"}, {"conv2", "bn2"}};
  if (downsample) pairs.emplace_back("downsample.0", "downsample.1");
  return pairs;
}

Tensor BasicBlock::forward(const Tensor& x) {
  const nn::ForwardScope scope(*this);
  Tensor h = relu(bn1->forward(conv1->forward(x)));
  h = bn2->forward(conv2->forward(h));
  return relu(add(h, downsample ? downsample->forward(x) : x));
}

namespace {
std::shared_ptr<nn::Sequential> stage(int64_t in_channels, int64_t out_channels, int64_t stride) {
  return std::make_shared<nn::Sequential>(
      std::vector<std::shared_ptr<nn::Module>>{std::make_shared<BasicBlock>(in_channels, out_channels, stride),
                                               std::make_shared<BasicBlock>(out_channels, out_channels, 1)});
}
}  // namespace

ResNet::ResNet(int64_t classes) {
  conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(1, 32, 3, 1, 1, 1, 1, false));
  bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(32));
  layer1 = register_module("layer1", stage(32, 32, 1));
  layer2 = register_module("layer2", stage(32, 64, 2));
  layer3 = register_module("layer3", stage(64, 128, 2));
  fc = register_module("fc", std::make_shared<nn::Linear>(128, classes));
}

Tensor ResNet::forward(const Tensor& x) {
  const nn::ForwardScope scope(*this);
  Tensor h = relu(bn1->forward(conv1->forward(x)));
  for (const std::shared_ptr<nn::Sequential>& stage : {layer1, layer2, layer3}) {
    h = checkpoint_activations
            ? checkpoint([stage](const std::vector<Tensor>& in) { return stage->forward(in[0]); }, {h})
            : stage->forward(h);
  }
  return fc->forward(adaptive_avg_pool2d(h, 1).flatten(1));
}

}  // namespace mt::models
