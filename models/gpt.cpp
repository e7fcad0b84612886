#include "models/gpt.h"

#include <cmath>

#include "autograd/checkpoint.h"
#include "autograd/grad_mode.h"
#include "models/attention_heads.h"
#include "nn/init.h"

namespace mt::models {

GptConfig gpt_config(const std::string& name) {
  if (name == "gpt-tiny") return {.vocab = 256, .context = 64, .layers = 2, .heads = 2, .width = 64, .moe = {}};
  if (name == "gpt-small") return {.vocab = 256, .context = 256, .layers = 6, .heads = 6, .width = 384, .moe = {}};
  if (name == "gpt2-124m") return {.vocab = 50304, .context = 1024, .layers = 12, .heads = 12, .width = 768, .moe = {}};
  if (name == "gpt-moe-tiny") {  // Switch Transformer's routing: top-1
    GptConfig c = gpt_config("gpt-tiny");
    c.moe = {.experts = 4, .top_k = 1};
    return c;
  }
  throw Error("unknown GPT configuration '" + name + "' (known: gpt-tiny, gpt-small, gpt2-124m, gpt-moe-tiny)");
}

CausalSelfAttention::CausalSelfAttention(int64_t width, int64_t heads) : heads_(heads) {
  MT_CHECK(heads > 0 && width % heads == 0, "CausalSelfAttention: {} heads do not divide the width {}", heads, width);
  c_attn = register_module("c_attn", std::make_shared<nn::Linear>(width, 3 * width));
  c_proj = register_module("c_proj", std::make_shared<nn::Linear>(width, width));
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  const nn::ForwardScope scope(*this);
  Tensor no_keys, no_values;
  return forward(x, no_keys, no_values);
}


Tensor CausalSelfAttention::forward(const Tensor& x, Tensor& keys, Tensor& values) {
  const nn::ForwardScope scope(*this);
  MT_CHECK(x.dim() == 3, "CausalSelfAttention: expected [B, T, C], got {}", x.shape_string());
  const int64_t t = x.size(1);
  const std::vector<Tensor> qkv = split(c_attn->forward(x), x.size(2), 2);
  const int64_t past = keys.defined() ? keys.size(2) : 0;
  const Tensor q = split_heads(qkv[0], heads_), k = split_heads(qkv[1], heads_), v = split_heads(qkv[2], heads_);
  keys = past > 0 ? cat({keys, k}, 2) : k;
  values = past > 0 ? cat({values, v}, 2) : v;
  const Tensor y = scaled_dot_product_attention(q, keys, values, causal_after(past, t, x.device()));
  return c_proj->forward(merge_heads(y));
}

GptMlp::GptMlp(int64_t width) {
  c_fc = register_module("c_fc", std::make_shared<nn::Linear>(width, 4 * width));
  c_proj = register_module("c_proj", std::make_shared<nn::Linear>(4 * width, width));
}

// The GELU runs in c_fc's GEMM epilogue (one kernel, its pre-activation kept for backward).
Tensor GptMlp::forward(const Tensor& x) {
  const nn::ForwardScope scope(*this);
  return c_proj->forward(c_fc->forward(x, LinearActivation::GeluTanh));
}

GptBlock::GptBlock(int64_t width, int64_t heads, const MoeConfig& moe_config) {
  ln_1 = register_module("ln_1", std::make_shared<nn::LayerNorm>(Shape{width}));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(width, heads));
  ln_2 = register_module("ln_2", std::make_shared<nn::LayerNorm>(Shape{width}));
  if (moe_config.experts > 0) {
    moe = register_module("moe", std::make_shared<MoeMlp>(width, 4 * width, moe_config, ExpertKind::Gelu));
  } else {
    mlp = register_module("mlp", std::make_shared<GptMlp>(width));
  }
}

Tensor GptBlock::feed_forward(const Tensor& x) { return mlp ? mlp->forward(x) : moe->forward(x); }

Tensor GptBlock::forward(const Tensor& x) {
  const nn::ForwardScope scope(*this);
  const Tensor h = add(x, attn->forward(ln_1->forward(x)));
  return add(h, feed_forward(ln_2->forward(h)));
}

Tensor GptBlock::forward(const Tensor& x, Tensor& keys, Tensor& values) {
  const nn::ForwardScope scope(*this);
  const Tensor h = add(x, attn->forward(ln_1->forward(x), keys, values));
  return add(h, feed_forward(ln_2->forward(h)));
}

