// Parameter initialisation matching PyTorch's defaults (in place, no grad).
#pragma once

#include "core/generator.h"
#include "core/tensor.h"

namespace mt::nn::init {

void uniform_(const Tensor& t, double low, double high, Generator* gen = nullptr);
void normal_(const Tensor& t, double mean = 0, double stddev = 1, Generator* gen = nullptr);
void constant_(const Tensor& t, double value);
// PyTorch's Linear/Conv default: kaiming_uniform_(a = sqrt(5)), i.e. U(+-1/sqrt(fan_in)).
void default_weight_(const Tensor& weight, int64_t fan_in, Generator* gen = nullptr);
// The matching bias init: U(+-1/sqrt(fan_in)).
void default_bias_(const Tensor& bias, int64_t fan_in, Generator* gen = nullptr);
// Glorot's U(+-gain * sqrt(6 / (fan_in + fan_out))) for a weight [fan_out, fan_in, ...].
void xavier_uniform_(const Tensor& weight, double gain = 1.0, Generator* gen = nullptr);
void zeros_(const Tensor& t);
void ones_(const Tensor& t);

}  // namespace mt::nn::init
