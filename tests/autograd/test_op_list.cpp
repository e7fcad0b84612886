// autograd/op_list.h is the index a newcomer reads to learn what each op's
// backward keeps alive (its last column, amp::saved_for_backward). These tests
// hold that column to the rules in autograd/ops_*.cpp: a row that says
// "output" while its rule keeps the input (or says "nothing" while the rule
// keeps a tensor) fails here, as does a rule changed to save more without its
// row saying so.
#include <algorithm>
#include <catch2/catch.hpp>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "mixtape.h"
#include "test_util.h"

using namespace mt;

namespace {

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

// The tensors a saves column names: the words before its first "(" or ";",
// split at commas ("input, weight (compute dtype); ..." -> input, weight).
// "nothing ..." names none.
std::vector<std::string> named_saves(std::string_view saves) {
  const std::string_view list = saves.substr(0, saves.find_first_of("(;"));
  std::vector<std::string> words;
  if (list.starts_with("nothing")) return words;
  size_t at = 0;
  while (at < list.size()) {
    const size_t comma = std::min(list.find(',', at), list.size());
    std::string_view word = list.substr(at, comma - at);
    while (!word.empty() && word.front() == ' ') word.remove_prefix(1);
    while (!word.empty() && word.back() == ' ') word.remove_suffix(1);
    if (!word.empty()) words.emplace_back(word);
    at = comma + 1;
  }
  return words;
}

// One call of a row's op on the CPU, in f32 without autocast, with every
// floating input an intermediate (so saving it keeps it alive) made from a
// leaf that requires grad. `bytes` says what each word the row may name
// costs in this call; "output" is the tensor the op returns.
struct Probe {
  amp::Op op;
  std::vector<Shape> shapes;
  OpFn fn;
  std::map<std::string, int64_t> bytes;
};

int64_t f32_bytes(const Shape& s) { return shape_numel(s) * 4; }
int64_t i64_bytes(const Shape& s) { return shape_numel(s) * 8; }

std::vector<Probe> probes() {
  const Shape v{64, 64};
  const int64_t vb = f32_bytes(v);
  const std::map<std::string, int64_t> unary{{"input", vb}, {"output", vb}};
  const std::map<std::string, int64_t> binary{{"a", vb}, {"b", vb}, {"output", vb}};
  const Shape image{2, 4, 8, 8};
  std::vector<Probe> p = {
      // lower precision (run here in f32: autocast is off)
      {amp::Op::Bmm,
       {{2, 8, 16}, {2, 16, 4}},
       [](auto& x) { return bmm(x[0], x[1]); },
       {{"a", f32_bytes({2, 8, 16})}, {"b", f32_bytes({2, 16, 4})}, {"output", f32_bytes({2, 8, 4})}}},
      {amp::Op::Linear,
       {v, {32, 64}},
       [](auto& x) { return linear(x[0], x[1]); },
       {{"input", vb}, {"weight", f32_bytes({32, 64})}, {"output", f32_bytes({64, 32})}}},
      {amp::Op::Conv2d,
       {{2, 3, 8, 8}, {4, 3, 3, 3}},
       [](auto& x) { return conv2d(x[0], x[1]); },
       {{"input", f32_bytes({2, 3, 8, 8})}, {"weight", f32_bytes({4, 3, 3, 3})}, {"output", f32_bytes({2, 4, 6, 6})}}},
      {amp::Op::LinearCrossEntropy,
       {{8, 16}, {32, 16}},
       [](auto& x) { return linear_cross_entropy(x[0], x[1], full({8}, 3.0, kI64)); },
       {{"hidden", f32_bytes({8, 16})},
        {"weight", f32_bytes({32, 16})},
        {"target", i64_bytes({8})},
        {"stats", f32_bytes({8, 2})},
        {"count", 4}}},
      // fp32
      {amp::Op::Exp, {v}, [](auto& x) { return exp(x[0]); }, unary},
      {amp::Op::Log, {v}, [](auto& x) { return log(x[0]); }, unary},
      {amp::Op::Pow, {v, v}, [](auto& x) { return pow(x[0], x[1]); }, binary},
      {amp::Op::Reciprocal, {v}, [](auto& x) { return reciprocal(x[0]); }, unary},
      {amp::Op::Rsqrt, {v}, [](auto& x) { return rsqrt(x[0]); }, unary},
      {amp::Op::Softmax, {v}, [](auto& x) { return softmax(x[0], -1); }, unary},
      {amp::Op::LogSoftmax, {v}, [](auto& x) { return log_softmax(x[0], -1); }, unary},
      {amp::Op::LayerNorm,
       {{16, 64}, {64}, {64}},
       [](auto& x) { return layer_norm(x[0], {64}, x[1], x[2]); },
       {{"input", f32_bytes({16, 64})},
        {"weight", f32_bytes({64})},
        {"mean", f32_bytes({16})},
        {"rstd", f32_bytes({16})},
        {"output", f32_bytes({16, 64})}}},
      {amp::Op::RmsNorm,
       {{16, 64}, {64}},
       [](auto& x) { return rms_norm(x[0], {64}, x[1]); },
       {{"input", f32_bytes({16, 64})},
        {"weight", f32_bytes({64})},
        {"rstd", f32_bytes({16})},
        {"output", f32_bytes({16, 64})}}},
      {amp::Op::CrossEntropy,
       {{8, 32}},
       [](auto& x) { return cross_entropy(x[0], full({8}, 3.0, kI64)); },
       {{"logits", f32_bytes({8, 32})},
        {"target", i64_bytes({8})},
        {"stats", f32_bytes({8, 2})},
        {"count", 4},
        {"output", 4}}},
      {amp::Op::Sum, {v}, [](auto& x) { return sum(x[0]); }, {{"input", vb}, {"output", 4}}},
      {amp::Op::Mean, {v}, [](auto& x) { return mean(x[0]); }, {{"input", vb}, {"output", 4}}},
      {amp::Op::Var, {v}, [](auto& x) { return var(x[0]); }, {{"input", vb}, {"output", 4}}},
      {amp::Op::Cumsum, {v}, [](auto& x) { return cumsum(x[0], 1); }, unary},
      // promote
      {amp::Op::Add, {v, v}, [](auto& x) { return add(x[0], x[1]); }, binary},
      {amp::Op::Sub, {v, v}, [](auto& x) { return sub(x[0], x[1]); }, binary},
      {amp::Op::Rsub, {v}, [](auto& x) { return rsub(x[0], 2.0); }, unary},
      {amp::Op::Mul, {v, v}, [](auto& x) { return mul(x[0], x[1]); }, binary},
      {amp::Op::Div, {v, v}, [](auto& x) { return div(x[0], x[1]); }, binary},
      {amp::Op::Where,
       {v, v},
       [](auto& x) { return where(gt(x[0], 0.5), x[0], x[1]); },
       {{"condition", shape_numel(v)}, {"a", vb}, {"b", vb}, {"output", vb}}},
      {amp::Op::Cat,
       {v, v},
       [](auto& x) {
         return cat({x[0], x[1]}, 0);
       },
       {{"output", 2 * vb}}},
      {amp::Op::Maximum, {v, v}, [](auto& x) { return maximum(x[0], x[1]); }, binary},
      {amp::Op::Minimum, {v, v}, [](auto& x) { return minimum(x[0], x[1]); }, binary},
      // the input's dtype
      {amp::Op::BatchNorm,
       {image, {4}, {4}},
       [](auto& x) { return batch_norm(x[0], Tensor(), Tensor(), x[1], x[2], true, 0.1, 1e-5); },
       {{"input", f32_bytes(image)},
        {"weight", f32_bytes({4})},
        {"mean", f32_bytes({4})},
        {"invstd", f32_bytes({4})},
        {"output", f32_bytes(image)}}},
      {amp::Op::SyncBatchNorm,
       {image, {4}, {4}},
       [](auto& x) {
         return sync_batch_norm(x[0], Tensor(), Tensor(), x[1], x[2], 0.1, 1e-5, [](const Tensor&) {});
       },
       {{"input", f32_bytes(image)},
        {"weight", f32_bytes({4})},
        {"mean", f32_bytes({4})},
        {"invstd", f32_bytes({4})},
        {"count", f32_bytes({1})},
        {"output", f32_bytes(image)}}},
      {amp::Op::Neg, {v}, [](auto& x) { return neg(x[0]); }, unary},
      {amp::Op::Sqrt, {v}, [](auto& x) { return sqrt(x[0]); }, unary},
      {amp::Op::Abs, {v}, [](auto& x) { return abs(x[0]); }, unary},
      {amp::Op::Sign, {v}, [](auto& x) { return sign(x[0]); }, unary},
      {amp::Op::Square, {v}, [](auto& x) { return square(x[0]); }, unary},
      {amp::Op::Relu, {v}, [](auto& x) { return relu(x[0]); }, unary},
      {amp::Op::Silu, {v}, [](auto& x) { return silu(x[0]); }, unary},
      {amp::Op::Tanh, {v}, [](auto& x) { return tanh(x[0]); }, unary},
      {amp::Op::Sin, {v}, [](auto& x) { return sin(x[0]); }, unary},
      {amp::Op::Cos, {v}, [](auto& x) { return cos(x[0]); }, unary},
      {amp::Op::Sigmoid, {v}, [](auto& x) { return sigmoid(x[0]); }, unary},
      {amp::Op::Gelu, {v}, [](auto& x) { return gelu(x[0]); }, unary},
      {amp::Op::Clamp, {v}, [](auto& x) { return clamp(x[0], -0.5, 0.5); }, unary},
      // the column's first clause is max(x, dim)'s
      {amp::Op::Max,
       {v},
       [](auto& x) { return max(x[0], 1).values; },
       {{"indices", i64_bytes({64})}, {"input", vb}, {"output", f32_bytes({64})}}},
      {amp::Op::Min,
       {v},
       [](auto& x) { return min(x[0], 1).values; },
       {{"indices", i64_bytes({64})}, {"input", vb}, {"output", f32_bytes({64})}}},
      {amp::Op::MaxPool2d,
       {image},
       [](auto& x) { return max_pool2d(x[0], 2, 2); },
       {{"indices", i64_bytes({2, 4, 4, 4})}, {"input", f32_bytes(image)}, {"output", f32_bytes({2, 4, 4, 4})}}},
      {amp::Op::AvgPool2d,
       {image},
       [](auto& x) { return avg_pool2d(x[0], 2, 2); },
       {{"input", f32_bytes(image)}, {"output", f32_bytes({2, 4, 4, 4})}}},
      {amp::Op::AdaptiveAvgPool2d,
       {image},
       [](auto& x) { return adaptive_avg_pool2d(x[0], 2); },
       {{"input", f32_bytes(image)}, {"output", f32_bytes({2, 4, 2, 2})}}},
      {amp::Op::Dropout,
       {v},
       [](auto& x) { return dropout(x[0], 0.5, true); },
       {{"mask", shape_numel(v)}, {"input", vb}, {"output", vb}}},
      {amp::Op::IndexSelect,
       {v},
       [](auto& x) { return index_select(x[0], 0, full({8}, 1.0, kI64)); },
       {{"index", i64_bytes({8})}, {"input", vb}, {"output", f32_bytes({8, 64})}}},
      {amp::Op::Swiglu,
       {v, v},
       [](auto& x) { return swiglu(x[0], x[1]); },
       {{"gate", vb}, {"up", vb}, {"output", vb}}},
      {amp::Op::Rope,
       {{2, 16, 8}},
       [](auto& x) {
         static const Tensor tables = full({16, 8}, 0.5);
         return rope(x[0], tables, tables);
       },
       {{"cos", 0}, {"sin", 0}, {"output", f32_bytes({2, 16, 8})}}},
      {amp::Op::IndexAdd,
       {v, {8, 64}},
       [](auto& x) { return index_add(x[0], 0, full({8}, 1.0, kI64), x[1]); },
       {{"index", i64_bytes({8})}, {"output", vb}}},
      {amp::Op::Gather,
       {v},
       [](auto& x) { return gather(x[0], 1, zeros({64, 4}, kI64)); },
       {{"index", i64_bytes({64, 4})}, {"input", vb}, {"output", f32_bytes({64, 4})}}},
      // The CPU's fused kernel (cpu.cpp): beside q, k, v and out, one f32 lse per query row
      {amp::Op::ScaledDotProductAttention,
       {{1, 2, 16, 8}, {1, 2, 16, 8}, {1, 2, 16, 8}},
       [](auto& x) { return scaled_dot_product_attention(x[0], x[1], x[2]); },
       {{"q", f32_bytes({1, 2, 16, 8})},
        {"k", f32_bytes({1, 2, 16, 8})},
        {"v", f32_bytes({1, 2, 16, 8})},
        {"output", f32_bytes({1, 2, 16, 8})},
        {"lse", f32_bytes({1, 2, 16})}}},
      // FP8: one byte per element and one f32 scale for each saved operand
      {amp::Op::Fp8Linear,
       {v, {32, 64}},
       [](auto& x) {
         // The state is keyed by a leaf weight (a computed one, as x[1] is
         // here, gets none); current scaling reads only the tensors it is given.
         static amp::Fp8State fp8(amp::Fp8Recipe::current());
         static const Tensor key_weight = zeros({32, 64});
         return fp8::linear(x[0], x[1], Tensor(), *fp8.scaling_for(key_weight));
       },
       {{"input", 64 * 64 + 4}, {"weight", 32 * 64 + 4}, {"output", f32_bytes({64, 32})}}},
  };
  return p;
}

// Rows with no probe, and why: their own call records another op's node.
const std::set<amp::Op> kComposite{
    amp::Op::MatMul,   // views around one bmm node
    amp::Op::MseLoss,  // sub, square and mean nodes
    amp::Op::RouterLogits,  // one linear node, on f32 inputs
};

// The bytes the op's own tape node keeps alive, its saved output included:
// the node alone is let go and what that frees is measured (the inputs'
// nodes stay held, so only this node's closure counts).
int64_t node_bytes(const Probe& probe) {
  std::vector<Tensor> leaves;
  for (const Shape& s : probe.shapes) leaves.push_back(full(s, 0.75).requires_grad_());
  std::vector<std::shared_ptr<autograd::Node>> input_nodes;
  std::shared_ptr<autograd::Node> node;
  const int64_t before = memory_stats(kCPU).current_bytes;
  {
    std::vector<Tensor> inputs;
    for (const Tensor& l : leaves) {
      inputs.push_back(mul(l, 1.0));
      input_nodes.push_back(inputs.back().grad_fn());
    }
    node = probe.fn(inputs).grad_fn();
  }
  REQUIRE(node != nullptr);
  CHECK(node->name() == std::string(amp::op_name(probe.op)));
  const int64_t with_node = memory_stats(kCPU).current_bytes - before;
  node.reset();
  return with_node - (memory_stats(kCPU).current_bytes - before);
}

}  // namespace