namespace {

bool ends_with(const std::string& name, std::string_view tail) {
  return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
}

// GPT-2's initialisation, in place.
void init_gpt(Gpt& model, Generator* generator) {
  NoGradGuard no_grad;
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(model.config().layers));
  for (const auto& [name, p] : model.named_parameters()) {
    // experts.c_fc_bias: a mixture's stacked biases
    const bool is_bias = ends_with(name, ".bias") || ends_with(name, "_bias");
    const bool is_norm = name.find("ln_") != std::string::npos;
    if (is_norm) {
      nn::init::constant_(p, is_bias ? 0.0 : 1.0);
    } else if (is_bias) {
      nn::init::constant_(p, 0.0);
    } else {
      const bool residual = ends_with(name, ".c_proj.weight") || ends_with(name, "experts.c_proj");
      nn::init::normal_(p, 0.0, residual ? residual_std : 0.02, generator);
    }
  }
}

}  // namespace

Gpt::Gpt(const GptConfig& config, Generator* generator) : config_(config) {
  MT_CHECK(config.vocab > 0 && config.context > 0 && config.layers > 0 && config.width > 0,
           "Gpt: vocab, context, layers and width must be positive");
  wte = register_module("wte", std::make_shared<nn::Embedding>(config.vocab, config.width));
  wpe = register_module("wpe", std::make_shared<nn::Embedding>(config.context, config.width));
  h = register_module("h", std::make_shared<nn::ModuleList>());
  for (int64_t i = 0; i < config.layers; ++i) {
    h->push_back(std::make_shared<GptBlock>(config.width, config.heads, config.moe));
  }
  ln_f = register_module("ln_f", std::make_shared<nn::LayerNorm>(Shape{config.width}));
  init_gpt(*this, generator);
}

// Token plus position embeddings of `tokens` [B, t] at positions first_position ...
Tensor Gpt::embed(const Tensor& tokens, int64_t first_position) {
  MT_CHECK(tokens.dim() == 2 && tokens.dtype() == kI64, "gpt: expected i64 tokens [B, T], got {} ({})",
           tokens.shape_string(), tokens.dtype());
  const int64_t t = tokens.size(1);
  MT_CHECK(first_position + t <= config_.context, "gpt: {} tokens{} do not fit the context of {}", t,
           first_position > 0 ? fmt::format(" after {} cached positions", first_position) : std::string(),
           config_.context);
  // arange is a host-to-device copy on a GPU: made once per device, never in the steady-state step.
  if (!positions_.defined() || positions_.device() != tokens.device()) {
    positions_ = arange(0, static_cast<double>(config_.context), 1, kI64, tokens.device());
  }
  return add(wte->forward(tokens), wpe->forward(positions_.narrow(0, first_position, t)));
}

// The head is the token embedding (tied): logits = ln_f(x) @ wte^T.
Tensor Gpt::head(const Tensor& x) { return linear(ln_f->forward(x), wte->weight); }

Tensor Gpt::blocks(const Tensor& tokens) {
  Tensor x = embed(tokens, 0);
  for (size_t i = 0; i < h->size(); ++i) {
    const std::shared_ptr<nn::Module> block = (*h)[i];
    x = checkpoint_activations
            ? checkpoint([block](const std::vector<Tensor>& in) { return block->forward(in[0]); }, {x})
            : block->forward(x);
  }
  return x;
}

Tensor Gpt::forward(const Tensor& tokens) {
  const nn::ForwardScope scope(*this);
  return head(blocks(tokens));
}

Tensor Gpt::forward_loss(const Tensor& tokens, const Tensor& targets) {
  const bool mixture = config_.moe.experts > 0;
  if (!fused_loss_head && !mixture) return Tensor();
  MT_CHECK(targets.sizes() == tokens.sizes(), "gpt: targets {} must match tokens {}", targets.shape_string(),
           tokens.shape_string());
  const nn::ForwardScope scope(*this);
  const Tensor x = ln_f->forward(blocks(tokens));
  const Tensor loss = fused_loss_head
                          ? linear_cross_entropy(x.reshape({-1, config_.width}), wte->weight, targets.reshape({-1}))
                          : cross_entropy(linear(x, wte->weight).reshape({-1, config_.vocab}), targets.reshape({-1}));
  return with_router_losses(loss, *this);
}

Tensor Gpt::forward(const Tensor& tokens, KvCache& cache) {
  const nn::ForwardScope scope(*this);
  const auto layers = static_cast<size_t>(config_.layers);
  cache.fit(layers, "gpt");
  MT_CHECK(cache.length() == 0 || cache.keys.front().size(0) == tokens.size(0),
           "gpt: a key/value cache of batch {} cannot continue tokens {}", cache.keys.front().size(0),
           tokens.shape_string());
  Tensor x = embed(tokens, cache.length());
  for (size_t i = 0; i < layers; ++i) {
    auto& block = dynamic_cast<GptBlock&>(*(*h)[i]);
    x = block.forward(x, cache.keys[i], cache.values[i]);
  }
  return head(x);
}

}  // namespace mt::models
