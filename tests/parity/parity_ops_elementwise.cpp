// The parity cases of the elementwise ops (unary, binary, comparisons,
// where and masks) and of the reductions.
#include <string>
#include <vector>

#include "parity_cases.h"

using namespace mt;

namespace parity {

namespace {

const std::vector<double> kPositive = {0.0, 1e-40, 1e-30, 0.25, 1.0, 2.5, 1e4, kInf, kNaN, -1.0, -0.0};

void add_unary(std::vector<Case>& cases, const std::string& op, std::function<Tensor(const Tensor&)> f,
               const std::vector<double>& edges = kEdges, json args = json::object()) {
  cases.push_back({op + "/edges", op, args, {floats(edges)}, one([f](auto& x) { return f(x[0]); })});
  cases.push_back({op + "/plain_2d", op, args, {floats(kPlain, {2, 4})}, one([f](auto& x) { return f(x[0]); })});
  cases.push_back({op + "/0dim", op, args, {floats({0.75}, {})}, one([f](auto& x) { return f(x[0]); })});
  cases.push_back({op + "/empty", op, args, {floats({}, {0, 3})}, one([f](auto& x) { return f(x[0]); })});
}

// correctly_rounded: the op's result is the exact one rounded once (add, mul,
// maximum, a comparison...) in both libraries, so it can be compared bit for bit.
void add_binary(std::vector<Case>& cases, const std::string& op, std::function<Tensor(const Tensor&, const Tensor&)> f,
                bool correctly_rounded = true) {
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
  // PyTorch casts a 0-dim tensor operand to the result dtype before the op:
  // f16 0.1 + f32[] 0.05 is 0.14990234375 there, not the once-rounded
  // 0.1500244140625. One ulp is the whole difference, within any tolerance,
  // so the outputs must match bit for bit (exact_forward).
  if (correctly_rounded) {
    cases.push_back({op + "/f32_0dim_rounded_to_run_dtype_first",
                     op,
                     {{"exact_forward", true}},
                     {floats({0.1, 0.15, 0.3, 1.1, 0.05}), InputSpec{{0.05}, {}, Kind::F32, true}},
                     fn});
  }
}

}  // namespace

void add_unary_cases(std::vector<Case>& cases) {
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
  add_unary(cases, "sin", [](const Tensor& x) { return sin(x); });
  add_unary(cases, "cos", [](const Tensor& x) { return cos(x); });
  add_unary(cases, "clamp", [](const Tensor& x) { return clamp(x, -1.0, 2.0); }, kEdges, {{"min", -1.0}, {"max", 2.0}});
  add_unary(cases, "clamp_min", [](const Tensor& x) { return clamp(x, 0.5, std::nullopt); }, kEdges, {{"min", 0.5}});
  add_unary(cases, "pow_scalar", [](const Tensor& x) { return pow(x, 2.5); }, kPositive, {{"exponent", 2.5}});
  add_unary(cases, "pow_scalar_neg", [](const Tensor& x) { return pow(x, -1.5); }, kPositive, {{"exponent", -1.5}});
  add_unary(cases, "add_scalar", [](const Tensor& x) { return add(x, 0.1); }, kEdges, {{"other", 0.1}});
  add_unary(cases, "sub_scalar", [](const Tensor& x) { return sub(x, 3.0); }, kEdges, {{"other", 3.0}});
  add_unary(cases, "mul_scalar", [](const Tensor& x) { return mul(x, 0.1); }, kEdges, {{"other", 0.1}});
  add_unary(cases, "div_scalar", [](const Tensor& x) { return div(x, 3.0); }, kEdges, {{"other", 3.0}});
  add_unary(cases, "rsub_scalar", [](const Tensor& x) { return rsub(x, 2.0); }, kEdges, {{"other", 2.0}});
}

void add_binary_cases(std::vector<Case>& cases) {
  add_binary(cases, "add", [](const Tensor& a, const Tensor& b) { return add(a, b); });
  add_binary(cases, "sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); });
  add_binary(cases, "mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); });
  add_binary(cases, "div", [](const Tensor& a, const Tensor& b) { return div(a, b); });
  add_binary(
      cases, "pow", [](const Tensor& a, const Tensor& b) { return pow(abs(a), b); }, /*correctly_rounded=*/false);
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
}

void add_reduction_cases(std::vector<Case>& cases) {
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
  cases.push_back(
      {"cumsum/dim1", "cumsum", {{"dim", 1}}, {floats(kPlain, {2, 4})}, one([](auto& x) { return cumsum(x[0], 1); })});
  cases.push_back({"cumsum/dim0_edges", "cumsum", {{"dim", 0}}, {floats(kEdges, {5, 4})}, one([](auto& x) {
                     return cumsum(x[0], 0);
                   })});
  cases.push_back({"cumsum/ints", "cumsum", {{"dim", -1}}, {ints({3, -1, 4, 1, -5, 9}, {2, 3})}, one([](auto& x) {
                     return cumsum(x[0], -1);
                   })});
  cases.push_back({"outer/vectors", "outer", {}, {floats(kPlain), floats({1.5, -0.25, 3.0})}, one([](auto& x) {
                     return outer(x[0], x[1]);
                   })});
  // Distinct values for topk: PyTorch's topk does not promise an order among ties.
  const std::vector<double> distinct = {0.5, -1.25, 3.0, 2.0, -0.75, 1.0, 4.5, -2.0, 0.25, 1.5, -3.5, 2.75};
  for (bool largest : {true, false}) {
    cases.push_back({std::string("topk/") + (largest ? "largest" : "smallest"),
                     "topk",
                     {{"k", 3}, {"dim", 1}, {"largest", largest}},
                     {floats(distinct, {3, 4})},
                     [largest](const std::vector<Tensor>& x) {
                       const ValuesIndices r = topk(x[0], 3, 1, largest);
                       return std::vector<Tensor>{r.values, r.indices};
                     }});
  }
  cases.push_back({"topk/dim0",
                   "topk",
                   {{"k", 2}, {"dim", 0}, {"largest", true}},
                   {floats(distinct, {3, 4})},
                   [](const std::vector<Tensor>& x) {
                     const ValuesIndices r = topk(x[0], 2, 0);
                     return std::vector<Tensor>{r.values, r.indices};
                   }});
  // sort is stable here, so ties and NaN (the largest value) have one right order.
  const std::vector<double> ties_nan = {2, kNaN, -1, 2, 0.5, -kInf, kNaN, 2, 0.5, kInf, -1, 3};
  for (bool descending : {false, true}) {
    cases.push_back({std::string("sort/") + (descending ? "descending" : "ascending") + "_ties_nan",
                     "sort",
                     {{"dim", -1}, {"descending", descending}},
                     {floats(ties_nan, {2, 6})},
                     [descending](const std::vector<Tensor>& x) {
                       const ValuesIndices r = sort(x[0], -1, descending);
                       return std::vector<Tensor>{r.values, r.indices};
                     }});
  }
  // One positive weight per row: the only draw either library can make.
  cases.push_back({"multinomial/certain",
                   "multinomial_certain",
                   {},
                   {InputSpec{{0, 0, 2.5, 0, 0, 1e-3, 0, 0}, {2, 4}, Kind::Float, false}},
                   one([](auto& x) { return multinomial(x[0], 1); }),
                   {kF64, kF32},
                   false});
  cases.push_back(
      {"argsort/dim0", "argsort", {{"dim", 0}, {"descending", true}}, {floats(ties_nan, {4, 3})}, one([](auto& x) {
         return argsort(x[0], 0, true);
       })});
}

}  // namespace parity