// Catches: a row with an empty saves entry, two rows with one name (the tape,
// the dtype report and the anomaly messages name ops by it), and a table out
// of the enum's order (entry lookups and the policy probes rely on one row per op).
TEST_CASE("the op list has one named row per op, each saying what it saves", "[autograd][op_list]") {
  std::set<std::string_view> names;
  size_t i = 0;
  for (const amp::PolicyEntry& row : amp::autocast_policy_table()) {
    INFO(row.name);
    CHECK(static_cast<size_t>(row.op) == i++);
    CHECK(!row.name.empty());
    CHECK(names.insert(row.name).second);
    CHECK(!row.saves.empty());
    CHECK(amp::op_name(row.op) == row.name);
    CHECK(amp::saved_for_backward(row.op) == row.saves);
  }
}

// Catches: op_list.h's saves column disagreeing with the rule it indexes,
// e.g. relu's row changed from "output" to "input" (the tape keeps nothing
// beside the output, the row says 16 KiB), sum's from "nothing" to "input",
// or softmax's from "output" to "nothing" (its node keeps 16 KiB the row does
// not name). A rule that starts saving more (relu keeping x beside y) fails
// the same way, and a new row without a probe fails the coverage check.
TEST_CASE("each op's saves column is what its tape node keeps alive", "[autograd][op_list][saved]") {
  const std::vector<Probe> all = probes();
  std::set<amp::Op> probed;
  for (const Probe& p : all) probed.insert(p.op);
  for (const amp::PolicyEntry& row : amp::autocast_policy_table()) {
    INFO(row.name << ": add a probe (or a kComposite entry) in test_op_list.cpp");
    CHECK((probed.contains(row.op) != kComposite.contains(row.op)));
  }
  for (const Probe& p : all) {
    const std::string_view saves = amp::saved_for_backward(p.op);
    INFO(amp::op_name(p.op) << " saves \"" << std::string(saves) << "\"");
    int64_t beside_output = 0, total = 0;
    for (const std::string& word : named_saves(saves)) {
      INFO("the word '" << word << "'");
      REQUIRE(p.bytes.contains(word));
      total += p.bytes.at(word);
      if (word != "output") beside_output += p.bytes.at(word);
    }
    // What the node keeps by itself, the output included...
    CHECK(node_bytes(p) == total);
    // ...and what the tape keeps beyond the output the caller holds anyway.
    CHECK(test::saved_bytes(kCPU, p.shapes, p.fn) == beside_output);
  }
}
