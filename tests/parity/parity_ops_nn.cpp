// The parity cases of the neural-network ops: linear algebra, softmax and
// layer_norm, the losses and embedding, shape and indexing, convolution and
// pooling, attention, and copy_/fill_/dropout.
#include <string>
#include <utility>
#include <vector>

#include "parity_cases.h"

using namespace mt;

namespace parity {

namespace {

// n values, multiples of 1/8 in [-2, 2]: exact in every dtype, few ties.
std::vector<double> pattern(int64_t n, int salt = 0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = static_cast<double>(static_cast<int>((i * 13 + static_cast<size_t>(salt) * 7) % 33) - 16) / 8.0;
  }
  return v;
}

// Twelve mixed values, for inputs of 12 elements in any shape.
const std::vector<double> kM12 = {0.5, -1, 2, 0.25, -0.75, 1.5, 3, -2, 1, 0.125, -0.5, 2.5};
// Logits with ties and large magnitudes, as [4, 3].
const std::vector<double> kLogits = {2, -1, 0.5, 3, 3, 0, 1e4, 1e4 + 1, 1e4 - 2, -5, 0.25, 1};

}  // namespace

void add_linear_algebra_cases(std::vector<Case>& cases) {
  cases.push_back({"matmul/2d", "matmul", {}, {floats(kM12, {3, 4}), floats(kM12, {4, 3})}, one([](auto& x) {
                     return matmul(x[0], x[1]);
                   })});
  cases.push_back({"matmul/vec_mat", "matmul", {}, {floats({1, -2, 0.5}, {3}), floats(kM12, {3, 4})}, one([](auto& x) {
                     return matmul(x[0], x[1]);
                   })});
  cases.push_back({"matmul/batched_broadcast",
                   "matmul",
                   {},
                   {floats(kM12, {2, 1, 2, 3}), floats(pattern(36), {3, 3, 4})},
                   one([](auto& x) { return matmul(x[0], x[1]); })});
  cases.push_back({"matmul/nan_inf",
                   "matmul",
                   {},
                   {floats({kNaN, 1, 2, 3}, {2, 2}), floats({kInf, 0, 1, 1}, {2, 2})},
                   one([](auto& x) { return matmul(x[0], x[1]); })});
  cases.push_back({"matmul/k0", "matmul", {}, {floats({}, {2, 0}), floats({}, {0, 3})}, one([](auto& x) {
                     return matmul(x[0], x[1]);
                   })});
  cases.push_back({"bmm/plain", "bmm", {}, {floats(kM12, {2, 2, 3}), floats(kM12, {2, 3, 2})}, one([](auto& x) {
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
                     {floats(kM12, {2, 2, 3}), floats(kM12, {4, 3}), floats({0.25, -1, 1e-3, 2}, {4})},
                     one([act = act](auto& x) { return linear(x[0], x[1], x[2], act); })});
  }
  cases.push_back({"linear/no_bias_nan",
                   "linear",
                   {{"activation", "relu"}},
                   {floats({kNaN, 1, 2, 3, 4, 5}, {2, 3}), floats(kM12, {4, 3})},
                   one([](auto& x) { return linear(x[0], x[1], Tensor(), LinearActivation::Relu); })});
}

void add_nn_function_cases(std::vector<Case>& cases) {
  for (const char* op : {"softmax", "log_softmax"}) {
    const bool log = std::string(op) == "log_softmax";
    auto f = [log](const Tensor& x, int64_t dim) { return log ? log_softmax(x, dim) : softmax(x, dim); };
    cases.push_back({std::string(op) + "/last", op, {{"dim", -1}}, {floats(kLogits, {4, 3})}, one([f](auto& x) {
                       return f(x[0], -1);
                     })});
    cases.push_back({std::string(op) + "/dim0", op, {{"dim", 0}}, {floats(kLogits, {4, 3})}, one([f](auto& x) {
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
                   {floats(kM12, {3, 4}), floats({1, 0.5, -1, 2}, {4}), floats({0, 0.25, -0.5, 1}, {4})},
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
}

void add_loss_and_embedding_cases(std::vector<Case>& cases) {
  for (const auto& [name, red] : std::vector<std::pair<std::string, Reduction>>{
           {"mean", Reduction::Mean}, {"sum", Reduction::Sum}, {"none", Reduction::None}}) {
    cases.push_back({"cross_entropy/" + name,
                     "cross_entropy",
                     {{"reduction", name}, {"ignore_index", -100}, {"label_smoothing", 0.0}},
                     {floats(kLogits, {4, 3}), ints({2, 0, -100, 1}, {4})},
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
                     {floats(kM12, {4, 3}), floats({0.5, -1, 2, 0.25, 1, -0.5, 3, 0, -2, 1, 1, 1, -1, 0.75, 0}, {5, 3}),
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
      {"embedding/repeats", "embedding", {}, {floats(kM12, {4, 3}), ints({3, 0, 3, 1, 3, 2}, {2, 3})}, one([](auto& x) {
         return embedding(x[0], x[1]);
       })});
}

void add_shape_and_indexing_cases(std::vector<Case>& cases) {
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
                   {floats(kM12, {2, 6})},
                   [](const std::vector<Tensor>& x) { return split(x[0], 4, 1); }});
  cases.push_back({"index_select/repeats",
                   "index_select",
                   {{"dim", 0}},
                   {floats(kM12, {4, 3}), ints({2, 2, 0}, {3})},
                   one([](auto& x) { return index_select(x[0], 0, x[1]); })});
  cases.push_back({"gather/dim1",
                   "gather",
                   {{"dim", 1}},
                   {floats(kM12, {3, 4}), ints({0, 3, 3, 1, 2, 0}, {3, 2})},
                   one([](auto& x) { return gather(x[0], 1, x[1]); })});
  cases.push_back({"index_add/repeats",
                   "index_add",
                   {{"dim", 0}},
                   {floats(kM12, {4, 3}), ints({1, 1, 3}, {3}), floats(pattern(9, 5), {3, 3})},
                   one([](auto& x) { return index_add(x[0], 0, x[1], x[2]); })});
  cases.push_back({"views/permute_slice_expand", "views", {}, {floats(kM12, {2, 3, 2})}, one([](auto& x) {
                     return x[0].permute({2, 0, 1}).slice(2, 0, 3, 2).unsqueeze(1).expand({2, 3, 2, 2}).contiguous();
                   })});
  cases.push_back({"views/reshape_transpose_select", "views2", {}, {floats(kM12, {3, 4})}, one([](auto& x) {
                     return x[0].t().reshape({2, 6}).select(1, 4).squeeze();
                   })});
}

void add_convolution_and_pooling_cases(std::vector<Case>& cases) {
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
  // A world of one (an all-reduce that does nothing): PyTorch's SyncBatchNorm
  // is then batch_norm on the local batch, the twin here.
  cases.push_back(
      {"sync_batch_norm/world_of_one",
       "sync_batch_norm",
       {{"training", true}, {"momentum", 0.1}, {"eps", 1e-5}},
       {floats(image, {2, 2, 5, 5}), running_mean, running_var, floats({1.5, -0.5}, {2}), floats({0.25, 1}, {2})},
       [](const std::vector<Tensor>& x) {
         const Tensor y = sync_batch_norm(x[0], x[1], x[2], x[3], x[4], 0.1, 1e-5, [](const Tensor&) {});
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
}

// Attention (PyTorch 1.13 has no F.scaled_dot_product_attention: the twin
// is PyTorch 2's documented math definition).
void add_attention_cases(std::vector<Case>& cases) {
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
}

// nn::MultiheadAttention with the record's weights put in its parameter
// slots, against PyTorch's F.multi_head_attention_forward (what
// nn.MultiheadAttention.forward runs) with the same tensors: [L, N, E]
// inputs (batch_first false), E = 4, 2 heads, cross-attention (S = 5).
void add_module_cases(std::vector<Case>& cases) {
  const auto inputs = [] {
    return std::vector<InputSpec>{floats(pattern(3 * 2 * 4, 5), {3, 2, 4}),
                                  floats(pattern(5 * 2 * 4, 6), {5, 2, 4}),
                                  floats(pattern(5 * 2 * 4, 7), {5, 2, 4}),
                                  floats(pattern(12 * 4, 8), {12, 4}),
                                  floats(pattern(12, 9), {12}),
                                  floats(pattern(16, 10), {4, 4}),
                                  floats(pattern(4, 11), {4})};
  };
  const auto mha = [](const std::vector<Tensor>& x, const Tensor& padding, const Tensor& mask) {
    nn::MultiheadAttention attn(4, 2);
    attn.in_proj_weight = x[3];
    attn.in_proj_bias = x[4];
    attn.out_proj->weight = x[5];
    attn.out_proj->bias = x[6];
    return attn.forward(x[0], x[1], x[2], padding, mask);
  };
  {
    std::vector<InputSpec> in = inputs();
    in.push_back(bools({0, 0, 0, 1, 1, 0, 1, 0, 0, 0}, {2, 5}));  // key_padding_mask [N, S]
    cases.push_back({"multihead_attention/key_padding",
                     "multihead_attention",
                     {{"padding", true}},
                     in,
                     one([mha](auto& x) { return mha(x, x[7], Tensor()); }),
                     {kF64, kF32}});
  }
  {
    std::vector<InputSpec> in = inputs();
    in.push_back(bools({0, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1}, {3, 5}));  // attn_mask [L, S], true = blocked
    cases.push_back({"multihead_attention/bool_mask",
                     "multihead_attention",
                     {{"mask", true}},
                     in,
                     one([mha](auto& x) { return mha(x, Tensor(), x[7]); }),
                     {kF64, kF32}});
  }
  // A router's logits: F.linear without a bias (autocast keeps it f32: tests/models/test_moe.cpp).
  cases.push_back({"router_logits/plain",
                   "router_logits",
                   {},
                   {floats(pattern(12, 3), {3, 4}), floats({1.5, -0.5, 0.25, 2.0, -1.0, 0.75, 0.5, -2.0}, {2, 4})},
                   one([](auto& x) { return router_logits(x[0], x[1]); }),
                   {kF64, kF32}});
  // RoPE and SwiGLU against their definitions (HF Llama's rotate_half; silu(gate) * up).
  cases.push_back({"rope/halves",
                   "rope",
                   {},
                   {floats(pattern(48, 7), {2, 3, 8}), InputSpec{pattern(24, 8), {3, 8}, Kind::F32, false},
                    InputSpec{pattern(24, 9), {3, 8}, Kind::F32, false}},
                   one([](auto& x) { return rope(x[0], x[1], x[2]); }),
                   {kF64, kF32}});
  cases.push_back({"swiglu/plain",
                   "swiglu",
                   {},
                   {floats(pattern(12, 10), {3, 4}), floats(pattern(12, 11), {3, 4})},
                   one([](auto& x) { return swiglu(x[0], x[1]); })});
  // nn::RMSNorm against its definition in PyTorch (1.13 has no nn.RMSNorm).
  cases.push_back({"rms_norm/weight",
                   "rms_norm",
                   {{"eps", 1e-6}},
                   {floats(pattern(24, 12), {2, 3, 4}), floats({1.5, -0.5, 0.25, 2.0}, {4})},
                   one([](auto& x) {
                     nn::RMSNorm norm({4}, 1e-6);
                     norm.weight = x[1];
                     return norm.forward(x[0]);
                   }),
                   {kF64, kF32}});
}

void add_copy_fill_and_dropout_cases(std::vector<Case>& cases) {
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
}

}  // namespace parity
