// The parity dump's cases (parity_dump.cpp runs them): what a case is, the
// inputs the op families share, and each family's list of cases, which
// parity_dump.cpp's all_cases() appends in the dump's order.
#pragma once

#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mixtape.h"

namespace parity {

using json = nlohmann::json;

inline constexpr double kNaN = NAN, kInf = INFINITY;

// What kind of tensor an input is: floating (in the run's dtype), or a fixed dtype.
enum class Kind { Float, I64, Bool, F32, F64 };

struct InputSpec {
  std::vector<double> values;
  mt::Shape shape;
  Kind kind = Kind::Float;
  bool grad = true;  // floating inputs only
};

using OpFn = std::function<std::vector<mt::Tensor>(const std::vector<mt::Tensor>&)>;

struct Case {
  std::string name;  // unique
  std::string op;    // check_parity.py's OPS key
  json args;         // the op's arguments, for the Python twin
  std::vector<InputSpec> inputs;
  OpFn fn;
  std::vector<mt::DType> dtypes = {mt::kF64, mt::kF32, mt::kF16, mt::kBF16};
  bool backward = true;
  bool on_sim = true;
};

// Edge values every elementwise op sees (rounded to the run's dtype).
inline const std::vector<double> kEdges = {kNaN, kInf, -kInf, 0.0,  -0.0, 1e-40, -3e-39, 1e-30, 1e30, -1e30,
                                           1.0,  -1.0, 0.5,   -2.5, 3e4,  -7e4,  7.0,    -0.1,  88.0, -104.0};
// Ordinary values with a smooth derivative everywhere (for the gradients).
inline const std::vector<double> kPlain = {-2.25, -1.5, -0.75, -0.125, 0.25, 0.625, 1.375, 2.5};

inline InputSpec floats(std::vector<double> v, mt::Shape shape) { return {std::move(v), std::move(shape)}; }
inline InputSpec floats(std::vector<double> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return {std::move(v), {n}};
}
inline InputSpec ints(std::vector<double> v, mt::Shape shape) {
  return {std::move(v), std::move(shape), Kind::I64, false};
}
inline InputSpec bools(std::vector<double> v, mt::Shape shape) {
  return {std::move(v), std::move(shape), Kind::Bool, false};
}

inline OpFn one(std::function<mt::Tensor(const std::vector<mt::Tensor>&)> f) {
  return [f](const std::vector<mt::Tensor>& in) { return std::vector<mt::Tensor>{f(in)}; };
}

// The op families, in parity_ops_elementwise.cpp ...
void add_unary_cases(std::vector<Case>& cases);
void add_binary_cases(std::vector<Case>& cases);
void add_reduction_cases(std::vector<Case>& cases);
// ... and in parity_ops_nn.cpp.
void add_linear_algebra_cases(std::vector<Case>& cases);
void add_nn_function_cases(std::vector<Case>& cases);
void add_loss_and_embedding_cases(std::vector<Case>& cases);
void add_shape_and_indexing_cases(std::vector<Case>& cases);
void add_convolution_and_pooling_cases(std::vector<Case>& cases);
void add_attention_cases(std::vector<Case>& cases);
void add_copy_fill_and_dropout_cases(std::vector<Case>& cases);
void add_module_cases(std::vector<Case>& cases);

}  // namespace parity
