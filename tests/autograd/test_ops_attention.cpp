// scaled_dot_product_attention (the reference path) against a loop-by-loop
// f64 reference of PyTorch 2's definition, with every mask kind, gradcheck,
// the fully masked row, errors, and the sim device against the CPU.
#include <cmath>
#include <functional>

#include "test_util.h"
#include "tests/kernels/sim_tensor_util.h"

using namespace mt;
using namespace mt::test;

namespace {

// out[b][i] = sum_j softmax_j(q_i . k_j * scale + bias[b][i][j]) v_j over
// [B, T, D] tensors, where keep(b, i, j) is false for masked keys.
Tensor reference_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                           const std::function<bool(int64_t, int64_t, int64_t)>& keep,
                           const std::function<double(int64_t, int64_t, int64_t)>& bias) {
  const int64_t batch = q.size(0), tq = q.size(1), tk = k.size(1), d = q.size(2), dv = v.size(2);
  const std::vector<double> vq = q.to_vector(), vk = k.to_vector(), vv = v.to_vector();
  std::vector<double> out(static_cast<size_t>(batch * tq * dv), 0.0);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < tq; ++i) {
      std::vector<double> s(static_cast<size_t>(tk), -INFINITY);
      double max = -INFINITY;
      for (int64_t j = 0; j < tk; ++j) {
        if (!keep(b, i, j)) continue;
        double dot = 0;
        for (int64_t c = 0; c < d; ++c)
          dot += vq[static_cast<size_t>((b * tq + i) * d + c)] * vk[static_cast<size_t>((b * tk + j) * d + c)];
        s[static_cast<size_t>(j)] = dot * scale + bias(b, i, j);
        max = std::max(max, s[static_cast<size_t>(j)]);
      }
      double total = 0;
      for (double& x : s) total += (x = std::exp(x - max));
      for (int64_t j = 0; j < tk; ++j) {
        for (int64_t c = 0; c < dv; ++c) {
          out[static_cast<size_t>((b * tq + i) * dv + c)] +=
              s[static_cast<size_t>(j)] / total * vv[static_cast<size_t>((b * tk + j) * dv + c)];
        }
      }
    }
  }
  return from_vector(out, {batch, tq, dv}, kF64);
}

bool always(int64_t, int64_t, int64_t) { return true; }
double no_bias(int64_t, int64_t, int64_t) { return 0.0; }

}  // namespace

// Catches: a missing or transposed scale (1/sqrt(D)), a causal mask aligned
// bottom-right instead of PyTorch's top-left (T_q != T_k), a bool mask read
// with the opposite meaning (true = attend), a key padding mask applied to
// queries, a floating mask not added, and backward through any of them.
TEST_CASE("scaled_dot_product_attention matches the definition with every mask kind, forward and gradcheck",
          "[ops][attention]") {
  const Tensor q = randn64({2, 3, 4}, 1), k = randn64({2, 5, 4}, 2), v = randn64({2, 5, 3}, 3);
  const double scale = 0.5;  // 1/sqrt(4)
  const std::vector<double> keep_bits = {1, 0, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 1};
  const Tensor bool_mask = from_vector(keep_bits, {3, 5}, kBool);
  const Tensor float_mask = randn64({3, 5}, 4);
  const Tensor padding = from_vector(std::vector<double>{0, 0, 0, 1, 1, 1, 0, 0, 0, 0}, {2, 5}, kBool);
  const std::vector<double> vf = float_mask.to_vector();
  struct Case {
    const char* name;
    AttentionOptions options;
    std::function<bool(int64_t, int64_t, int64_t)> keep;
    std::function<double(int64_t, int64_t, int64_t)> bias;
    double scale;
  };
  AttentionOptions causal, masked, additive, padded, scaled;
  causal.is_causal = true;
  masked.attn_mask = bool_mask;
  additive.attn_mask = float_mask;
  padded.key_padding_mask = padding;
  scaled.scale = 0.125;
  const std::vector<Case> cases = {
      {"plain", {}, always, no_bias, scale},
      {"causal", causal, [](int64_t, int64_t i, int64_t j) { return j <= i; }, no_bias, scale},
      {"bool mask", masked,
       [&](int64_t, int64_t i, int64_t j) { return keep_bits[static_cast<size_t>(i * 5 + j)] != 0; }, no_bias, scale},
      {"float mask", additive, always,
       [&](int64_t, int64_t i, int64_t j) { return vf[static_cast<size_t>(i * 5 + j)]; }, scale},
      {"key padding", padded, [](int64_t b, int64_t, int64_t j) { return b == 0 ? j < 3 : j > 0; }, no_bias, scale},
      {"scale", scaled, always, no_bias, 0.125},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    check_close(scaled_dot_product_attention(q, k, v, c.options), reference_attention(q, k, v, c.scale, c.keep, c.bias),
                1e-12, c.name);
    require_gradcheck(
        [o = c.options](const std::vector<Tensor>& in) { return scaled_dot_product_attention(in[0], in[1], in[2], o); },
        {q, k, v}, c.name);
  }
  // [B, H, T, D] with the padding mask broadcast over heads.
  const Tensor q4 = randn64({2, 2, 3, 4}, 5), k4 = randn64({2, 2, 5, 4}, 6), v4 = randn64({2, 2, 5, 3}, 7);
  const Tensor out4 = scaled_dot_product_attention(q4, k4, v4, padded);
  CHECK(out4.sizes() == Shape{2, 2, 3, 3});
  const Tensor head1 = scaled_dot_product_attention(q4.select(1, 1).contiguous(), k4.select(1, 1).contiguous(),
                                                    v4.select(1, 1).contiguous(), padded);
  check_close(out4.select(1, 1).contiguous(), head1, 1e-12, "head 1 alone");
}

