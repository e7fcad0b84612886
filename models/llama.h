// A Llama-style decoder: pre-norm blocks with RMSNorm, rotary position
// embeddings (RoPE) on the queries and keys, grouped-query attention (fewer
// key/value heads than query heads), a SwiGLU MLP, no biases, and an output
// head of its own (not tied to the embedding). HF transformers' parameter
// names, so a checkpoint loads into LlamaForCausalLM's state dict.
//
// Named configurations (llama_config()):
//   llama-tiny   256 bytes, context 64, 2 layers, 4 heads (2 KV), width 64, MLP 176      (CPU tests)
//   llama-small  256 bytes, context 256, 6 layers, 6 heads (2 KV), width 384, MLP 1024
//   llama-125m   50304 tokens, context 1024, 12 layers, 12 heads (4 KV), width 768, MLP 2048
//   llama-moe-tiny  llama-tiny with each MLP a mixture of 4 SwiGLU experts of 176, top-2 (models/moe.h)
// The vocabulary grows to the tokenizer's (train --tokenizer gpt2), as the GPTs' does.
//
// Precision: RMSNorm's statistic is computed in f32 (nn::RMSNorm); RoPE's
// angles and cos/sin tables are f32, and the rotation runs in f32 inside
// the rope kernel, rounded once to q's and k's dtype.
//
// RMSNorm, RoPE and SwiGLU are one fused kernel each (rms_norm: the
// layer_norm family's, not centered; rope; swiglu), and grouped-query
// attention runs in the fused attention kernels (enable_gqa), which read
// each K/V head for its group of query heads: no repeated K/V is made. The
// generation cache keeps the K/V heads.
//
// PyTorch equivalent (same names and shapes; rotate_half pairs the two
// halves of each head, as HF's Llama does):
//   def rotate_half(x):
//       x1, x2 = x.chunk(2, dim=-1)
//       return torch.cat((-x2, x1), dim=-1)
//   def rope(x, cos, sin):                              # x [B, H, T, D]; cos, sin [T, D]
//       return x * cos + rotate_half(x) * sin
//   class Attention(nn.Module):
//       def __init__(self, c):
//           super().__init__()
//           d = c.width // c.heads
//           self.q_proj = nn.Linear(c.width, c.heads * d, bias=False)
//           self.k_proj = nn.Linear(c.width, c.kv_heads * d, bias=False)
//           self.v_proj = nn.Linear(c.width, c.kv_heads * d, bias=False)
//           self.o_proj = nn.Linear(c.heads * d, c.width, bias=False)
//       def forward(self, x, cos, sin):
//           B, T, _ = x.shape
//           q = self.q_proj(x).view(B, T, H, D).transpose(1, 2)    # H = heads, D = width // heads
//           k = self.k_proj(x).view(B, T, KV, D).transpose(1, 2)   # KV = kv_heads
//           v = self.v_proj(x).view(B, T, KV, D).transpose(1, 2)
//           q, k = rope(q, cos, sin), rope(k, cos, sin)
//           k, v = (t.repeat_interleave(H // KV, dim=1) for t in (k, v))
//           y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
//           return self.o_proj(y.transpose(1, 2).reshape(B, T, H * D))
//   class Mlp(nn.Module):
//       def forward(self, x):
//           return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))   # all bias=False
//   class Layer(nn.Module):                             # input_layernorm, post_attention_layernorm: RMSNorm(width)
//       def forward(self, x, cos, sin):
//           x = x + self.self_attn(self.input_layernorm(x), cos, sin)
//           return x + self.mlp(self.post_attention_layernorm(x))
//   class Llama(nn.Module):
//       def __init__(self, c):
//           self.model = nn.Module()
//           self.model.embed_tokens = nn.Embedding(c.vocab, c.width)
//           self.model.layers = nn.ModuleList(Layer(c) for _ in range(c.layers))
//           self.model.norm = RMSNorm(c.width)
//           self.lm_head = nn.Linear(c.width, c.vocab, bias=False)
//       def forward(self, tokens):
//           inv_freq = 1 / theta ** (torch.arange(0, D, 2) / D)
//           angles = torch.outer(torch.arange(T), inv_freq)  # [T, D / 2]
//           cos, sin = torch.cat((angles, angles), -1).cos(), ... .sin()
//           x = self.model.embed_tokens(tokens)
//           for layer in self.model.layers:
//               x = layer(x, cos, sin)
//           return self.lm_head(self.model.norm(x))
#pragma once

#include <string>

