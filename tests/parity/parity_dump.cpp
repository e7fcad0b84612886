// The mixtape half of the PyTorch parity suite: runs every public op on fixed
// inputs (edge values included: NaN, +-inf, +-0, subnormals, ties, huge and
// tiny magnitudes, empty and 0-dim tensors, broadcasting) in every floating
// dtype, on the CPU and on the sim device (the CUDA kernels), and writes
// inputs, outputs and input gradients as JSON lines. check_parity.py
// recomputes each record in PyTorch and compares.
//
//   parity_dump out.jsonl
//
// Each case names a PyTorch twin in check_parity.py's OPS table; the
// backward is seeded with a fixed upstream gradient on the first floating
// output, the same one the Python side uses.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mixtape.h"
#include "models/gpt.h"
#include "models/registry.h"

using namespace mt;
using json = nlohmann::json;

namespace {

constexpr double kNaN = NAN, kInf = INFINITY;

// What kind of tensor an input is: floating (in the run's dtype), or a fixed dtype.
enum class Kind { Float, I64, Bool, F32, F64 };

struct InputSpec {
  std::vector<double> values;
  Shape shape;
  Kind kind = Kind::Float;
  bool grad = true;  // floating inputs only
};

using OpFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

struct Case {
  std::string name;  // unique
  std::string op;    // check_parity.py's OPS key
  json args;         // the op's arguments, for the Python twin
  std::vector<InputSpec> inputs;
  OpFn fn;
  std::vector<DType> dtypes = {kF64, kF32, kF16, kBF16};
  bool backward = true;
  bool on_sim = true;
};

json encode(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

json encode_tensor(const Tensor& t) {
  json values = json::array();
  for (double v : t.to(kCPU).to_vector()) values.push_back(encode(v));
  return {{"dtype", std::string(dtype_name(t.dtype()))}, {"shape", t.sizes()}, {"values", values}};
}

// The upstream gradient: multiples of 1/4 in [-1.25, 1.25], exact in every dtype.
Tensor upstream_for(const Tensor& out) {
  std::vector<double> g(static_cast<size_t>(out.numel()));
  for (size_t k = 0; k < g.size(); ++k) g[k] = static_cast<double>(static_cast<int>((k * 7) % 11) - 5) / 4.0;
  return from_vector(g, out.sizes(), out.dtype(), out.device());
}

DType dtype_of(Kind kind, DType run) {
  switch (kind) {
    case Kind::Float: return run;
    case Kind::I64: return kI64;
    case Kind::Bool: return kBool;
    case Kind::F32: return kF32;
    case Kind::F64: return kF64;
  }
  return run;
}

json run_case(const Case& c, DType dtype, Device device) {
  json record = {{"name", c.name},
                 {"op", c.op},
                 {"args", c.args},
                 {"device", device.str()},
                 {"dtype", std::string(dtype_name(dtype))}};
  try {
    std::vector<Tensor> inputs;
    json encoded_inputs = json::array();
    for (const InputSpec& spec : c.inputs) {
      const DType t = dtype_of(spec.kind, dtype);
      Tensor x = from_vector(spec.values, spec.shape, t).to(device);
      const bool grad = c.backward && spec.grad && is_floating(t);
      if (grad) x.requires_grad_();
      json e = encode_tensor(x);
      e["grad"] = grad;
      encoded_inputs.push_back(e);
      inputs.push_back(x);
    }
    record["inputs"] = encoded_inputs;
    const std::vector<Tensor> outputs = c.fn(inputs);
    json encoded_outputs = json::array();
    for (const Tensor& o : outputs) encoded_outputs.push_back(encode_tensor(o));
    record["outputs"] = encoded_outputs;
    const Tensor* seeded = nullptr;
    for (const Tensor& o : outputs) {
      if (is_floating(o.dtype()) && o.requires_grad()) {
        seeded = &o;
        break;
      }
    }
    if (seeded != nullptr) {
      const Tensor g = upstream_for(*seeded);
      record["upstream"] = encode_tensor(g);
      seeded->backward(g);
      json grads = json::array();
      for (const Tensor& x : inputs) grads.push_back(x.grad().defined() ? encode_tensor(x.grad()) : json());
      record["grads"] = grads;
    }
  } catch (const Error& e) {
    record["error"] = e.what();
  }
  return record;
}

// ---------------------------------------------------------------- the cases

// Edge values every elementwise op sees (rounded to the run's dtype).
const std::vector<double> kEdges = {kNaN, kInf, -kInf, 0.0,  -0.0, 1e-40, -3e-39, 1e-30, 1e30, -1e30,
                                    1.0,  -1.0, 0.5,   -2.5, 3e4,  -7e4,  7.0,    -0.1,  88.0, -104.0};
// Ordinary values with a smooth derivative everywhere (for the gradients).
const std::vector<double> kPlain = {-2.25, -1.5, -0.75, -0.125, 0.25, 0.625, 1.375, 2.5};
const std::vector<double> kPositive = {0.0, 1e-40, 1e-30, 0.25, 1.0, 2.5, 1e4, kInf, kNaN, -1.0, -0.0};

// n values, multiples of 1/8 in [-2, 2]: exact in every dtype, few ties.
std::vector<double> pattern(int64_t n, int salt = 0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = static_cast<double>(static_cast<int>((i * 13 + static_cast<size_t>(salt) * 7) % 33) - 16) / 8.0;
  }
  return v;
}

InputSpec floats(std::vector<double> v, Shape shape) { return {std::move(v), std::move(shape)}; }
InputSpec floats(std::vector<double> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return {std::move(v), {n}};
}
InputSpec ints(std::vector<double> v, Shape shape) { return {std::move(v), std::move(shape), Kind::I64, false}; }
InputSpec bools(std::vector<double> v, Shape shape) { return {std::move(v), std::move(shape), Kind::Bool, false}; }

OpFn one(std::function<Tensor(const std::vector<Tensor>&)> f) {
  return [f](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in)}; };
}

