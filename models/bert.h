// A BERT-style encoder for classifying byte text: [CLS] + bytes + padding,
// token + learned position embeddings (LayerNorm, dropout), post-LN blocks of
// bidirectional multi-head self-attention (padding keys masked out) and a
// GELU MLP, then BERT's pooler (tanh of a linear map of the [CLS] position)
// and a linear classifier. Initialisation as BERT's: N(0, 0.02) weights,
// zero biases, LayerNorm 1 and 0.
//
// Named configurations (bert_config()):
//   bert-tiny   258 tokens (256 bytes, [CLS], [PAD]), context 128, 2 layers, 2 heads, width 128 (BERT-tiny's shape)
//   bert-mini   the same vocabulary and context, 4 layers, 4 heads, width 256
//   bert-base   the same vocabulary, context 512, 12 layers, 12 heads, width 768 (BERT-base's shape,
//               for the FP32 / AMP / AMP-at-a-larger-batch comparison on a GPU)
//
// forward(tokens i64 [B, T]) -> logits [B, classes]; positions holding
// kBertPad are padding (never attended to), position 0 must be kBertCls.
//
// PyTorch equivalent (same parameter names and shapes):
//   class Layer(nn.Module):
//       def __init__(self, c):
//           super().__init__()
//           self.attn = nn.Module()
//           self.attn.qkv, self.attn.proj = nn.Linear(c.width, 3 * c.width), nn.Linear(c.width, c.width)
//           self.ln_1, self.ln_2 = nn.LayerNorm(c.width, eps=1e-12), nn.LayerNorm(c.width, eps=1e-12)
//           self.mlp = nn.Module()
//           self.mlp.fc, self.mlp.proj = nn.Linear(c.width, 4 * c.width), nn.Linear(4 * c.width, c.width)
//           self.heads, self.p = c.heads, c.dropout
//       def forward(self, x, pad):                      # pad: bool [B, T], True = padding
//           B, T, C = x.shape
//           q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2)
//                      for t in self.attn.qkv(x).split(C, dim=2))
//           keep = ~pad[:, None, None, :]
//           y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep,
//                                              dropout_p=self.p if self.training else 0.0)
//           y = F.dropout(self.attn.proj(y.transpose(1, 2).reshape(B, T, C)), self.p, self.training)
//           x = self.ln_1(x + y)
//           y = F.dropout(self.mlp.proj(F.gelu(self.mlp.fc(x))), self.p, self.training)
//           return self.ln_2(x + y)
//   class Bert(nn.Module):
//       def __init__(self, c):
//           super().__init__()
//           self.tok_emb, self.pos_emb = nn.Embedding(c.vocab, c.width), nn.Embedding(c.context, c.width)
//           self.emb_ln = nn.LayerNorm(c.width, eps=1e-12)
//           self.layers = nn.ModuleList(Layer(c) for _ in range(c.layers))
//           self.pooler, self.classifier = nn.Linear(c.width, c.width), nn.Linear(c.width, c.classes)
//           self.p = c.dropout
//       def forward(self, tokens):
//           pad = tokens == 257
//           x = self.tok_emb(tokens) + self.pos_emb(torch.arange(tokens.shape[1]))
//           x = F.dropout(self.emb_ln(x), self.p, self.training)
//           for layer in self.layers:
//               x = layer(x, pad)
//           pooled = torch.tanh(self.pooler(x[:, 0]))
//           return self.classifier(F.dropout(pooled, self.p, self.training))
#pragma once

#include <string>

#include "nn/layers.h"

namespace mt::models {

inline constexpr int64_t kBertCls = 256;  // the first token of every passage
inline constexpr int64_t kBertPad = 257;  // filler after a short passage

struct BertConfig {
  int64_t vocab = 258, context = 128, layers = 2, heads = 2, width = 128, classes = 2;
  double dropout = 0.1;
};

// The named configuration with `classes` outputs; an mt::Error lists the
// names when `name` is unknown.
BertConfig bert_config(const std::string& name, int64_t classes);

class BertSelfAttention : public nn::Module {
 public:
  BertSelfAttention(int64_t width, int64_t heads, double dropout);
  Tensor forward(const Tensor& x) override;
  // `padding`: bool [B, T], true at the keys no query may attend to.
  Tensor forward(const Tensor& x, const Tensor& padding);
  std::string name() const override { return "BertSelfAttention"; }

  std::shared_ptr<nn::Linear> qkv, proj;

 private:
  int64_t heads_;
  double dropout_;
};

class BertMlp : public nn::Module {
 public:
  explicit BertMlp(int64_t width);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "BertMlp"; }

  std::shared_ptr<nn::Linear> fc, proj;
};

class BertLayer : public nn::Module {
 public:
  BertLayer(int64_t width, int64_t heads, double dropout);
  Tensor forward(const Tensor& x) override;
  Tensor forward(const Tensor& x, const Tensor& padding);
  std::string name() const override { return "BertLayer"; }

  std::shared_ptr<BertSelfAttention> attn;
  std::shared_ptr<nn::LayerNorm> ln_1, ln_2;
  std::shared_ptr<BertMlp> mlp;

 private:
  double dropout_;
};

class Bert : public nn::Module {
 public:
  explicit Bert(const BertConfig& config, Generator* generator = nullptr);
  Tensor forward(const Tensor& tokens) override;
  std::string name() const override { return "bert"; }
  const BertConfig& config() const { return config_; }
  bool enable_activation_checkpointing() override { return checkpoint_activations = true; }
  bool checkpoint_activations = false;  // recompute each layer in backward (mt::checkpoint)

  std::shared_ptr<nn::Embedding> tok_emb, pos_emb;
  std::shared_ptr<nn::LayerNorm> emb_ln;
  std::shared_ptr<nn::ModuleList> layers;
  std::shared_ptr<nn::Linear> pooler, classifier;

 private:
  BertConfig config_;
  Tensor positions_;  // 0 .. context-1 on the device of the last forward (built once, not per step)
};

}  // namespace mt::models
