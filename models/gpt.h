// A GPT-2-style decoder: token + learned position embeddings, pre-LN blocks
// of causal multi-head self-attention and a GELU (tanh form) MLP, a final
// LayerNorm, and the output head tied to the token embedding. GPT-2's
// initialisation: N(0, 0.02) weights, zero biases, and the residual
// projections (attn.c_proj, mlp.c_proj) at 0.02 / sqrt(2 * layers).
//
// Named configurations (gpt_config()):
//   gpt-tiny    256 bytes, context 64, 2 layers, 2 heads, width 64    (CPU tests)
//   gpt-small   256 bytes, context 256, 6 layers, 6 heads, width 384  (10.8M parameters)
//   gpt2-124m   50304 tokens, context 1024, 12 layers, 12 heads, width 768 (GPT-2 small's shape)
//   gpt-moe-tiny  gpt-tiny with each MLP (h.N.moe) a mixture of 4 GELU experts, top-1 (models/moe.h)
//
// forward(tokens i64 [B, T]) -> logits [B, T, vocab].
// forward(tokens, cache): the same for tokens that continue the positions
// already in `cache` (their keys and values kept from earlier calls), so
// generating a token costs one position, not a re-run of the whole prefix.
//
// PyTorch equivalent (same parameter names and shapes; the head is the
// token embedding, so there is no lm_head parameter):
//   class Block(nn.Module):
//       def __init__(self, c):
//           super().__init__()
//           self.ln_1, self.ln_2 = nn.LayerNorm(c.width), nn.LayerNorm(c.width)
//           self.attn = nn.Module()
//           self.attn.c_attn, self.attn.c_proj = nn.Linear(c.width, 3 * c.width), nn.Linear(c.width, c.width)
//           self.mlp = nn.Module()
//           self.mlp.c_fc, self.mlp.c_proj = nn.Linear(c.width, 4 * c.width), nn.Linear(4 * c.width, c.width)
//           self.heads = c.heads
//       def forward(self, x):
//           B, T, C = x.shape
//           q, k, v = self.attn.c_attn(self.ln_1(x)).split(C, dim=2)
//           q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
//           y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
//           x = x + self.attn.c_proj(y.transpose(1, 2).reshape(B, T, C))
//           return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh"))
//   class GPT(nn.Module):
//       def __init__(self, c):
//           super().__init__()
//           self.wte, self.wpe = nn.Embedding(c.vocab, c.width), nn.Embedding(c.context, c.width)
//           self.h = nn.ModuleList(Block(c) for _ in range(c.layers))
//           self.ln_f = nn.LayerNorm(c.width)
//       def forward(self, tokens):
//           x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1]))
//           for block in self.h:
//               x = block(x)
//           return F.linear(self.ln_f(x), self.wte.weight)
#pragma once

#include <string>
#include <vector>

#include "models/attention_heads.h"
#include "models/decoder.h"
#include "models/moe.h"
#include "nn/layers.h"

namespace mt::models {

struct GptConfig {
  int64_t vocab = 256, context = 64, layers = 2, heads = 2, width = 64;
  MoeConfig moe;  // experts > 0: each block's MLP is a mixture of `experts` GPT-2 MLPs (models/moe.h)
};


// The named configuration; an mt::Error lists the names when `name` is unknown.
GptConfig gpt_config(const std::string& name);

class CausalSelfAttention : public nn::Module {
 public:
  CausalSelfAttention(int64_t width, int64_t heads);
  Tensor forward(const Tensor& x) override;
  // x continues the positions whose keys and values are in (keys, values),
  // which grow by x's positions (both undefined at the start).
  Tensor forward(const Tensor& x, Tensor& keys, Tensor& values);
  std::string name() const override { return "CausalSelfAttention"; }

  std::shared_ptr<nn::Linear> c_attn, c_proj;

 private:
  int64_t heads_;
};

class GptMlp : public nn::Module {
 public:
  explicit GptMlp(int64_t width);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "GptMlp"; }

  std::shared_ptr<nn::Linear> c_fc, c_proj;
};

class GptBlock : public nn::Module {
 public:
  GptBlock(int64_t width, int64_t heads, const MoeConfig& moe = {});
  Tensor forward(const Tensor& x) override;
  Tensor forward(const Tensor& x, Tensor& keys, Tensor& values);
  std::string name() const override { return "GptBlock"; }

  std::shared_ptr<nn::LayerNorm> ln_1, ln_2;
  std::shared_ptr<CausalSelfAttention> attn;
  Tensor feed_forward(const Tensor& x);  // the MLP or the mixture
  std::shared_ptr<GptMlp> mlp;     // dense, or
  std::shared_ptr<MoeMlp> moe;     // a mixture of GELU experts of width 4 * width
};

class Gpt : public nn::Module, public Decoder {
 public:
  explicit Gpt(const GptConfig& config, Generator* generator = nullptr);
  Tensor forward(const Tensor& tokens) override;
  // Inference with a key/value cache: `tokens` [B, t] sit at positions
  // cache.length() .. cache.length() + t - 1, which must fit the context.
  Tensor forward(const Tensor& tokens, KvCache& cache) override;
  // The mean next-token loss of tokens [B, T] against targets [B, T] through
  // the fused head (linear_cross_entropy): equal to cross_entropy over
  // forward()'s logits, without the [B T, V] logits (undefined when
  // fused_loss_head is off).
  Tensor forward_loss(const Tensor& tokens, const Tensor& targets) override;
  std::string name() const override { return "gpt"; }
  const GptConfig& config() const { return config_; }
  int64_t vocab() const override { return config_.vocab; }
  int64_t context() const override { return config_.context; }
  // Recompute each block in backward instead of keeping its activations
  // (mt::checkpoint): the same gradients, less memory, one more forward.
  bool enable_activation_checkpointing() override { return checkpoint_activations = true; }
  bool checkpoint_activations = false;
  bool fused_loss_head = true;

  std::shared_ptr<nn::Embedding> wte, wpe;
  std::shared_ptr<nn::ModuleList> h;
  std::shared_ptr<nn::LayerNorm> ln_f;

 private:
  Tensor embed(const Tensor& tokens, int64_t first_position);
  Tensor blocks(const Tensor& tokens);  // embeddings and every block: the final hidden states, before ln_f
  Tensor head(const Tensor& x);

  GptConfig config_;
  Tensor positions_;  // 0 .. context-1 on the device of the last forward (built once, not per step)
};

}  // namespace mt::models
