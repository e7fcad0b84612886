// A small MLP trained with plain SGD on a synthetic 2-D, 3-class task, written
// directly against mixtape's ops and autograd (no nn/ layers), for tests
// that check the layers below nn/ on their own.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/tensor.h"

namespace mt::models {

struct DemoOptions {
  int steps = 600;
  int64_t batch = 128;
  int64_t hidden = 64;
  double lr = 0.2;
  uint64_t seed = 0;
};

struct DemoResult {
  std::vector<double> losses;  // one per step
  double test_accuracy = 0;
};

// Points in [-2, 2]^2, labelled by which side of a curved boundary they fall.
struct Dataset {
  Tensor x;  // [n, 2] f32
  Tensor y;  // [n] i64
};
Dataset make_demo_dataset(int64_t n, uint64_t seed);

// on_step(step, loss) is called after every step (for printing progress).
DemoResult train_demo_mlp(const DemoOptions& options,
                          const std::function<void(int, double)>& on_step = nullptr);

}  // namespace mt::models
