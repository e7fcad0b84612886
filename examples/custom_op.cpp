// A custom op with its own backward and autocast rule: RMSNorm written as a
// mt::autograd::Function (PyTorch's torch::autograd::Function with
// torch.amp.custom_fwd(cast_inputs=torch.float32)). Its rule is Fp32: under
// BF16 autocast it receives f32 inputs and computes its statistic in f32,
// as the built-in norms do, while the Linear around it runs in BF16. Built
// and run by the tests (examples_custom_op): gradcheck must pass and the
// dtypes must be the ones the rule promises.
#include <cstdio>

#include "mixtape.h"

using namespace mt;

struct RmsNormFn : autograd::Function<RmsNormFn> {
  static constexpr const char* name = "my_rms_norm";
  static constexpr amp::CastPolicy autocast = amp::CastPolicy::Fp32;

  // y = x * r * w with r = 1 / sqrt(mean(x^2) + eps) over the last dim.
  static Tensor forward(autograd::FunctionContext& ctx, const std::vector<Tensor>& in, double eps) {
    const Tensor& x = in[0];
    const Tensor& w = in[1];
    const Tensor r = (x.square().mean(-1, true) + eps).rsqrt();
    ctx.save_for_backward({x, w, r});
    return x * r * w;
  }

  // dx = r w g - x r^3 mean(x w g), dw = sum over rows of x r g.
  static std::vector<Tensor> backward(autograd::FunctionContext& ctx, const Tensor& g) {
    const std::vector<Tensor> saved = ctx.saved();
    const Tensor &x = saved[0], &w = saved[1], &r = saved[2];
    const Tensor wg = w * g;
    const Tensor dx = r * wg - x * r.pow(3.0) * (x * wg).mean(-1, true);
    const Tensor dw = sum_to_size(x * r * g, w.sizes());
    return {dx, dw};
  }
};

int main() {
  // 1. The backward is right: gradcheck in f64 against finite differences.
  Generator gen(0);
  const Tensor x64 = randn({3, 8}, kF64, kCPU, &gen).requires_grad_();
  const Tensor w64 = randn({8}, kF64, kCPU, &gen).requires_grad_();
  const GradcheckResult check = gradcheck(
      [](const std::vector<Tensor>& in) {
        return RmsNormFn::apply({in[0], in[1]}, 1e-6);
      },
      {x64, w64});
  std::printf("gradcheck: %s\n", check.ok ? "ok" : check.message.c_str());

  // 2. The autocast rule: a Linear in bf16, then the norm in f32.
  nn::Linear layer(8, 8);
  const Tensor w = ones({8}).requires_grad_();
  const Tensor x = randn({4, 8}, kF32, kCPU, &gen);
  Tensor h, y;
  {
    const amp::Autocast autocast(kCPU, kBF16);
    h = layer.forward(x);                // LowerPrecision: bf16
    y = RmsNormFn::apply({h, w}, 1e-6);  // Fp32: h arrives as f32
  }
  sum(y).backward();
  std::printf("linear output %s, norm output %s, weight grad %s\n", std::string(dtype_name(h.dtype())).c_str(),
              std::string(dtype_name(y.dtype())).c_str(), std::string(dtype_name(layer.weight.grad().dtype())).c_str());
  const bool dtypes_ok = h.dtype() == kBF16 && y.dtype() == kF32 && layer.weight.grad().dtype() == kF32;
  return check.ok && dtypes_ok ? 0 : 1;
}