#include "models/attention_heads.h"
#include "models/decoder.h"
#include "models/moe.h"
#include "nn/layers.h"

namespace mt::models {

struct LlamaConfig {
  int64_t vocab = 256, context = 64, layers = 2, heads = 4, kv_heads = 2, width = 64, hidden = 176;
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  MoeConfig moe;  // experts > 0: each layer's MLP is a mixture of `experts` SwiGLU MLPs of `hidden` (models/moe.h)
};

// The named configuration; an mt::Error lists the names when `name` is unknown.
LlamaConfig llama_config(const std::string& name);

// The rotary tables for positions 0 .. positions-1 of heads of `head_dim`:
// cos and sin [positions, head_dim] (f32; each angle repeated over the two halves).
struct RopeTables {
  Tensor cos, sin;
};
RopeTables rope_tables(int64_t positions, int64_t head_dim, double theta, Device device);
// x [B, H, T, D] at positions first .. first + T - 1 rotated: x * cos + rotate_half(x) * sin.
Tensor apply_rope(const Tensor& x, const RopeTables& rope, int64_t first = 0);

class LlamaAttention : public nn::Module {
 public:
  explicit LlamaAttention(const LlamaConfig& c);
  Tensor forward(const Tensor& x, const RopeTables& rope);
  // x continues the positions whose keys and values (KV heads, rotated keys)
  // are in (keys, values), which grow by x's positions (undefined at first).
  Tensor forward(const Tensor& x, const RopeTables& rope, Tensor& keys, Tensor& values);
  std::string name() const override { return "LlamaAttention"; }
  std::shared_ptr<nn::Linear> q_proj, k_proj, v_proj, o_proj;

 private:
  int64_t heads_, kv_heads_;
};

class LlamaMlp : public nn::Module {
 public:
  LlamaMlp(int64_t width, int64_t hidden);
  Tensor forward(const Tensor& x) override;  // down(silu(gate(x)) * up(x))
  std::string name() const override { return "LlamaMLP"; }
  std::shared_ptr<nn::Linear> gate_proj, up_proj, down_proj;
};

class LlamaLayer : public nn::Module {
 public:
  explicit LlamaLayer(const LlamaConfig& c);
  Tensor forward(const Tensor& x, const RopeTables& rope);
  Tensor forward(const Tensor& x, const RopeTables& rope, Tensor& keys, Tensor& values);
  std::string name() const override { return "LlamaDecoderLayer"; }
  std::shared_ptr<nn::RMSNorm> input_layernorm, post_attention_layernorm;
  std::shared_ptr<LlamaAttention> self_attn;
  std::shared_ptr<LlamaMlp> mlp;                   // dense, or
  std::shared_ptr<MoeMlp> block_sparse_moe;        // a mixture of experts (Mixtral's name)
};

// The embedding, the layers and the final norm: HF's LlamaModel ("model.").
class LlamaBody : public nn::Module {
 public:
  explicit LlamaBody(const LlamaConfig& c);
  std::string name() const override { return "LlamaModel"; }
  std::shared_ptr<nn::Embedding> embed_tokens;
  std::shared_ptr<nn::ModuleList> layers;
  std::shared_ptr<nn::RMSNorm> norm;
};

class Llama : public nn::Module, public Decoder {
 public:
  explicit Llama(const LlamaConfig& config);
  Tensor forward(const Tensor& tokens) override;  // i64 [B, T] -> logits [B, T, vocab]
  // Inference with a key/value cache (the KV heads' keys and values, not the
  // repeated ones): `tokens` [B, t] sit at positions cache.length() ..
  // cache.length() + t - 1, which must fit the context.
  Tensor forward(const Tensor& tokens, KvCache& cache) override;
  // A mixture of experts: the mean next-token cross-entropy, whose gradient
  // also carries the router's losses (cross_entropy + aux - aux.detach():
  // the value reported stays the cross-entropy). Undefined for a dense model.
  Tensor forward_loss(const Tensor& tokens, const Tensor& targets) override;
  std::string name() const override { return "llama"; }
  const LlamaConfig& config() const { return config_; }
  int64_t vocab() const override { return config_.vocab; }
  int64_t context() const override { return config_.context; }
  std::shared_ptr<LlamaBody> model;
  std::shared_ptr<nn::Linear> lm_head;

 private:
  const RopeTables& rope_on(Device device);
  LlamaConfig config_;
  RopeTables rope_;  // for the whole context, on the device of the last forward (built once)
};

}  // namespace mt::models
