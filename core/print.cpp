// A readable print, close to PyTorch's: tensor([[0.1000, 2.0000], ...], dtype=f16)
#include <cmath>

#include "core/tensor.h"

namespace mt {
namespace {

constexpr int64_t kSummariseAbove = 1000;  // elements; longer dims show their ends only
constexpr int64_t kEdgeItems = 3;

std::string format_value(double v, DType dtype, bool use_scientific) {
  if (dtype == DType::Bool) return v != 0 ? "True" : "False";
  if (!is_floating(dtype)) return fmt::format("{}", static_cast<int64_t>(v));
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return use_scientific ? fmt::format("{:.4e}", v) : fmt::format("{:.4f}", v);
}

struct Printer {
  const Tensor& t;
  bool summarise;
  bool scientific;
  std::string out;

  void print_dim(size_t d, int64_t pos, int indent) {
    const auto& sizes = t.sizes();
    const auto& strides = t.strides();
    out += '[';
    const int64_t n = sizes[d];
    for (int64_t i = 0; i < n; ++i) {
      if (summarise && n > 2 * kEdgeItems && i == kEdgeItems) {
        out += d + 1 == sizes.size() ? "..., " : "...,\n" + std::string(static_cast<size_t>(indent + 1), ' ');
        i = n - kEdgeItems;
      }
      const int64_t p = pos + i * strides[d];
      if (d + 1 == sizes.size()) {
        out += format_value(read_element(t, p), t.dtype(), scientific);
      } else {
        print_dim(d + 1, p, indent + 1);
      }
      if (i + 1 < n) {
        out += d + 1 == sizes.size() ? ", " : ",\n" + std::string(static_cast<size_t>(indent + 1), ' ');
      }
    }
    out += ']';
  }
};

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::string suffix;
  if (dtype() != kF32 && dtype() != kI64 && dtype() != kBool) suffix += fmt::format(", dtype={}", dtype());
  if (!device().is_cpu()) suffix += fmt::format(", device={}", device());
  if (grad_fn()) {
    suffix += ", grad_fn";
  } else if (requires_grad()) {
    suffix += ", requires_grad=True";
  }
  // A GPU tensor is printed from a host copy of its values.
  const Tensor values = device().host_accessible() ? *this : device_to_host(*this);

  bool scientific = false;
  if (is_floating(dtype())) {
    double max_abs = 0, min_abs = INFINITY;
    for_each_offset(sizes(), strides(), offset(), [&](int64_t p) {
      const double a = std::fabs(read_element(values, p));
      if (std::isfinite(a) && a > 0) {
        max_abs = std::max(max_abs, a);
        min_abs = std::min(min_abs, a);
      }
    });
    scientific = max_abs >= 1e8 || (max_abs > 0 && min_abs < 1e-4);
  }
  Printer printer{values, numel() > kSummariseAbove, scientific, "tensor("};
  if (dim() == 0) {
    printer.out += format_value(read_element(values, offset()), dtype(), scientific);
  } else {
    printer.print_dim(0, offset(), 7);
  }
  return printer.out + suffix + ")";
}

}  // namespace mt
