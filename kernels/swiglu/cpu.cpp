// SwiGLU on the CPU. f32 and bf16 run a block of 512 values at a time:
// the block is widened to f32 on the stack, sigmoid's exp runs eight lanes
// at a time (SLEEF's expf8_u10, kernels/common/vector_math.h), and the
// results are rounded once into the output. Before, the op gathered whole
// f32 copies of its bf16 inputs and called glibc's scalar expf per value:
// forward and backward were 10% of a llama-small bf16 training step. f64
// (and f16) keep the plain loop over math.h's formulas; the block path
// computes the same formulas, with a vectorised exp.
#include "kernels/swiglu/cpu.h"

#include <algorithm>

#include "kernels/common/bf16x8.h"
#include "kernels/common/strided.h"
#include "kernels/common/vector_math.h"
#include "kernels/swiglu/math.h"

namespace mt::kernels::cpu {
namespace {

constexpr int64_t kBlock = 512;

// n values of t (contiguous f32 or bf16) from element `first`, as f32.
void load_block(const Tensor& t, int64_t first, int64_t n, float* dst) {
  if (t.dtype() == kF32) {
    std::copy_n(static_cast<const float*>(t.data_ptr()) + first, n, dst);
    return;
  }
  widen_bf16_run(static_cast<const BFloat16*>(t.data_ptr()) + first, dst, n);
}

void store_block(const float* src, const Tensor& t, int64_t first, int64_t n) {
  if (t.dtype() == kF32) {
    std::copy_n(src, n, static_cast<float*>(t.data_ptr()) + first);
    return;
  }
  narrow_bf16_run(src, static_cast<BFloat16*>(t.data_ptr()) + first, n);
}

// sigmoid[i] = 1 / (1 + exp(-g[i])), math.h's swiglu_sigmoid with a vector exp.
void sigmoid_block(const float* g, float* sigmoid, int64_t n) {
  for (int64_t i = 0; i < n; ++i) sigmoid[i] = -g[i];
  exp_n(sigmoid, sigmoid, n);
  for (int64_t i = 0; i < n; ++i) sigmoid[i] = 1.0f / (1.0f + sigmoid[i]);
}

// body(block's first element, its length) over [0, numel) in blocks, in parallel.
template <typename Body>
void for_each_block(int64_t numel, Body&& body) {
  parallel_for((numel + kBlock - 1) / kBlock, 8 * kBlock, [&](int64_t begin, int64_t end) {
    for (int64_t block = begin; block < end; ++block) {
      const int64_t first = block * kBlock;
      body(first, std::min(kBlock, numel - first));
    }
  });
}

void forward_blocks(const Tensor& gate, const Tensor& up, const Tensor& y) {
  for_each_block(y.numel(), [&](int64_t first, int64_t n) {
    float g[kBlock], u[kBlock], s[kBlock];
    load_block(gate, first, n, g);
    load_block(up, first, n, u);
    sigmoid_block(g, s, n);
    for (int64_t i = 0; i < n; ++i) s[i] = swiglu_forward_given_sigmoid(g[i], s[i], u[i]);
    store_block(s, y, first, n);
  });
  y.storage()->bump_version();
}

void backward_blocks(const Tensor& grad_y, const Tensor& gate, const Tensor& up, const Tensor& grad_gate,
                     const Tensor& grad_up) {
  for_each_block(gate.numel(), [&](int64_t first, int64_t n) {
    float dy[kBlock], g[kBlock], u[kBlock], s[kBlock];
    load_block(grad_y, first, n, dy);
    load_block(gate, first, n, g);
    load_block(up, first, n, u);
    sigmoid_block(g, s, n);
    for (int64_t i = 0; i < n; ++i) swiglu_backward_given_sigmoid(dy[i], g[i], s[i], u[i], &g[i], &u[i]);
    store_block(g, grad_gate, first, n);
    store_block(u, grad_up, first, n);
  });
  grad_gate.storage()->bump_version();
  grad_up.storage()->bump_version();
}

// math.h's formulas one value at a time in T (f64; f32 for f16 tensors).
template <typename T>
void forward_typed(const Tensor& gate, const Tensor& up, const Tensor& y) {
  Loaded<T> g(gate), u(up);
  OutputBuffer<T> out(y);
  T* py = out.data();
  parallel_for(gate.numel(), 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) py[i] = swiglu_forward_value(g[i], u[i]);
  });
  out.commit();
}

template <typename T>
void backward_typed(const Tensor& grad_y, const Tensor& gate, const Tensor& up, const Tensor& grad_gate,
                    const Tensor& grad_up) {
  Loaded<T> dy(grad_y), g(gate), u(up);
  OutputBuffer<T> dg(grad_gate), du(grad_up);
  T *pdg = dg.data(), *pdu = du.data();
  parallel_for(gate.numel(), 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) swiglu_backward_values(dy[i], g[i], u[i], pdg + i, pdu + i);
  });
  dg.commit();
  du.commit();
}

// The dispatcher hands over contiguous tensors of one dtype.
bool runs_blocks(DType dtype) { return dtype == kF32 || dtype == kBF16; }

}  // namespace

void swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& y) {
  if (runs_blocks(y.dtype())) return forward_blocks(gate, up, y);
  if (y.dtype() == kF64) return forward_typed<double>(gate, up, y);
  forward_typed<float>(gate, up, y);
}

void swiglu_backward(const Tensor& grad_y, const Tensor& gate, const Tensor& up, const Tensor& grad_gate,
                     const Tensor& grad_up) {
  if (runs_blocks(grad_gate.dtype())) return backward_blocks(grad_y, gate, up, grad_gate, grad_up);
  if (grad_gate.dtype() == kF64) return backward_typed<double>(grad_y, gate, up, grad_gate, grad_up);
  backward_typed<float>(grad_y, gate, up, grad_gate, grad_up);
}

}  // namespace mt::kernels::cpu
