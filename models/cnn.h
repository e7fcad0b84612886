// The `cnn` reference model: two conv3x3 + BatchNorm + ReLU + 2x2 max-pool
// stages (28 -> 14 -> 7), then two fully connected layers (421,834 parameters).
//
// PyTorch equivalent (same parameter and buffer names and shapes):
//   class CNN(nn.Module):
//       def __init__(self):
//           super().__init__()
//           self.conv1, self.bn1 = nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32)
//           self.conv2, self.bn2 = nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64)
//           self.fc1, self.fc2 = nn.Linear(64 * 7 * 7, 128), nn.Linear(128, 10)
//       def forward(self, x):
//           x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
//           x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
//           return self.fc2(F.relu(self.fc1(x.flatten(1))))
#pragma once

#include "nn/layers.h"

namespace mt::models {

class Cnn : public nn::Module {
 public:
  explicit Cnn(int64_t classes = 10);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "cnn"; }
  std::vector<std::pair<std::string, std::string>> conv_batch_norm_pairs() const override {
    return {{"conv1", "bn1"}, {"conv2", "bn2"}};
  }
  std::vector<Int8Handoff> int8_handoffs() const override;
  bool enable_activation_checkpointing() override { return checkpoint_activations = true; }
  // Recompute the second conv stage in backward (the first sees only the
  // images, which need no gradient, so mt::checkpoint would just run it).
  bool checkpoint_activations = false;

  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2;
  std::shared_ptr<nn::Linear> fc1, fc2;
};

// The `resnet` reference model: a CIFAR-style ResNet for 28x28 inputs — a
// conv3x3 stem (32 channels) and three stages of two BasicBlocks (32, 64,
// 128 channels; stride 2 at stages 2 and 3 with a 1x1 conv + BN shortcut),
// global average pooling and a linear classifier (696,042 parameters).
// Names follow torchvision's ResNet: conv1, bn1, layer1.0.conv1, ...,
// layer2.0.downsample.0, layer2.0.downsample.1, fc.
class BasicBlock : public nn::Module {
 public:
  BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "BasicBlock"; }
  std::vector<std::pair<std::string, std::string>> conv_batch_norm_pairs() const override;

  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2;
  std::shared_ptr<nn::Sequential> downsample;  // null when the shapes already match
};

class ResNet : public nn::Module {
 public:
  explicit ResNet(int64_t classes = 10);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "resnet"; }
  std::vector<std::pair<std::string, std::string>> conv_batch_norm_pairs() const override {
    return {{"conv1", "bn1"}};  // each BasicBlock lists its own
  }
  bool enable_activation_checkpointing() override { return checkpoint_activations = true; }
  // Recompute each stage (layer1..3) in backward instead of keeping its activations.
  bool checkpoint_activations = false;

  std::shared_ptr<nn::Conv2d> conv1;
  std::shared_ptr<nn::BatchNorm2d> bn1;
  std::shared_ptr<nn::Sequential> layer1, layer2, layer3;
  std::shared_ptr<nn::Linear> fc;
};

}  // namespace mt::models
