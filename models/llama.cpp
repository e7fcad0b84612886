#include "models/llama.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "models/attention_heads.h"
#include "nn/init.h"

namespace mt::models {

namespace {

LlamaConfig dense(int64_t vocab, int64_t context, int64_t layers, int64_t heads, int64_t kv_heads, int64_t width,
                  int64_t hidden) {
  LlamaConfig c;
  c.vocab = vocab, c.context = context, c.layers = layers, c.heads = heads, c.kv_heads = kv_heads;
  c.width = width, c.hidden = hidden;
  return c;
}

}  // namespace

LlamaConfig llama_config(const std::string& name) {
  if (name == "llama-tiny") return dense(256, 64, 2, 4, 2, 64, 176);
  if (name == "llama-small") return dense(256, 256, 6, 6, 2, 384, 1024);
  if (name == "llama-125m") return dense(50304, 1024, 12, 12, 4, 768, 2048);
  if (name == "llama-moe-tiny") {
    LlamaConfig c = llama_config("llama-tiny");
    c.moe = {.experts = 4, .top_k = 2};
    return c;
  }
  throw Error("unknown Llama configuration '" + name +
              "' (known: llama-tiny, llama-small, llama-125m, llama-moe-tiny)");
}

RopeTables rope_tables(int64_t positions, int64_t head_dim, double theta, Device device) {
  MT_CHECK(head_dim % 2 == 0, "rope: the head dimension {} must be even", head_dim);
  const NoGradGuard no_grad;
  // inv_freq_i = theta^(-2i / D); angle(t, i) = t * inv_freq_i, in f64 then rounded once to f32.
  std::vector<double> inv(static_cast<size_t>(head_dim / 2));
  for (size_t i = 0; i < inv.size(); ++i) inv[i] = std::pow(theta, -2.0 * double(i) / double(head_dim));
  const Tensor inv_freq = from_vector(inv, {head_dim / 2}, kF64);
  const Tensor angles = outer(arange(0, double(positions), 1, kF64), inv_freq);
  const Tensor both = cat({angles, angles}, -1);
  return {both.cos().to(kF32).to(device), both.sin().to(kF32).to(device)};
}

Tensor apply_rope(const Tensor& x, const RopeTables& rope, int64_t first) {
  const int64_t t = x.size(2);
  MT_CHECK(first >= 0 && first + t <= rope.cos.size(0), "rope: positions {}..{} are beyond the tables' {}", first,
           first + t - 1, rope.cos.size(0));
  return mt::rope(x, rope.cos.narrow(0, first, t), rope.sin.narrow(0, first, t));
}

LlamaAttention::LlamaAttention(const LlamaConfig& c) : heads_(c.heads), kv_heads_(c.kv_heads) {
  MT_CHECK(c.heads > 0 && c.width % c.heads == 0 && c.kv_heads > 0 && c.heads % c.kv_heads == 0,
           "Llama: {} heads must divide the width {} and be a multiple of the {} key/value heads", c.heads, c.width,
           c.kv_heads);
  const int64_t d = c.width / c.heads;
  q_proj = register_module("q_proj", std::make_shared<nn::Linear>(c.width, c.heads * d, false));
  k_proj = register_module("k_proj", std::make_shared<nn::Linear>(c.width, c.kv_heads * d, false));
  v_proj = register_module("v_proj", std::make_shared<nn::Linear>(c.width, c.kv_heads * d, false));
  o_proj = register_module("o_proj", std::make_shared<nn::Linear>(c.heads * d, c.width, false));
}

Tensor LlamaAttention::forward(const Tensor& x, const RopeTables& rope) {
  Tensor no_keys, no_values;
  return forward(x, rope, no_keys, no_values);
}

Tensor LlamaAttention::forward(const Tensor& x, const RopeTables& rope, Tensor& keys, Tensor& values) {
  const nn::ForwardScope scope(*this);
  const int64_t past = keys.defined() ? keys.size(2) : 0, t = x.size(1);
  const Tensor q = apply_rope(split_heads(q_proj->forward(x), heads_), rope, past);
  const Tensor k = apply_rope(split_heads(k_proj->forward(x), kv_heads_), rope, past);
  const Tensor v = split_heads(v_proj->forward(x), kv_heads_);
  keys = past > 0 ? cat({keys, k}, 2) : k;
  values = past > 0 ? cat({values, v}, 2) : v;
  AttentionOptions options = causal_after(past, t, x.device());
  options.enable_gqa = true;  // the fused kernels read each K/V head for its group of query heads
  const Tensor y = scaled_dot_product_attention(q, keys, values, options);
  return o_proj->forward(merge_heads(y));
}

LlamaMlp::LlamaMlp(int64_t width, int64_t hidden) {
  gate_proj = register_module("gate_proj", std::make_shared<nn::Linear>(width, hidden, false));
  up_proj = register_module("up_proj", std::make_shared<nn::Linear>(width, hidden, false));
  down_proj = register_module("down_proj", std::make_shared<nn::Linear>(hidden, width, false));
}

Tensor LlamaMlp::forward(const Tensor& x) {
  const nn::ForwardScope scope(*this);
  return down_proj->forward(swiglu(gate_proj->forward(x), up_proj->forward(x)));
}

LlamaLayer::LlamaLayer(const LlamaConfig& c) {
  input_layernorm = register_module("input_layernorm", std::make_shared<nn::RMSNorm>(Shape{c.width}, c.norm_eps));
  self_attn = register_module("self_attn", std::make_shared<LlamaAttention>(c));
  post_attention_layernorm =
      register_module("post_attention_layernorm", std::make_shared<nn::RMSNorm>(Shape{c.width}, c.norm_eps));
  if (c.moe.experts > 0) {
    block_sparse_moe =
        register_module("block_sparse_moe", std::make_shared<MoeMlp>(c.width, c.hidden, c.moe, ExpertKind::SwiGlu));
  } else {
    mlp = register_module("mlp", std::make_shared<LlamaMlp>(c.width, c.hidden));
  }
}

Tensor LlamaLayer::forward(const Tensor& x, const RopeTables& rope) {
  Tensor no_keys, no_values;
  return forward(x, rope, no_keys, no_values);
}

Tensor LlamaLayer::forward(const Tensor& x, const RopeTables& rope, Tensor& keys, Tensor& values) {
  const nn::ForwardScope scope(*this);
  const Tensor h = x + self_attn->forward(input_layernorm->forward(x), rope, keys, values);
  const Tensor n = post_attention_layernorm->forward(h);
  return h + (mlp ? mlp->forward(n) : block_sparse_moe->forward(n));
}

LlamaBody::LlamaBody(const LlamaConfig& c) {
  embed_tokens = register_module("embed_tokens", std::make_shared<nn::Embedding>(c.vocab, c.width));
  layers = register_module("layers", std::make_shared<nn::ModuleList>());
  for (int64_t i = 0; i < c.layers; ++i) layers->push_back(std::make_shared<LlamaLayer>(c));
  norm = register_module("norm", std::make_shared<nn::RMSNorm>(Shape{c.width}, c.norm_eps));
}

Llama::Llama(const LlamaConfig& config) : config_(config) {
  model = register_module("model", std::make_shared<LlamaBody>(config));
  lm_head = register_module("lm_head", std::make_shared<nn::Linear>(config.width, config.vocab, false));
  // HF's initialisation: N(0, 0.02) for every weight (the norms' weights stay 1).
  for (const auto& [name, p] : named_parameters()) {
    if (p.dim() >= 2) nn::init::normal_(p, 0.0, 0.02);
  }
}

const RopeTables& Llama::rope_on(Device device) {
  if (!rope_.cos.defined() || rope_.cos.device() != device) {
    rope_ = rope_tables(config_.context, config_.width / config_.heads, config_.rope_theta, device);
  }
  return rope_;
}

Tensor Llama::forward(const Tensor& tokens) {
  KvCache none;
  return forward(tokens, none);
}

Tensor Llama::forward(const Tensor& tokens, KvCache& cache) {
  const nn::ForwardScope scope(*this);
  const auto layers = static_cast<size_t>(config_.layers);
  cache.fit(layers, "llama");
  MT_CHECK(tokens.dim() == 2 && cache.length() + tokens.size(1) <= config_.context,
           "llama: expected tokens [B, T] with T <= the context {} (after {} cached positions), got {}",
           config_.context, cache.length(), tokens.shape_string());
  const RopeTables& rope = rope_on(tokens.device());
  Tensor x = model->embed_tokens->forward(tokens);
  for (size_t i = 0; i < layers; ++i) {
    x = model->layers->at<LlamaLayer>(i)->forward(x, rope, cache.keys[i], cache.values[i]);
  }
  return lm_head->forward(model->norm->forward(x));
}

Tensor Llama::forward_loss(const Tensor& tokens, const Tensor& targets) {
  if (config_.moe.experts == 0) return Tensor();
  const Tensor logits = forward(tokens);
  return with_router_losses(cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1})), *this);
}

}  // namespace mt::models
