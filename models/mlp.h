// The `mlp` reference model: 784-256-128-10 with ReLU (235,146 parameters).
//
// PyTorch equivalent (same parameter names and shapes):
//   class MLP(nn.Module):
//       def __init__(self):
//           super().__init__()
//           self.fc1, self.fc2, self.fc3 = nn.Linear(784, 256), nn.Linear(256, 128), nn.Linear(128, 10)
//       def forward(self, x):
//           x = x.flatten(1)
//           return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))
#pragma once

#include "nn/layers.h"

namespace mt::models {

class Mlp : public nn::Module {
 public:
  explicit Mlp(int64_t inputs = 784, int64_t classes = 10);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "mlp"; }
  std::vector<Int8Handoff> int8_handoffs() const override { return {{"fc1", "fc2", true}, {"fc2", "fc3", true}}; }

  std::shared_ptr<nn::Linear> fc1, fc2, fc3;
};

}  // namespace mt::models
