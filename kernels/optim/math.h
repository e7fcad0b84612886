// Per-element optimizer math shared by the CPU loop and the CUDA multi-tensor
// kernels. Everything here is f32: the gradient (any dtype) is read as f32 and
// unscaled in f32, the master weight and moments are f32, and the result is
// rounded once into the parameter's dtype by the caller.
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime/half.h"
#include "runtime/macros.h"
#include "core/philox.h"

namespace mt::kernels {

struct AdamWArgs {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

struct SgdArgs {
  double lr = 1e-2;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};

// The per-step constants of AdamW's bias correction at step t (1-based),
// computed once per tensor rather than once per element.
struct AdamWStepConstants {
  float step_size;        // lr / (1 - beta1^t)
  float inv_sqrt_bias2;   // 1 / sqrt(1 - beta2^t)
  float decay;            // 1 - lr * weight_decay
};

MT_HOST_DEVICE inline AdamWStepConstants adamw_step_constants(float t, const AdamWArgs& a) {
  const auto lr = static_cast<float>(a.lr);
  return {lr / (1.0f - powf(static_cast<float>(a.beta1), t)),
          1.0f / sqrtf(1.0f - powf(static_cast<float>(a.beta2), t)), 1.0f - lr * static_cast<float>(a.weight_decay)};
}

// One AdamW update of (p, m, v) with gradient g, as in PyTorch's AdamW:
// decoupled weight decay, bias-corrected moments.
MT_HOST_DEVICE inline void adamw_update(float& p, float& m, float& v, float g, const AdamWStepConstants& k,
                                        const AdamWArgs& a) {
  const auto b1 = static_cast<float>(a.beta1), b2 = static_cast<float>(a.beta2);
  p *= k.decay;
  m = b1 * m + (1.0f - b1) * g;
  v = b2 * v + (1.0f - b2) * g * g;
  p -= k.step_size * m / (sqrtf(v) * k.inv_sqrt_bias2 + static_cast<float>(a.eps));
}

// The same update at step t, computing the constants itself.
MT_HOST_DEVICE inline void adamw_update(float& p, float& m, float& v, float g, float t, const AdamWArgs& a) {
  adamw_update(p, m, v, g, adamw_step_constants(t, a), a);
}

// One SGD update; `first` says the momentum buffer is empty (it then starts at g).
MT_HOST_DEVICE inline void sgd_update(float& p, float& buf, float g, bool first, const SgdArgs& a) {
  g += static_cast<float>(a.weight_decay) * p;
  if (a.momentum != 0) {
    const auto mu = static_cast<float>(a.momentum);
    buf = first ? g : mu * buf + (1.0f - static_cast<float>(a.dampening)) * g;
    g = a.nesterov ? g + mu * buf : buf;
  }
  p -= static_cast<float>(a.lr) * g;
}

// Rounds f32 to bf16 stochastically: adding 16 random bits below bf16's last
// mantissa bit and truncating rounds up with probability equal to the
// discarded fraction, so tiny updates survive on average instead of vanishing.
MT_HOST_DEVICE inline uint16_t f32_to_bf16_stochastic(float value, uint32_t random_bits) {
  const uint32_t bits = float_bits(value);
  if ((bits & 0x7f800000u) == 0x7f800000u) return f32_to_bf16_bits(value);  // inf/NaN: nearest
  return static_cast<uint16_t>((bits + (random_bits & 0xffffu)) >> 16);
}

}  // namespace mt::kernels
