// A mixture-of-experts MLP (Shazeer et al. 2017; GShard; Switch Transformer):
// a router sends each token to its top-k of E expert MLPs, and the token's
// output is the experts' outputs weighted by the router's gates.
//
//   logits = x W_r^T                    f32 under any autocast (router_logits: an Fp32 policy row)
//   probs  = softmax(logits)            f32
//   experts, gates = top-k of probs     k = 1: the probability itself (Switch);
//                                       k = 2: renormalised over the two (GShard, Mixtral)
//   each expert takes at most C = ceil(capacity_factor * k * N / E) of the
//   N tokens' k choices, in a fixed priority: every token's first choice
//   before any second choice, and within a choice, token order. A choice past
//   its expert's capacity is dropped: that expert adds nothing to the token
//   (its residual connection still carries it). Evaluation (!is_training())
//   drops nothing (C = N).
//   y = sum over kept choices of gate * expert(x)
//
// How it runs (one path on every device, no host read):
//   dispatch  index_add of the tokens into an [E * C + 1, D] buffer, at
//             slot expert * C + rank (the dropped ones into the spare last row)
//   experts   one batched GEMM per projection over [E, C, D]: with a
//             capacity every expert's group has the same C rows, so the
//             grouped GEMM is a batched one (padded slots are zero rows)
//   combine   index_select of each choice's slot (a dropped one reads a zero
//             row), weighted by its gate (f32) and summed over the k choices
// Both index ops accumulate in a fixed order, so a step is deterministic.
//
// Losses the router trains by (Switch Transformer; ST-MoE): the
// load-balancing loss E * sum_e f_e P_e (f_e: the fraction of the k N
// choices that picked expert e; P_e: the mean router probability of e; 1
// when balanced) and the router z-loss mean(logsumexp(logits)^2), which
// keeps the logits small. auxiliary_loss() is their weighted sum for the
// last forward; a model adds it to its loss (Llama::forward_loss).
//
// Parameters (names as a PyTorch twin registers them):
//   gate.weight                    [E, D]   the router (Mixtral's name)
//   experts.gate_proj, .up_proj    [E, D, H], experts.down_proj [E, H, D]      (SwiGLU experts)
//   experts.c_fc [E, D, H], .c_fc_bias [E, 1, H], .c_proj [E, H, D], .c_proj_bias [E, 1, D]  (GELU experts)
//
// PyTorch equivalent (SwiGLU experts; training, capacity C):
//   logits = x.float() @ gate.weight.float().t()              # [N, E]
//   probs = logits.softmax(-1); values, chosen = probs.topk(k)
//   gates = values / values.sum(-1, keepdim=True) if k > 1 else values
//   choice = chosen.t().reshape(-1)                           # choice-major: [k N]
//   one_hot = F.one_hot(choice, E).float()
//   rank = (one_hot.cumsum(0) * one_hot).sum(-1) - 1
//   kept = rank < C
//   slot = torch.where(kept, choice * C + rank, E * C).long()
//   buf = torch.zeros(E * C + 1, D).index_add(0, slot, x.repeat(k, 1))
//   h = F.silu(torch.bmm(buf[:-1].view(E, C, D), w_gate)) * torch.bmm(buf[:-1].view(E, C, D), w_up)
//   out = torch.cat([torch.bmm(h, w_down).view(E * C, D), torch.zeros(1, D)])
//   y = (out[slot].view(k, N, D) * gates.t().unsqueeze(-1)).sum(0)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/layers.h"

