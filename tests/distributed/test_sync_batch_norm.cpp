// Synchronised batch norm (dist::convert_sync_batchnorm): W ranks of batch B
// against one process normalising the whole W x B batch with batch_norm.
#include "distributed/dist_test_util.h"
#include "distributed/sync_batch_norm.h"

using namespace mt;

namespace {

constexpr int64_t kChannels = 3;

// The whole batch every rank can make alike: [W x B, C, 4, 4], per channel a
// large mean (so a rank's mean far from the global one would show) and a spread.
Tensor whole_batch(int64_t samples, DType dtype, double offset, double spread) {
  Generator gen(99);
  Tensor x = randn({samples, kChannels, 4, 4}, kF32, kCPU, &gen);
  const Tensor shift = from_vector(std::vector<double>{offset, -offset / 2, 0.25 * offset}, {1, kChannels, 1, 1});
  return add(mul(x, spread), shift).to(dtype);
}

struct Side {
  std::shared_ptr<nn::BatchNorm2d> bn;
  Tensor x, y;
};

// The upstream gradient of the whole batch: a fixed pattern (each rank takes its rows).
Tensor whole_pattern(int64_t samples) {
  Generator gen(7);
  return randn({samples, kChannels, 4, 4}, kF32, kCPU, &gen);
}

// One training forward and backward of a BatchNorm2d with a non-trivial
// weight and bias over `x`, the upstream gradient `pattern` over the batch
// size (as a mean loss gives: each rank's is W times the whole batch's).
Side forward_backward(const Tensor& x_in, const Tensor& pattern, bool sync) {
  Side s;
  s.bn = std::make_shared<nn::BatchNorm2d>(kChannels);
  {
    NoGradGuard no_grad;
    fill_(s.bn->weight, 1.5);
    fill_(s.bn->bias, -0.25);
  }
  if (sync) dist::convert_sync_batchnorm(*s.bn);
  s.x = x_in.detach().requires_grad_();
  s.y = s.bn->forward(s.x);
  s.y.backward(mul(pattern, 1.0 / static_cast<double>(x_in.size(0))).to(s.y.dtype()));
  return s;
}

double max_difference(const Tensor& a, const Tensor& b) {
  const std::vector<double> va = a.to(kCPU).to(kF64).to_vector(), vb = b.to(kCPU).to(kF64).to_vector();
  REQUIRE(va.size() == vb.size());
  double worst = 0;
  for (size_t i = 0; i < va.size(); ++i) worst = std::max(worst, std::abs(va[i] - vb[i]) / (1 + std::abs(vb[i])));
  return std::isnan(worst) ? INFINITY : worst;
}

}  // namespace

// Catches: each rank normalising with its own shard's statistics (what
// BatchNorm2d alone does), variances combined without Chan's shift term
// (ranks whose means differ), the input gradient's two sums not all-reduced,
// running statistics updated from the local batch or with the biased
// variance, and the weight's gradient summed over ranks twice (DDP averages it).
TEST_CASE("SyncBatchNorm on W ranks of batch B equals batch norm over W x B", "[dist][sync_bn]") {
  auto& world = dist::world();
  const int r = world.rank(), w = world.size();
  const int64_t per_rank = 4;
  for (const DType dtype : {kF32, kF16}) {
    INFO("dtype " << dtype_name(dtype) << ", world " << w);
    const double tol = dtype == kF32 ? 2e-5 : 4e-3;
    const Tensor whole = whole_batch(per_rank * w, dtype, 20.0, 3.0);
    const Tensor pattern = whole_pattern(per_rank * w);
    const Side one = forward_backward(whole, pattern, false);
    const Tensor mine = whole.narrow(0, r * per_rank, per_rank).contiguous();
    const Side synced = forward_backward(mine, pattern.narrow(0, r * per_rank, per_rank).contiguous(), true);
    CHECK(synced.bn->syncs_statistics());
    CHECK(max_difference(synced.y, one.y.narrow(0, r * per_rank, per_rank)) <= tol);
    // Rank r's input gradient is W times the whole batch's for its samples (its loss is a mean over B).
    CHECK(max_difference(div(synced.x.grad(), static_cast<double>(w)), one.x.grad().narrow(0, r * per_rank, per_rank)) <=
          tol);
    // The weight's and bias's gradients, averaged over the ranks as DDP does, are the whole batch's.
    for (const auto& [mine_grad, whole_grad] :
         {std::pair{synced.bn->weight.grad(), one.bn->weight.grad()}, std::pair{synced.bn->bias.grad(), one.bn->bias.grad()}}) {
      Tensor averaged = mine_grad.to(kF32).contiguous().clone();
      world.all_reduce(averaged)->wait();
      CHECK(max_difference(div(averaged, static_cast<double>(w)), whole_grad) <= tol);
    }
    // The running statistics: the whole batch's, the same on every rank.
    CHECK(max_difference(synced.bn->running_mean, one.bn->running_mean) <= 1e-5);
    CHECK(max_difference(synced.bn->running_var, one.bn->running_var) <= 1e-4);
    Tensor spread = synced.bn->running_var.clone();
    Tensor highest = spread.clone();
    world.all_reduce(highest, dist::ReduceOp::Max)->wait();
    CHECK(max_difference(highest, spread) == 0);
  }
}

// Catches: per-rank sums taken in the input's f16 (a channel of 64 values
// near 2000 sums past f16's 65504 and the statistics turn to inf).
TEST_CASE("SyncBatchNorm keeps f16 statistics finite where f16 sums would overflow", "[dist][sync_bn]") {
  auto& world = dist::world();
  const int r = world.rank(), w = world.size();
  const int64_t per_rank = 4;  // 4 x 4 x 4 = 64 values per channel and rank
  const Tensor whole = whole_batch(per_rank * w, kF16, 2000.0, 1.0);
  const Side synced = forward_backward(whole.narrow(0, r * per_rank, per_rank).contiguous(),
                                      whole_pattern(per_rank * w).narrow(0, r * per_rank, per_rank).contiguous(), true);
  for (const Tensor& t : {synced.y, synced.x.grad(), synced.bn->running_mean, synced.bn->running_var}) {
    for (double v : t.to(kCPU).to(kF64).to_vector()) REQUIRE(std::isfinite(v));
  }
  CHECK(synced.bn->running_mean.to_vector()[0] == Approx(0.1 * 2000.0).epsilon(1e-3));
}
