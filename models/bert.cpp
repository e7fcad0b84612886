#include "models/bert.h"

#include "autograd/checkpoint.h"
#include "autograd/grad_mode.h"
#include "models/attention_heads.h"
#include "nn/init.h"

namespace mt::models {
namespace {

constexpr double kLayerNormEps = 1e-12;  // BERT's

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// BERT's initialisation, in place.
void init_bert(Bert& model, Generator* generator) {
  NoGradGuard no_grad;
  for (const auto& [name, p] : model.named_parameters()) {
    const bool is_norm = name.find("ln") != std::string::npos;
    if (ends_with(name, ".bias")) {
      nn::init::constant_(p, 0.0);
    } else if (is_norm) {
      nn::init::constant_(p, 1.0);
    } else {
      nn::init::normal_(p, 0.0, 0.02, generator);
    }
  }
}

}  // namespace

BertConfig bert_config(const std::string& name, int64_t classes) {
  MT_CHECK(classes > 0, "bert: the number of classes must be positive, got {}", classes);
  if (name == "bert-tiny") return {258, 128, 2, 2, 128, classes, 0.1};
  if (name == "bert-mini") return {258, 128, 4, 4, 256, classes, 0.1};
  if (name == "bert-base") return {258, 512, 12, 12, 768, classes, 0.1};  // BERT-base's shape, over bytes
  fail("unknown BERT configuration '{}' (known: bert-tiny, bert-mini, bert-base)", name);
}

BertSelfAttention::BertSelfAttention(int64_t width, int64_t heads, double dropout) : heads_(heads), dropout_(dropout) {
  MT_CHECK(heads > 0 && width % heads == 0, "BertSelfAttention: {} heads do not divide the width {}", heads, width);
  qkv = register_module("qkv", std::make_shared<nn::Linear>(width, 3 * width));
  proj = register_module("proj", std::make_shared<nn::Linear>(width, width));
}

Tensor BertSelfAttention::forward(const Tensor& x) { return forward(x, Tensor()); }

Tensor BertSelfAttention::forward(const Tensor& x, const Tensor& padding) {
  const nn::ForwardScope scope(*this);
  MT_CHECK(x.dim() == 3, "BertSelfAttention: expected [B, T, C], got {}", x.shape_string());
  const std::vector<Tensor> q_k_v = split(qkv->forward(x), x.size(2), 2);
  AttentionOptions options;
  options.key_padding_mask = padding;
  options.dropout_p = is_training() ? dropout_ : 0.0;
  const Tensor y = scaled_dot_product_attention(split_heads(q_k_v[0], heads_), split_heads(q_k_v[1], heads_),
                                                split_heads(q_k_v[2], heads_), options);
  return proj->forward(merge_heads(y));
}

BertMlp::BertMlp(int64_t width) {
  fc = register_module("fc", std::make_shared<nn::Linear>(width, 4 * width));
  proj = register_module("proj", std::make_shared<nn::Linear>(4 * width, width));
}

// The GELU (erf form, BERT's) runs in fc's GEMM epilogue.
Tensor BertMlp::forward(const Tensor& x) {
  const nn::ForwardScope scope(*this);
  return proj->forward(fc->forward(x, LinearActivation::Gelu));
}

BertLayer::BertLayer(int64_t width, int64_t heads, double dropout) : dropout_(dropout) {
  attn = register_module("attn", std::make_shared<BertSelfAttention>(width, heads, dropout));
  ln_1 = register_module("ln_1", std::make_shared<nn::LayerNorm>(Shape{width}, kLayerNormEps));
  mlp = register_module("mlp", std::make_shared<BertMlp>(width));
  ln_2 = register_module("ln_2", std::make_shared<nn::LayerNorm>(Shape{width}, kLayerNormEps));
}

Tensor BertLayer::forward(const Tensor& x) { return forward(x, Tensor()); }

// Post-LN, as BERT: the residual sum is normalised.
Tensor BertLayer::forward(const Tensor& x, const Tensor& padding) {
  const nn::ForwardScope scope(*this);
  const Tensor h = ln_1->forward(add(x, dropout(attn->forward(x, padding), dropout_, is_training())));
  return ln_2->forward(add(h, dropout(mlp->forward(h), dropout_, is_training())));
}

Bert::Bert(const BertConfig& config, Generator* generator) : config_(config) {
  MT_CHECK(config.vocab > kBertPad && config.context > 0 && config.layers > 0 && config.width > 0 && config.classes > 0,
           "Bert: the vocabulary must hold [CLS] and [PAD]; context, layers, width and classes must be positive");
  MT_CHECK(config.dropout >= 0 && config.dropout < 1, "Bert: dropout must be in [0, 1), got {}", config.dropout);
  tok_emb = register_module("tok_emb", std::make_shared<nn::Embedding>(config.vocab, config.width));
  pos_emb = register_module("pos_emb", std::make_shared<nn::Embedding>(config.context, config.width));
  emb_ln = register_module("emb_ln", std::make_shared<nn::LayerNorm>(Shape{config.width}, kLayerNormEps));
  layers = register_module("layers", std::make_shared<nn::ModuleList>());
  for (int64_t i = 0; i < config.layers; ++i) {
    layers->push_back(std::make_shared<BertLayer>(config.width, config.heads, config.dropout));
  }
  pooler = register_module("pooler", std::make_shared<nn::Linear>(config.width, config.width));
  classifier = register_module("classifier", std::make_shared<nn::Linear>(config.width, config.classes));
  init_bert(*this, generator);
}

Tensor Bert::forward(const Tensor& tokens) {
  const nn::ForwardScope scope(*this);
  MT_CHECK(tokens.dim() == 2 && tokens.dtype() == kI64, "bert: expected i64 tokens [B, T], got {} ({})",
           tokens.shape_string(), tokens.dtype());
  const int64_t t = tokens.size(1);
  MT_CHECK(t > 0 && t <= config_.context, "bert: {} tokens do not fit the context of {}", t, config_.context);
  if (!positions_.defined() || positions_.device() != tokens.device()) {
    positions_ = arange(0, static_cast<double>(config_.context), 1, kI64, tokens.device());
  }
  const Tensor padding = eq(tokens, static_cast<double>(kBertPad));
  Tensor x = add(tok_emb->forward(tokens), pos_emb->forward(positions_.narrow(0, 0, t)));
  x = dropout(emb_ln->forward(x), config_.dropout, is_training());
  for (size_t i = 0; i < layers->size(); ++i) {
    auto layer = std::dynamic_pointer_cast<BertLayer>((*layers)[i]);
    x = checkpoint_activations
            ? checkpoint([layer](const std::vector<Tensor>& in) { return layer->forward(in[0], in[1]); }, {x, padding})
            : layer->forward(x, padding);
  }
  const Tensor pooled = tanh(pooler->forward(x.select(1, 0)));
  return classifier->forward(dropout(pooled, config_.dropout, is_training()));
}

}  // namespace mt::models