namespace mt::models {

struct MoeConfig {
  int64_t experts = 0;  // 0: a dense MLP, no mixture
  int64_t top_k = 2;    // 1 or 2
  double capacity_factor = 1.25;
  double aux_loss_coef = 0.01;  // Switch Transformer's alpha
  double z_loss_coef = 1e-3;    // ST-MoE's
};

enum class ExpertKind { SwiGlu, Gelu };  // Llama's MLP, GPT-2's (tanh GELU, biases)

// The most choices one expert takes: ceil(factor * k * tokens / experts), at
// least 1 and at most `tokens` (a token picks an expert once).
int64_t expert_capacity(int64_t tokens, int64_t experts, int64_t top_k, double capacity_factor);

// Where each of the N tokens' k choices goes (route()).
struct Routing {
  Tensor probs;     // f32 [N, E], softmax of the logits
  Tensor gates;     // f32 [N, k], each choice's weight (differentiable)
  Tensor slots;     // i64 [k N], choice-major (choice j of token n at j N + n): expert * C + rank, or E * C if dropped
  Tensor kept;      // f32 [k N], 1 kept, 0 dropped
  Tensor assigned;  // f32 [E], the choices that picked each expert (before the capacity)
  int64_t capacity = 0;
};
// expert_ids: 0 .. E-1 (f32) on the logits' device, made here when not given
// (arange is a host-to-device copy on a GPU: a layer keeps its own, made once).
Routing route(const Tensor& logits, int64_t top_k, int64_t capacity, const Tensor& expert_ids = Tensor());

// The E expert MLPs as stacked weights: x [E, C, D] -> [E, C, D], each
// projection one batched GEMM over the experts.
class ExpertMlps : public nn::Module {
 public:
  ExpertMlps(int64_t experts, int64_t width, int64_t hidden, ExpertKind kind);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "ExpertMLPs"; }
  std::string extra_repr() const override;
  ExpertKind kind() const { return kind_; }
  int64_t experts() const { return experts_; }
  Tensor gate_proj, up_proj, down_proj;              // SwiGLU
  Tensor c_fc, c_fc_bias, c_proj, c_proj_bias;       // GELU

 private:
  ExpertKind kind_;
  int64_t experts_, width_, hidden_;
};

// What the router did over the training forwards since the last take (host values).
struct RouterStatistics {
  int64_t tokens = 0;
  std::vector<double> expert_share;  // per expert: its fraction of the choices (before the capacity)
  double dropped_share = 0;          // the fraction of choices dropped at the capacity
  double entropy = 0;                // mean entropy of the router's distribution, nats (log E: uniform)
  double auxiliary_loss = 0;         // mean load-balancing loss (1: balanced)
  double z_loss = 0;                 // mean router z-loss
};

class MoeMlp : public nn::Module {
 public:
  MoeMlp(int64_t width, int64_t hidden, const MoeConfig& config, ExpertKind kind);
  Tensor forward(const Tensor& x) override;  // [..., D] -> [..., D] (f32: the gates are)
  std::string name() const override { return "MoeMLP"; }
  std::string extra_repr() const override;
  const MoeConfig& config() const { return config_; }
  // aux_loss_coef * load-balancing + z_loss_coef * z-loss of the last
  // forward (undefined before one): a 0-dim f32 on the device, differentiable.
  const Tensor& auxiliary_loss() const { return auxiliary_loss_; }
  // The statistics since the last call, then reset (reads the device: a sync).
  RouterStatistics take_statistics();
  std::shared_ptr<nn::Linear> gate;  // the router: its weight only (no bias), read by router_logits
  std::shared_ptr<ExpertMlps> experts;

 private:
  void accumulate(const Routing& routing, const Tensor& logits, const Tensor& balance, const Tensor& z);
  MoeConfig config_;
  Tensor expert_ids_;  // 0 .. E-1 on the device of the last forward (built once, not per step)
  Tensor auxiliary_loss_;
  // Running sums on the device over the training forwards (statistics), f64,
  // updated in place: a CUDA graph's replays add to them as eager steps do.
  // [E] choices per expert, then [6]: dropped, entropy, balance, z, tokens, forwards.
  Tensor assigned_sum_, totals_;
};

// Every MoE layer of `model`, in module order.
std::vector<MoeMlp*> moe_layers(nn::Module& model);
// The sum of the MoE layers' auxiliary losses of the last forward (undefined when there are none).
Tensor moe_auxiliary_loss(nn::Module& model);
// loss + aux - aux.detach() for the MoE layers' auxiliary loss: the value
// stays `loss` (what is reported), the gradient carries the router's losses.
Tensor with_router_losses(const Tensor& loss, nn::Module& model);

// Total parameters and those one token's forward touches: every expert's
// counts in the total, k of the E in the activated (the seed's "total vs
// activated parameters": what must be resident vs what one token computes with).
struct ParameterCounts {
  int64_t total = 0, activated = 0;
};
ParameterCounts parameter_counts(nn::Module& model);

}  // namespace mt::models
