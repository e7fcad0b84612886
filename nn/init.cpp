#include "nn/init.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"

namespace mt::nn::init {

void uniform_(const Tensor& t, double low, double high, Generator* gen) {
  NoGradGuard no_grad;
  copy_(t, uniform(t.sizes(), low, high, kF32, kCPU, gen).to(t.device()));
}

void normal_(const Tensor& t, double mean, double stddev, Generator* gen) {
  NoGradGuard no_grad;
  copy_(t, add(mul(randn(t.sizes(), kF32, kCPU, gen), stddev), mean).to(t.device()));
}

void constant_(const Tensor& t, double value) {
  NoGradGuard no_grad;
  fill_(t, value);
}

void default_weight_(const Tensor& weight, int64_t fan_in, Generator* gen) {
  // kaiming_uniform with a = sqrt(5): gain = sqrt(2 / (1 + a^2)) = sqrt(1/3),
  // bound = gain * sqrt(3 / fan_in) = 1 / sqrt(fan_in).
  const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
  uniform_(weight, -bound, bound, gen);
}

void default_bias_(const Tensor& bias, int64_t fan_in, Generator* gen) { default_weight_(bias, fan_in, gen); }

void xavier_uniform_(const Tensor& weight, double gain, Generator* gen) {
  MT_CHECK(weight.dim() >= 2, "xavier_uniform_: needs a weight of at least 2 dims, got {}", weight.shape_string());
  const int64_t receptive = weight.numel() / (weight.size(0) * weight.size(1));
  const double fan_in = static_cast<double>(weight.size(1) * receptive);
  const double fan_out = static_cast<double>(weight.size(0) * receptive);
  const double bound = gain * std::sqrt(6.0 / (fan_in + fan_out));
  uniform_(weight, -bound, bound, gen);
}

void zeros_(const Tensor& t) { constant_(t, 0.0); }
void ones_(const Tensor& t) { constant_(t, 1.0); }

}  // namespace mt::nn::init