void add_unary(std::vector<Case>& cases, const std::string& op, std::function<Tensor(const Tensor&)> f,
               const std::vector<double>& edges = kEdges, json args = json::object()) {
  cases.push_back({op + "/edges", op, args, {floats(edges)}, one([f](auto& x) { return f(x[0]); })});
  cases.push_back({op + "/plain_2d", op, args, {floats(kPlain, {2, 4})}, one([f](auto& x) { return f(x[0]); })});
  cases.push_back({op + "/0dim", op, args, {floats({0.75}, {})}, one([f](auto& x) { return f(x[0]); })});
  cases.push_back({op + "/empty", op, args, {floats({}, {0, 3})}, one([f](auto& x) { return f(x[0]); })});
}

void add_binary(std::vector<Case>& cases, const std::string& op,
                std::function<Tensor(const Tensor&, const Tensor&)> f) {
  auto fn = one([f](auto& x) { return f(x[0], x[1]); });
  // Every pair of a few edge values: a [7, 1] column against a [7] row.
  const std::vector<double> e = {kNaN, kInf, -kInf, 0.0, -0.0, 2.0, -0.5};
  cases.push_back({op + "/edge_pairs", op, json::object(), {floats(e, {7, 1}), floats(e, {7})}, fn});
  cases.push_back(
      {op + "/broadcast", op, json::object(), {floats(kPlain, {2, 1, 4}), floats({1.5, -0.25, 3.0}, {3, 1})}, fn});
  cases.push_back({op + "/ties", op, json::object(), {floats({1, 2, -3, 0.5}), floats({1, -2, -3, 0.25})}, fn});
  cases.push_back({op + "/0dim_operand", op, json::object(), {floats(kPlain), floats({1.25}, {})}, fn});
  // A 0-dim operand of a wider dtype does not widen the result (PyTorch's result_type).
  cases.push_back(
      {op + "/0dim_f64_operand", op, json::object(), {floats(kPlain), InputSpec{{1.25}, {}, Kind::F64, true}}, fn});
  cases.push_back({op + "/f32_tensor_with_run_dtype_0dim",
                   op,
                   json::object(),
                   {InputSpec{kPlain, {8}, Kind::F32, true}, floats({0.75}, {})},
                   fn});
  cases.push_back({op + "/empty", op, json::object(), {floats({}, {0, 2}), floats({1.0, 2.0}, {2})}, fn});
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  // ---- unary
  add_unary(cases, "neg", [](const Tensor& x) { return neg(x); });
  add_unary(cases, "exp", [](const Tensor& x) { return exp(x); });
  add_unary(
      cases, "log", [](const Tensor& x) { return log(x); }, kPositive);
  add_unary(
      cases, "sqrt", [](const Tensor& x) { return sqrt(x); }, kPositive);
  add_unary(
      cases, "rsqrt", [](const Tensor& x) { return rsqrt(x); }, kPositive);
  add_unary(cases, "abs", [](const Tensor& x) { return abs(x); });
  add_unary(cases, "sign", [](const Tensor& x) { return sign(x); });
  add_unary(cases, "reciprocal", [](const Tensor& x) { return reciprocal(x); });
  add_unary(cases, "square", [](const Tensor& x) { return square(x); });
  add_unary(cases, "relu", [](const Tensor& x) { return relu(x); });
  add_unary(cases, "gelu", [](const Tensor& x) { return gelu(x); });
  add_unary(cases, "gelu_tanh", [](const Tensor& x) { return gelu(x, GeluApproximation::Tanh); });
  add_unary(cases, "silu", [](const Tensor& x) { return silu(x); });
  add_unary(cases, "tanh", [](const Tensor& x) { return tanh(x); });
  add_unary(cases, "sigmoid", [](const Tensor& x) { return sigmoid(x); });
  add_unary(cases, "clamp", [](const Tensor& x) { return clamp(x, -1.0, 2.0); }, kEdges, {{"min", -1.0}, {"max", 2.0}});
  add_unary(cases, "clamp_min", [](const Tensor& x) { return clamp(x, 0.5, std::nullopt); }, kEdges, {{"min", 0.5}});
  add_unary(cases, "pow_scalar", [](const Tensor& x) { return pow(x, 2.5); }, kPositive, {{"exponent", 2.5}});
  add_unary(cases, "pow_scalar_neg", [](const Tensor& x) { return pow(x, -1.5); }, kPositive, {{"exponent", -1.5}});
  add_unary(cases, "add_scalar", [](const Tensor& x) { return add(x, 0.1); }, kEdges, {{"other", 0.1}});
  add_unary(cases, "sub_scalar", [](const Tensor& x) { return sub(x, 3.0); }, kEdges, {{"other", 3.0}});
  add_unary(cases, "mul_scalar", [](const Tensor& x) { return mul(x, 0.1); }, kEdges, {{"other", 0.1}});
  add_unary(cases, "div_scalar", [](const Tensor& x) { return div(x, 3.0); }, kEdges, {{"other", 3.0}});
  add_unary(cases, "rsub_scalar", [](const Tensor& x) { return rsub(x, 2.0); }, kEdges, {{"other", 2.0}});
  // ---- binary
  add_binary(cases, "add", [](const Tensor& a, const Tensor& b) { return add(a, b); });
  add_binary(cases, "sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); });
  add_binary(cases, "mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); });
  add_binary(cases, "div", [](const Tensor& a, const Tensor& b) { return div(a, b); });
  add_binary(cases, "pow", [](const Tensor& a, const Tensor& b) { return pow(abs(a), b); });
  add_binary(cases, "maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); });
  add_binary(cases, "minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); });
  for (const char* op : {"eq", "ne", "lt", "le", "gt", "ge"}) {
    const std::string name = op;
    add_binary(cases, name, [name](const Tensor& a, const Tensor& b) {
      if (name == "eq") return eq(a, b);
      if (name == "ne") return ne(a, b);
      if (name == "lt") return lt(a, b);
      if (name == "le") return le(a, b);
      if (name == "gt") return gt(a, b);
      return ge(a, b);
    });
  }
  cases.push_back({"where/broadcast",
                   "where",
                   {},
                   {bools({1, 0, 1, 0}, {4}), floats({kNaN, 1, -kInf, 2}, {4}), floats({3, kInf}, {2, 1})},
                   one([](auto& x) { return where(x[0], x[1], x[2]); })});
  cases.push_back({"masked_fill/broadcast",
                   "masked_fill",
                   {{"value", -1e4}},
                   {floats(kPlain, {2, 4}), bools({1, 0, 0, 1}, {4})},
                   one([](auto& x) { return masked_fill(x[0], x[1], -1e4); })});
  cases.push_back(
      {"logical_and/broadcast", "logical_and", {}, {bools({1, 0, 1, 1}, {4}), bools({1, 0}, {2, 1})}, one([](auto& x) {
         return logical_and(x[0], x[1]);
       })});
  // ---- reductions
  const std::vector<double> with_ties = {3, 1, 3, -2, 0.5, 0.5, -2, 7, kNaN, 1, 2, 2};
  cases.push_back({"sum/all", "sum", {}, {floats(kPlain, {2, 4})}, one([](auto& x) { return sum(x[0]); })});
  cases.push_back({"sum/dims_keepdim",
                   "sum",
                   {{"dim", {0, 2}}, {"keepdim", true}},
                   {floats(with_ties, {2, 2, 3})},
                   one([](auto& x) {
                     return sum(x[0], {0, 2}, true);
                   })});
  cases.push_back({"sum/empty", "sum", {}, {floats({}, {0, 4})}, one([](auto& x) { return sum(x[0]); })});
  cases.push_back({"sum/cancellation", "sum", {}, {floats({1e8, 1, -1e8, 1, 3e-8, 65504}, {6})}, one([](auto& x) {
                     return sum(x[0]);
                   })});
  cases.push_back({"mean/all", "mean", {}, {floats(kPlain, {2, 4})}, one([](auto& x) { return mean(x[0]); })});
  cases.push_back(
      {"mean/dim", "mean", {{"dim", {1}}, {"keepdim", false}}, {floats(with_ties, {3, 4})}, one([](auto& x) {
         return mean(x[0], {1});
       })});
  cases.push_back({"mean/empty", "mean", {}, {floats({}, {0})}, one([](auto& x) { return mean(x[0]); })});
  cases.push_back({"var/unbiased",
                   "var",
                   {{"dim", {1}}, {"correction", 1}, {"keepdim", false}},
                   {floats(kPlain, {2, 4})},
                   one([](auto& x) { return var(x[0], {1}, 1.0); })});
  cases.push_back({"var/population_large_mean",
                   "var",
                   {{"dim", {0}}, {"correction", 0}, {"keepdim", true}, {"tolerance_scale", 1e4}},
                   {floats({1e4 + 0.5, 1e4 - 0.25, 1e4 + 1, 1e4}, {4})},
                   one([](auto& x) { return var(x[0], {0}, 0.0, true); })});
  cases.push_back({"var/all", "var", {{"correction", 1}}, {floats(kPlain)}, one([](auto& x) { return var(x[0]); })});
  cases.push_back(
      {"max/all_ties", "max_all", {}, {floats({1, 3, 3, 0, 3, 2}, {2, 3})}, one([](auto& x) { return max(x[0]); })});
  cases.push_back(
      {"max/all_nan", "max_all", {}, {floats({1, kNaN, 3, kNaN}, {4})}, one([](auto& x) { return max(x[0]); })});
  cases.push_back(
      {"min/all_ties", "min_all", {}, {floats({1, -3, 3, -3, 3, 2}, {2, 3})}, one([](auto& x) { return min(x[0]); })});
  for (const char* which : {"max", "min"}) {
    const bool is_max = std::string(which) == "max";
    cases.push_back({std::string(which) + "/dim_ties_nan",
                     std::string(which) + "_dim",
                     {{"dim", 1}, {"keepdim", false}},
                     {floats(with_ties, {3, 4})},
                     [is_max](const std::vector<Tensor>& x) {
                       const ValuesIndices r = is_max ? max(x[0], 1) : min(x[0], 1);
                       return std::vector<Tensor>{r.values, r.indices};
                     }});
    cases.push_back({std::string(which) + "/dim0_keepdim",
                     std::string(which) + "_dim",
                     {{"dim", 0}, {"keepdim", true}},
                     {floats(with_ties, {3, 4})},
                     [is_max](const std::vector<Tensor>& x) {
                       const ValuesIndices r = is_max ? max(x[0], 0, true) : min(x[0], 0, true);
                       return std::vector<Tensor>{r.values, r.indices};
                     }});
  }
  cases.push_back(
      {"argmax/dim", "argmax", {{"dim", 1}, {"keepdim", false}}, {floats(with_ties, {3, 4})}, one([](auto& x) {
         return argmax(x[0], 1);
       })});
  cases.push_back(
      {"argmax/all", "argmax", {}, {floats({1, 7, 7, 2}, {2, 2})}, one([](auto& x) { return argmax(x[0]); })});
  cases.push_back(
      {"sum_to_size/broadcast", "sum_to_size", {{"size", {1, 4}}}, {floats(kPlain, {2, 4})}, one([](auto& x) {
         return sum_to_size(x[0], {1, 4});
       })});
  // ---- linear algebra
  const std::vector<double> m12 = {0.5, -1, 2, 0.25, -0.75, 1.5, 3, -2, 1, 0.125, -0.5, 2.5};
  cases.push_back({"matmul/2d", "matmul", {}, {floats(m12, {3, 4}), floats(m12, {4, 3})}, one([](auto& x) {
                     return matmul(x[0], x[1]);
                   })});
  cases.push_back({"matmul/vec_mat", "matmul", {}, {floats({1, -2, 0.5}, {3}), floats(m12, {3, 4})}, one([](auto& x) {
                     return matmul(x[0], x[1]);
                   })});
  cases.push_back({"matmul/batched_broadcast",
                   "matmul",
                   {},
                   {floats(m12, {2, 1, 2, 3}), floats(pattern(36), {3, 3, 4})},
                   one([](auto& x) { return matmul(x[0], x[1]); })});
  cases.push_back({"matmul/nan_inf",
                   "matmul",
                   {},
                   {floats({kNaN, 1, 2, 3}, {2, 2}), floats({kInf, 0, 1, 1}, {2, 2})},
                   one([](auto& x) { return matmul(x[0], x[1]); })});
  cases.push_back({"matmul/k0", "matmul", {}, {floats({}, {2, 0}), floats({}, {0, 3})}, one([](auto& x) {
                     return matmul(x[0], x[1]);
                   })});
  cases.push_back({"bmm/plain", "bmm", {}, {floats(m12, {2, 2, 3}), floats(m12, {2, 3, 2})}, one([](auto& x) {
                     return bmm(x[0], x[1]);
                   })});
  for (const auto& [name, act] :
       std::vector<std::pair<std::string, LinearActivation>>{{"none", LinearActivation::None},
                                                             {"relu", LinearActivation::Relu},
                                                             {"gelu", LinearActivation::Gelu},
                                                             {"gelu_tanh", LinearActivation::GeluTanh}}) {
    cases.push_back({"linear/" + name,
                     "linear",
                     {{"activation", name}},
                     {floats(m12, {2, 2, 3}), floats(m12, {4, 3}), floats({0.25, -1, 1e-3, 2}, {4})},
                     one([act = act](auto& x) { return linear(x[0], x[1], x[2], act); })});
  }
  cases.push_back({"linear/no_bias_nan",
                   "linear",
                   {{"activation", "relu"}},
                   {floats({kNaN, 1, 2, 3, 4, 5}, {2, 3}), floats(m12, {4, 3})},
                   one([](auto& x) { return linear(x[0], x[1], Tensor(), LinearActivation::Relu); })});
  // ---- neural-network functions
  const std::vector<double> logits = {2, -1, 0.5, 3, 3, 0, 1e4, 1e4 + 1, 1e4 - 2, -5, 0.25, 1};
  for (const char* op : {"softmax", "log_softmax"}) {
    const bool log = std::string(op) == "log_softmax";
    auto f = [log](const Tensor& x, int64_t dim) { return log ? log_softmax(x, dim) : softmax(x, dim); };
    cases.push_back({std::string(op) + "/last", op, {{"dim", -1}}, {floats(logits, {4, 3})}, one([f](auto& x) {
                       return f(x[0], -1);
                     })});
    cases.push_back({std::string(op) + "/dim0", op, {{"dim", 0}}, {floats(logits, {4, 3})}, one([f](auto& x) {
                       return f(x[0], 0);
                     })});
    cases.push_back({std::string(op) + "/nan_inf",
                     op,
                     {{"dim", 1}},
                     {floats({1, kNaN, 2, -kInf, 0, 1, -kInf, -kInf, kInf, 1, 2, 3}, {4, 3})},
                     one([f](auto& x) { return f(x[0], 1); }),
                     {kF64, kF32, kF16, kBF16},
                     false});
    cases.push_back(
        {std::string(op) + "/0dim", op, {{"dim", 0}}, {floats({1.5}, {})}, one([f](auto& x) { return f(x[0], 0); })});
  }
  cases.push_back({"layer_norm/affine",
                   "layer_norm",
                   {{"normalized_shape", {4}}, {"eps", 1e-5}},
                   {floats(m12, {3, 4}), floats({1, 0.5, -1, 2}, {4}), floats({0, 0.25, -0.5, 1}, {4})},
                   one([](auto& x) { return layer_norm(x[0], {4}, x[1], x[2], 1e-5); })});
  cases.push_back({"layer_norm/large_mean_2d_shape",
                   "layer_norm",
                   {{"normalized_shape", {2, 3}}, {"eps", 1e-5}, {"tolerance_scale", 1e4}},
                   {floats({1e4, 1e4 + 1, 1e4 - 1, 1e4 + 0.5, 1e4, 1e4 + 2, 1, 2, 3, 4, 5, 6}, {2, 2, 3})},
                   one([](auto& x) {
                     return layer_norm(x[0], {2, 3}, Tensor(), Tensor(), 1e-5);
                   })});
  cases.push_back({"layer_norm/nan",
                   "layer_norm",
                   {{"normalized_shape", {3}}, {"eps", 1e-5}},
                   {floats({1, kNaN, 2, 0, 1, 2}, {2, 3})},
                   one([](auto& x) { return layer_norm(x[0], {3}, Tensor(), Tensor(), 1e-5); })});
  for (const auto& [name, red] : std::vector<std::pair<std::string, Reduction>>{
           {"mean", Reduction::Mean}, {"sum", Reduction::Sum}, {"none", Reduction::None}}) {
    cases.push_back({"cross_entropy/" + name,
                     "cross_entropy",
                     {{"reduction", name}, {"ignore_index", -100}, {"label_smoothing", 0.0}},
                     {floats(logits, {4, 3}), ints({2, 0, -100, 1}, {4})},
                     [red = red](const std::vector<Tensor>& x) {
                       CrossEntropyOptions o;
                       o.reduction = red;
                       return std::vector<Tensor>{cross_entropy(x[0], x[1], o)};
                     }});
  }
  // The fused head, against PyTorch's cross_entropy(linear(...)); chunks of 3 rows split the 4.
  for (const auto& [name, red] :
       std::vector<std::pair<std::string, Reduction>>{{"mean", Reduction::Mean}, {"sum", Reduction::Sum}}) {
    cases.push_back({"linear_cross_entropy/" + name,
                     "linear_cross_entropy",
                     {{"reduction", name}, {"ignore_index", -100}, {"label_smoothing", 0.1}},
                     {floats(m12, {4, 3}), floats({0.5, -1, 2, 0.25, 1, -0.5, 3, 0, -2, 1, 1, 1, -1, 0.75, 0}, {5, 3}),
                      ints({2, 0, -100, 4}, {4})},
                     [red = red](const std::vector<Tensor>& x) {
                       CrossEntropyOptions o;
                       o.reduction = red;
                       o.label_smoothing = 0.1;
                       return std::vector<Tensor>{linear_cross_entropy(x[0], x[1], x[2], o, 3)};
                     }});
  }
  cases.push_back({"cross_entropy/smoothing_offset",
                   "cross_entropy",
                   {{"reduction", "mean"}, {"ignore_index", -100}, {"label_smoothing", 0.2}},
                   {floats({1e4, 1e4 + 1, 1e4 - 1, 1e4 + 3, 5, 1, 2, 3}, {2, 4}), ints({3, 0}, {2})},
                   [](const std::vector<Tensor>& x) {
                     CrossEntropyOptions o;
                     o.label_smoothing = 0.2;
                     return std::vector<Tensor>{cross_entropy(x[0], x[1], o)};
                   }});
  cases.push_back({"cross_entropy/nan_row",
                   "cross_entropy",
                   {{"reduction", "none"}, {"ignore_index", -100}, {"label_smoothing", 0.0}},
                   {floats({1, kNaN, 2, 0, 1, 2}, {2, 3}), ints({0, 1}, {2})},
                   [](const std::vector<Tensor>& x) {
                     CrossEntropyOptions o;
                     o.reduction = Reduction::None;
                     return std::vector<Tensor>{cross_entropy(x[0], x[1], o)};
                   }});
  cases.push_back({"cross_entropy/unbatched",
                   "cross_entropy",
                   {{"reduction", "mean"}, {"ignore_index", -100}, {"label_smoothing", 0.0}},
                   {floats({0.5, 2, -1}, {3}), ints({1}, {})},
                   one([](auto& x) { return cross_entropy(x[0], x[1]); })});
  for (const auto& [name, red] : std::vector<std::pair<std::string, Reduction>>{
           {"mean", Reduction::Mean}, {"sum", Reduction::Sum}, {"none", Reduction::None}}) {
    cases.push_back({"mse_loss/" + name,
                     "mse_loss",
                     {{"reduction", name}},
                     {floats(kPlain, {2, 4}), floats({0.5, 1, -2, 0, 3, 0.25, 1, -1}, {2, 4})},
                     one([red = red](auto& x) { return mse_loss(x[0], x[1], red); })});
  }
  cases.push_back(
      {"embedding/repeats", "embedding", {}, {floats(m12, {4, 3}), ints({3, 0, 3, 1, 3, 2}, {2, 3})}, one([](auto& x) {
         return embedding(x[0], x[1]);
       })});
  // ---- shape and indexing
  cases.push_back({"cat/dim1",
                   "cat",
                   {{"dim", 1}},
                   {floats({1, 2, 3, 4}, {2, 2}), floats({kNaN, 5, 6, 7, 8, 9}, {2, 3})},
                   one([](auto& x) {
                     return cat({x[0], x[1]}, 1);
                   })});
  cases.push_back(
      {"stack/dim0", "stack", {{"dim", 0}}, {floats({1, 2, 3}, {3}), floats({4, 5, 6}, {3})}, one([](auto& x) {
         return stack({x[0], x[1]}, 0);
       })});
  cases.push_back({"split/uneven",
                   "split",
                   {{"split_size", 4}, {"dim", 1}},
                   {floats(m12, {2, 6})},
                   [](const std::vector<Tensor>& x) { return split(x[0], 4, 1); }});
  cases.push_back({"index_select/repeats",
                   "index_select",
                   {{"dim", 0}},
                   {floats(m12, {4, 3}), ints({2, 2, 0}, {3})},
                   one([](auto& x) { return index_select(x[0], 0, x[1]); })});
  cases.push_back(
      {"gather/dim1", "gather", {{"dim", 1}}, {floats(m12, {3, 4}), ints({0, 3, 3, 1, 2, 0}, {3, 2})}, one([](auto& x) {
         return gather(x[0], 1, x[1]);
       })});
  cases.push_back({"views/permute_slice_expand", "views", {}, {floats(m12, {2, 3, 2})}, one([](auto& x) {
                     return x[0].permute({2, 0, 1}).slice(2, 0, 3, 2).unsqueeze(1).expand({2, 3, 2, 2}).contiguous();
                   })});
  cases.push_back({"views/reshape_transpose_select", "views2", {}, {floats(m12, {3, 4})}, one([](auto& x) {
                     return x[0].t().reshape({2, 6}).select(1, 4).squeeze();
                   })});
  // ---- convolution and pooling
  std::vector<double> image(2 * 2 * 5 * 5);
  for (size_t i = 0; i < image.size(); ++i) image[i] = static_cast<double>(static_cast<int>((i * 37) % 17) - 8) / 4.0;
  std::vector<double> kernel(4 * 1 * 3 * 3);
  for (size_t i = 0; i < kernel.size(); ++i) kernel[i] = static_cast<double>(static_cast<int>((i * 5) % 9) - 4) / 8.0;
  cases.push_back({"conv2d/stride_pad_dilation_groups",
                   "conv2d",
                   {{"stride", {2, 1}}, {"padding", {1, 2}}, {"dilation", {1, 2}}, {"groups", 2}},
                   {floats(image, {2, 2, 5, 5}), floats(kernel, {4, 1, 3, 3}), floats({0.5, -0.25, 0, 1}, {4})},
                   one([](auto& x) {
                     return conv2d(x[0], x[1], x[2], {2, 1}, {1, 2}, {1, 2}, 2);
                   })});
  cases.push_back({"max_pool2d/pad_ties",
                   "max_pool2d",
                   {{"kernel", {3, 3}}, {"stride", {2, 2}}, {"padding", {1, 1}}},
                   {floats(image, {2, 2, 5, 5})},
                   one([](auto& x) { return max_pool2d(x[0], 3, 2, 1); })});
  cases.push_back({"avg_pool2d/pad",
                   "avg_pool2d",
                   {{"kernel", {2, 3}}, {"stride", {2, 1}}, {"padding", {1, 1}}, {"count_include_pad", true}},
                   {floats(image, {2, 2, 5, 5})},
                   one([](auto& x) {
                     return avg_pool2d(x[0], {2, 3}, {2, 1}, {1, 1}, true);
                   })});
  cases.push_back({"avg_pool2d/exclude_pad",
                   "avg_pool2d",
                   {{"kernel", {3, 3}}, {"stride", {2, 2}}, {"padding", {1, 1}}, {"count_include_pad", false}},
                   {floats(image, {2, 2, 5, 5})},
                   one([](auto& x) { return avg_pool2d(x[0], 3, 2, 1, false); })});
  cases.push_back({"adaptive_avg_pool2d/uneven",
                   "adaptive_avg_pool2d",
                   {{"output_size", {2, 3}}},
                   {floats(image, {2, 2, 5, 5})},
                   one([](auto& x) {
                     return adaptive_avg_pool2d(x[0], {2, 3});
                   })});
  InputSpec running_mean{{0.5, -0.25}, {2}, Kind::F32, false}, running_var{{1.5, 0.75}, {2}, Kind::F32, false};
  cases.push_back(
      {"batch_norm/train",
       "batch_norm",
       {{"training", true}, {"momentum", 0.1}, {"eps", 1e-5}},
       {floats(image, {2, 2, 5, 5}), running_mean, running_var, floats({1.5, -0.5}, {2}), floats({0.25, 1}, {2})},
       [](const std::vector<Tensor>& x) {
         const Tensor y = batch_norm(x[0], x[1], x[2], x[3], x[4], true, 0.1, 1e-5);
         return std::vector<Tensor>{y, x[1], x[2]};  // the updated running statistics too
       }});
  cases.push_back(
      {"batch_norm/eval",
       "batch_norm",
       {{"training", false}, {"momentum", 0.1}, {"eps", 1e-5}},
       {floats(image, {2, 2, 5, 5}), running_mean, running_var, floats({1.5, -0.5}, {2}), floats({0.25, 1}, {2})},
       [](const std::vector<Tensor>& x) {
         return std::vector<Tensor>{batch_norm(x[0], x[1], x[2], x[3], x[4], false, 0.1, 1e-5)};
       }});
  // ---- attention (PyTorch 1.13 has no F.scaled_dot_product_attention: the
  // twin is PyTorch 2's documented math definition)
  const std::vector<double> qv = pattern(2 * 2 * 3 * 4, 1), kv = pattern(2 * 2 * 5 * 4, 2),
                            vv = pattern(2 * 2 * 5 * 3, 3);
  const auto qkv = [&] {
    return std::vector<InputSpec>{floats(qv, {2, 2, 3, 4}), floats(kv, {2, 2, 5, 4}), floats(vv, {2, 2, 5, 3})};
  };
  cases.push_back({"sdpa/causal_top_left", "sdpa", {{"is_causal", true}}, qkv(), one([](auto& x) {
                     AttentionOptions o;
                     o.is_causal = true;
                     return scaled_dot_product_attention(x[0], x[1], x[2], o);
                   })});
  {
    std::vector<InputSpec> in = qkv();
    in.push_back(bools({1, 0, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 1}, {3, 5}));
    cases.push_back({"sdpa/bool_mask", "sdpa", {{"mask", "bool"}, {"scale", 0.3}}, in, one([](auto& x) {
                       AttentionOptions o;
                       o.attn_mask = x[3];
                       o.scale = 0.3;
                       return scaled_dot_product_attention(x[0], x[1], x[2], o);
                     })});
  }
  {
    std::vector<InputSpec> in = qkv();
    in.push_back(floats(pattern(15, 4), {3, 5}));
    cases.push_back({"sdpa/float_mask", "sdpa", {{"mask", "float"}}, in, one([](auto& x) {
                       AttentionOptions o;
                       o.attn_mask = x[3];
                       return scaled_dot_product_attention(x[0], x[1], x[2], o);
                     })});
  }
  {
    std::vector<InputSpec> in = qkv();
    in.push_back(bools({0, 0, 0, 1, 1, 1, 1, 1, 1, 1}, {2, 5}));  // batch 1: every key is padding -> NaN
    cases.push_back({"sdpa/key_padding_all_padded_row",
                     "sdpa",
                     {{"padding", true}},
                     in,
                     one([](auto& x) {
                       AttentionOptions o;
                       o.key_padding_mask = x[3];
                       return scaled_dot_product_attention(x[0], x[1], x[2], o);
                     }),
                     {kF64, kF32, kF16, kBF16},
                     false});
  }
  cases.push_back({"copy_/broadcast_cast",
                   "copy_",
                   {},
                   {InputSpec{{0, 0, 0, 0, 0, 0}, {2, 3}, Kind::F32, false}, floats({kNaN, 1e30, -0.1}, {3})},
                   [](const std::vector<Tensor>& x) {
                     copy_(x[0], x[1]);
                     return std::vector<Tensor>{x[0]};
                   },
                   {kF64, kF32, kF16, kBF16},
                   false});
  cases.push_back({"fill_/value",
                   "fill_",
                   {{"value", 1e-3}},
                   {floats({1, 2, 3, 4}, {2, 2})},
                   [](const std::vector<Tensor>& x) {
                     fill_(x[0], 1e-3);
                     return std::vector<Tensor>{x[0]};
                   },
                   {kF64, kF32, kF16, kBF16},
                   false});
  cases.push_back({"dropout/identity_eval", "dropout_eval", {{"p", 0.5}}, {floats(kEdges)}, one([](auto& x) {
                     return dropout(x[0], 0.5, false);
                   })});
  return cases;
}

// ---------------------------------------------------------------- the reference models

// Model tensors are large: their values go to a binary file of little-endian
// f32 (or f64) beside the JSON, which records where each one starts.
class Blob {
 public:
  explicit Blob(const std::string& path) : path_(path), out_(path, std::ios::binary) {}
  json put(const Tensor& t) {
    const Tensor host = t.detach().to(kCPU).contiguous();
    const int64_t offset = bytes_;
    out_.write(static_cast<const char*>(host.data_ptr()), static_cast<std::streamsize>(host.nbytes()));
    bytes_ += host.nbytes();
    return {{"dtype", std::string(dtype_name(t.dtype()))}, {"shape", t.sizes()}, {"offset", offset}};
  }
  bool ok() const { return static_cast<bool>(out_); }

 private:
  std::string path_;
  std::ofstream out_;
  int64_t bytes_ = 0;
};

// One training-mode forward and backward of a reference model on a fixed
// batch: its parameters and buffers before, the logits, the loss, every
// parameter gradient and the buffers after (BatchNorm's running statistics).
json run_model(const std::string& name, Device device, Blob& blob) {
  json record = {{"model", name}, {"device", device.str()}, {"dtype", "f32"}};
  manual_seed(7);
  const bool gpt = name == "gpt-tiny";
  const std::shared_ptr<nn::Module> model =
      gpt ? std::make_shared<models::Gpt>(models::gpt_config(name)) : models::make_model(name);
  model->to(device);
  model->train();
  json params = json::object(), buffers_before = json::object();
  for (const auto& [n, p] : model->named_parameters()) params[n] = blob.put(p);
  for (const auto& [n, b] : model->named_buffers()) buffers_before[n] = blob.put(b);
  const int64_t batch = 4;
  Tensor x, target;
  if (gpt) {  // two sequences of 16 bytes, predicting the next byte
    std::vector<int64_t> in, next;
    for (int64_t i = 0; i < 2 * 16; ++i) {
      in.push_back((i * 37 + 11) % 256);
      next.push_back((i * 37 + 48) % 256);
    }
    x = from_vector(in, {2, 16}, kI64, device);
    target = from_vector(next, {32}, kI64, device);
  } else {
    std::vector<double> pixels(static_cast<size_t>(batch * 28 * 28));
    for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<double>((i * 7919) % 256) / 255.0;
    x = from_vector(pixels, {batch, 1, 28, 28}, kF32, device);
    target = from_vector(std::vector<int64_t>{3, 7, 0, 9}, {batch}, kI64, device);
  }
  const Tensor out = model->forward(x);
  const Tensor logits = gpt ? out.reshape({32, 256}) : out;
  const Tensor loss = cross_entropy(logits, target);
  loss.backward();
  json grads = json::object(), buffers_after = json::object();
  for (const auto& [n, p] : model->named_parameters()) grads[n] = blob.put(p.grad());
  for (const auto& [n, b] : model->named_buffers()) buffers_after[n] = blob.put(b);
  record["params"] = params;
  record["buffers_before"] = buffers_before;
  record["input"] = blob.put(x);
  record["target"] = blob.put(target);
  record["logits"] = blob.put(logits);
  record["loss"] = loss.item<double>();
  record["grads"] = grads;
  record["buffers_after"] = buffers_after;
  return record;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: parity_dump out.jsonl\n");
    return 2;
  }
  std::ofstream out(argv[1]);
  if (!out) {
    std::fprintf(stderr, "parity_dump: cannot write %s\n", argv[1]);
    return 1;
  }
  int records = 0;
  for (const Case& c : all_cases()) {
    for (Device device : {kCPU, kSIM}) {
      if (device.is_sim() && !c.on_sim) continue;
      for (DType dtype : c.dtypes) {
        out << run_case(c, dtype, device).dump() << "\n";
        ++records;
      }
    }
  }
  // The reference models, into <out>.models.jsonl and <out>.models.bin.
  const std::string models_path = std::string(argv[1]) + ".models.jsonl";
  std::ofstream models_out(models_path);
  Blob blob(std::string(argv[1]) + ".models.bin");
  int model_records = 0;
  for (const char* name : {"mlp", "cnn", "resnet", "gpt-tiny"}) {
    for (Device device : {kCPU, kSIM}) {
      models_out << run_model(name, device, blob).dump() << "\n";
      ++model_records;
    }
  }
  std::printf("parity_dump: %d op records in %s, %d model records in %s\n", records, argv[1], model_records,
              models_path.c_str());
  return out && models_out && blob.ok() ? 0 : 1;
}
