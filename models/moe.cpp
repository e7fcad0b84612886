#include "models/moe.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "nn/init.h"

namespace mt::models {

int64_t expert_capacity(int64_t tokens, int64_t experts, int64_t top_k, double capacity_factor) {
  MT_CHECK(tokens > 0 && experts > 0 && top_k > 0 && capacity_factor > 0,
           "moe: capacity of {} tokens over {} experts (top-{}, factor {}) needs positive values", tokens, experts,
           top_k, capacity_factor);
  const auto wanted = static_cast<int64_t>(
      std::ceil(capacity_factor * static_cast<double>(top_k * tokens) / static_cast<double>(experts)));
  return std::clamp<int64_t>(wanted, 1, tokens);
}

Routing route(const Tensor& logits, int64_t top_k, int64_t capacity, const Tensor& expert_ids) {
  MT_CHECK(logits.dim() == 2 && (logits.dtype() == kF32 || logits.dtype() == kF64),
           "moe: router logits must be f32 (or f64) [tokens, experts], got {} ({})", logits.shape_string(),
           logits.dtype());
  const int64_t n = logits.size(0), e = logits.size(1);
  MT_CHECK(top_k >= 1 && top_k <= e, "moe: top-{} of {} experts", top_k, e);
  // Slots and ranks are counted in f32: exact while below 2^24.
  MT_CHECK(top_k * n * e < (int64_t{1} << 24), "moe: {} tokens x {} choices x {} experts is too many for one routing",
           n, top_k, e);
  Routing r;
  r.capacity = capacity;
  r.probs = softmax(logits, -1);
  const ValuesIndices top = topk(r.probs, top_k, -1);
  r.gates = top_k > 1 ? div(top.values, sum(top.values, -1, true)) : top.values;
  const NoGradGuard no_grad;
  // Choice-major: all first choices (token order), then all second ones:
  // a token's first choice outranks any token's second for a slot.
  const Tensor choice = top.indices.t().reshape({top_k * n}).to(kF32);
  const Tensor ids = expert_ids.defined() ? expert_ids : arange(0, double(e), 1, kF32, logits.device());
  const Tensor one_hot = eq(choice.unsqueeze(1), ids).to(kF32);
  const Tensor rank = sub(sum(mul(cumsum(one_hot, 0), one_hot), 1), 1.0);  // earlier choices of the same expert
  r.kept = lt(rank, double(capacity)).to(kF32);
  const Tensor slot = add(mul(r.kept, add(mul(choice, double(capacity)), rank)),
                          mul(rsub(r.kept, 1.0), double(e * capacity)));  // the spare row past the last slot
  r.slots = slot.to(kI64);
  r.assigned = sum(one_hot, 0);
  return r;
}

// ---------------------------------------------------------------- the experts

ExpertMlps::ExpertMlps(int64_t experts, int64_t width, int64_t hidden, ExpertKind kind)
    : kind_(kind), experts_(experts), width_(width), hidden_(hidden) {
  MT_CHECK(experts > 0 && width > 0 && hidden > 0, "ExpertMLPs: experts, width and hidden must be positive");
  auto weight = [&](const std::string& name, Tensor& slot, int64_t in, int64_t out) {
    register_parameter(name, slot, zeros({experts, in, out}));
    nn::init::normal_(slot, 0.0, 0.02);
  };
  if (kind == ExpertKind::SwiGlu) {
    weight("gate_proj", gate_proj, width, hidden);
    weight("up_proj", up_proj, width, hidden);
    weight("down_proj", down_proj, hidden, width);
  } else {
    weight("c_fc", c_fc, width, hidden);
    register_parameter("c_fc_bias", c_fc_bias, zeros({experts, 1, hidden}));
    weight("c_proj", c_proj, hidden, width);
    register_parameter("c_proj_bias", c_proj_bias, zeros({experts, 1, width}));
  }
}

std::string ExpertMlps::extra_repr() const {
  return fmt::format("experts={}, width={}, hidden={}, {}", experts_, width_, hidden_,
                     kind_ == ExpertKind::SwiGlu ? "swiglu" : "gelu_tanh");
}

Tensor ExpertMlps::forward(const Tensor& x) {
  const nn::ForwardScope scope(*this);
  MT_CHECK(x.dim() == 3 && x.size(0) == experts_ && x.size(2) == width_,
           "ExpertMLPs: expected [{}, capacity, {}], got {}", experts_, width_, x.shape_string());
  if (kind_ == ExpertKind::SwiGlu) return bmm(swiglu(bmm(x, gate_proj), bmm(x, up_proj)), down_proj);
  const Tensor h = gelu(add(bmm(x, c_fc), c_fc_bias), GeluApproximation::Tanh);
  return add(bmm(h, c_proj), c_proj_bias);
}

// ---------------------------------------------------------------- the layer

MoeMlp::MoeMlp(int64_t width, int64_t hidden, const MoeConfig& config, ExpertKind kind) : config_(config) {
  MT_CHECK(config.experts >= 2 && (config.top_k == 1 || config.top_k == 2) && config.top_k <= config.experts,
           "MoeMLP: needs at least 2 experts and top-1 or top-2 routing, got {} experts, top-{}", config.experts,
           config.top_k);
  MT_CHECK(config.capacity_factor > 0 && config.aux_loss_coef >= 0 && config.z_loss_coef >= 0,
           "MoeMLP: the capacity factor must be positive and the loss coefficients non-negative");
  gate = register_module("gate", std::make_shared<nn::Linear>(width, config.experts, /*bias=*/false));
  experts = register_module("experts", std::make_shared<ExpertMlps>(config.experts, width, hidden, kind));
}

std::string MoeMlp::extra_repr() const {
  return fmt::format("top_k={}, capacity_factor={}", config_.top_k, config_.capacity_factor);
}

namespace {

// log(sum(exp(logits))) per row, stable.
Tensor logsumexp_rows(const Tensor& logits) {
  const Tensor top = max(logits, -1, true).values.detach();
  return add(log(sum(exp(sub(logits, top)), -1, true)), top).reshape({logits.size(0)});
}

}  // namespace

Tensor MoeMlp::forward(const Tensor& x) {
  const nn::ForwardScope scope(*this);
  const int64_t width = x.size(-1), e = config_.experts, k = config_.top_k;
  const Tensor tokens = x.reshape({-1, width});
  const int64_t n = tokens.size(0);
  const Tensor logits = router_logits(tokens, gate->weight);
  const int64_t capacity = is_training() ? expert_capacity(n, e, k, config_.capacity_factor) : n;
  if (!expert_ids_.defined() || expert_ids_.device() != x.device()) {
    expert_ids_ = arange(0, double(e), 1, kF32, x.device());
  }
  const Routing r = route(logits, k, capacity, expert_ids_);

  // Dispatch: choice j of token n into its slot (the dropped ones into the spare row E * C).
  const Tensor sent = k == 1 ? tokens : cat(std::vector<Tensor>(static_cast<size_t>(k), tokens), 0);
  const Tensor slots_in =
      index_add(zeros({e * capacity + 1, width}, tokens.dtype(), tokens.device()), 0, r.slots, sent);
  const Tensor out = experts->forward(slots_in.narrow(0, 0, e * capacity).reshape({e, capacity, width}));
  // Combine: each choice reads its slot back (a dropped one, the zero row) times its gate.
  const Tensor outs = cat({out.reshape({e * capacity, width}), zeros({1, width}, out.dtype(), out.device())}, 0);
  const Tensor picked = index_select(outs, 0, r.slots).reshape({k, n, width});
  const Tensor y = sum(mul(picked, r.gates.t().unsqueeze(-1)), 0);

  // The router's losses: load balance (f_e from the choices, P_e from the probabilities) and z.
  const Tensor share = div(r.assigned, double(k * n));  // f_e: not differentiable, as in Switch
  const Tensor balance = mul(sum(mul(share, mean(r.probs, 0))), double(e));
  const Tensor z = mean(square(logsumexp_rows(logits)));
  auxiliary_loss_ = add(mul(balance, config_.aux_loss_coef), mul(z, config_.z_loss_coef));
  if (is_training()) accumulate(r, logits, balance, z);
  Shape shape = x.sizes();
  return y.reshape(shape);
}

void MoeMlp::accumulate(const Routing& r, const Tensor& logits, const Tensor& balance, const Tensor& z) {
  const NoGradGuard no_grad;
  const Device device = logits.device();
  if (!totals_.defined() || totals_.device() != device) {  // the first (eager) step: before any capture
    assigned_sum_ = zeros({config_.experts}, kF64, device);
    totals_ = zeros({6}, kF64, device);
  }
  const Tensor entropy = neg(sum(mul(r.probs, log_softmax(logits, -1))));
  const Tensor dropped = sum(rsub(r.kept, 1.0));
  // (full() fills on the device: no upload, so a captured step replays it.)
  const Tensor step = stack({dropped.to(kF64), entropy.to(kF64), balance.detach().to(kF64), z.detach().to(kF64),
                             full({}, double(logits.size(0)), kF64, device), full({}, 1.0, kF64, device)});
  copy_(assigned_sum_, add(assigned_sum_, r.assigned.to(kF64)));
  copy_(totals_, add(totals_, step));
}

RouterStatistics MoeMlp::take_statistics() {
  RouterStatistics s;
  if (!totals_.defined()) return s;
  const std::vector<double> totals = totals_.to(kCPU).to_vector(), assigned = assigned_sum_.to(kCPU).to_vector();
  const double tokens = totals[4], forwards = totals[5];
  if (forwards == 0) return s;
  const double choices = tokens * double(config_.top_k);
  s.tokens = static_cast<int64_t>(tokens);
  for (double a : assigned) s.expert_share.push_back(a / choices);
  s.dropped_share = totals[0] / choices;
  s.entropy = totals[1] / tokens;
  s.auxiliary_loss = totals[2] / forwards;
  s.z_loss = totals[3] / forwards;
  fill_(assigned_sum_, 0.0);  // in place: a captured graph keeps adding to these very buffers
  fill_(totals_, 0.0);
  return s;
}

// ---------------------------------------------------------------- over a model

std::vector<MoeMlp*> moe_layers(nn::Module& model) {
  std::vector<MoeMlp*> out;
  for (const auto& named : model.named_modules()) {
    if (auto* moe = dynamic_cast<MoeMlp*>(named.second)) out.push_back(moe);
  }
  return out;
}

Tensor moe_auxiliary_loss(nn::Module& model) {
  Tensor total;
  for (MoeMlp* moe : moe_layers(model)) {
    const Tensor& loss = moe->auxiliary_loss();
    if (loss.defined()) total = total.defined() ? add(total, loss) : loss;
  }
  return total;
}

Tensor with_router_losses(const Tensor& loss, nn::Module& model) {
  const Tensor aux = moe_auxiliary_loss(model);
  return aux.defined() ? add(loss, sub(aux, aux.detach())) : loss;
}

ParameterCounts parameter_counts(nn::Module& model) {
  ParameterCounts c;
  for (const Tensor& p : model.parameters()) c.total += p.numel();
  c.activated = c.total;
  for (MoeMlp* moe : moe_layers(model)) {
    int64_t expert_params = 0;
    for (const Tensor& p : moe->experts->parameters()) expert_params += p.numel();
    const int64_t e = moe->config().experts, k = moe->config().top_k;
    c.activated -= expert_params - expert_params / e * k;
  }
  return c;
}

}  // namespace mt::models