// Catches: a fully masked row silently averaging (PyTorch's math path gives
// NaN there); dropout p = 1 not zeroing the weights.
TEST_CASE("scaled_dot_product_attention: a fully masked row is NaN, dropout 1 gives zeros", "[ops][attention]") {
  const Tensor q = randn64({1, 2, 4}, 1), k = randn64({1, 3, 4}, 2), v = randn64({1, 3, 2}, 3);
  AttentionOptions none_kept;
  none_kept.attn_mask = from_vector(std::vector<double>{0, 0, 0, 1, 0, 1}, {2, 3}, kBool);
  const std::vector<double> out = scaled_dot_product_attention(q, k, v, none_kept).to_vector();
  CHECK(std::isnan(out[0]));
  CHECK(std::isnan(out[1]));
  CHECK(std::isfinite(out[2]));
  AttentionOptions all_dropped;
  all_dropped.dropout_p = 1.0;
  for (double x : scaled_dot_product_attention(q, k, v, all_dropped).to_vector()) CHECK(x == 0.0);
}

TEST_CASE("scaled_dot_product_attention errors name the problem", "[ops][attention][errors]") {
  const Tensor q = zeros({1, 2, 4}), k = zeros({1, 3, 4}), v = zeros({1, 3, 2});
  AttentionOptions both;
  both.is_causal = true;
  both.attn_mask = ones({2, 3}, kBool);
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, v, both), Catch::Contains("not both"));
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, zeros({1, 3, 5}), v), Catch::Contains("head dim"));
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, zeros({1, 4, 2})), Catch::Contains("key count"));
  AttentionOptions bad_padding;
  bad_padding.key_padding_mask = ones({1, 4}, kBool);
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, v, bad_padding), Catch::Contains("key_padding_mask"));
  AttentionOptions int_mask;
  int_mask.attn_mask = zeros({2, 3}, kI64);
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, v, int_mask), Catch::Contains("bool or floating"));
}

// Catches: the CUDA kernels behind the composite (bmm, softmax, where) giving
// another answer than the CPU for attention shapes.
TEST_CASE("scaled_dot_product_attention on the CUDA path matches the CPU, forward and backward",
          "[ops][attention][sim]") {
  for (DType dtype : {kF32, kF16}) {
    INFO(dtype_name(dtype));
    AttentionOptions causal;
    causal.is_causal = true;
    Tensor q[2], k[2], v[2], out[2];
    const Tensor g = random_cpu({1, 2, 4, 8}, dtype, 14);
    for (int d = 0; d < 2; ++d) {
      const Device device = d == 0 ? kCPU : kCudaPath;
      q[d] = random_cpu({1, 2, 4, 8}, dtype, 11).to(device).requires_grad_();
      k[d] = random_cpu({1, 2, 6, 8}, dtype, 12).to(device).requires_grad_();
      v[d] = random_cpu({1, 2, 6, 8}, dtype, 13).to(device).requires_grad_();
      out[d] = scaled_dot_product_attention(q[d], k[d], v[d], causal);
      out[d].backward(g.to(device));
    }
    const double tol = 8 * dtype_tolerance(dtype);
    CHECK(relative_difference(out[1], out[0]) <= tol);
    CHECK(relative_difference(q[1].grad(), q[0].grad()) <= tol);
    CHECK(relative_difference(k[1].grad(), k[0].grad()) <= tol);
    CHECK(relative_difference(v[1].grad(), v[0].grad()) <= tol);
  }
}
