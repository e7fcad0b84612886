// The collectives of every back end against values each rank can predict,
// in every floating dtype (and i64 for counts). Run as 1, 2 and 3 ranks.
#include <catch2/catch.hpp>

#include "distributed/process_group.h"
#include "mixtape.h"
#include "nn/layers.h"

using namespace mt;
using Catch::Contains;
using dist::ReduceOp;

namespace {

const std::vector<DType> kDtypes = {kF64, kF32, kF16, kBF16, kI64};

Tensor filled(int64_t n, DType dtype, const std::function<double(int64_t)>& value) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = value(i);
  return from_vector(v, {n}, dtype);
}

void check_values(const Tensor& t, const std::function<double(int64_t)>& expected) {
  const std::vector<double> got = t.to_vector();
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << " of " << dtype_name(t.dtype()));
    CHECK(got[i] == expected(static_cast<int64_t>(i)));
  }
}

}  // namespace

// The bug: a reduction that skips a rank, reduces only part of the buffer,
// or (for f16/bf16, which MPI has no type for) reinterprets the bits as
// integers; all of these change the small exact sums checked here.
TEST_CASE("all_reduce sums and maxes every element over the ranks", "[dist]") {
  auto& world = dist::world();
  const int r = world.rank(), w = world.size();
  for (DType dtype : kDtypes) {
    Tensor t = filled(7, dtype, [&](int64_t i) { return static_cast<double>(i + r); });
    world.all_reduce(t)->wait();
    check_values(t, [&](int64_t i) { return static_cast<double>(w * i + w * (w - 1) / 2); });
    Tensor m = filled(7, dtype, [&](int64_t i) { return static_cast<double>((i % 2 == 0 ? 1 : -1) * (r + 1) * i); });
    world.all_reduce(m, ReduceOp::Max)->wait();
    check_values(m, [&](int64_t i) { return static_cast<double>(i % 2 == 0 ? w * i : -i); });
  }
}

TEST_CASE("broadcast copies the root's tensor to every rank", "[dist]") {
  auto& world = dist::world();
  const int r = world.rank(), root = world.size() - 1;
  for (DType dtype : kDtypes) {
    Tensor t = filled(5, dtype, [&](int64_t i) { return static_cast<double>(10 * r + i); });
    world.broadcast(t, root)->wait();
    check_values(t, [&](int64_t i) { return static_cast<double>(10 * root + i); });
  }
  Tensor t = zeros({2});
  CHECK_THROWS_WITH(world.broadcast(t, world.size()), Contains("is not a rank"));
}

TEST_CASE("all_gather lays the ranks' tensors out in rank order", "[dist]") {
  auto& world = dist::world();
  const int r = world.rank(), w = world.size();
  for (DType dtype : kDtypes) {
    Tensor in = filled(5, dtype, [&](int64_t i) { return static_cast<double>(50 * r + i); });
    Tensor out = empty({w * 5}, dtype);
    world.all_gather(out, in)->wait();
    check_values(out, [&](int64_t j) { return static_cast<double>(50 * (j / 5) + j % 5); });
  }
  Tensor wrong = empty({w * 5 + 1});
  CHECK_THROWS_WITH(world.all_gather(wrong, zeros({5})), Contains("must hold"));
}

TEST_CASE("reduce_scatter gives rank r the reduction of slice r", "[dist]") {
  auto& world = dist::world();
  const int r = world.rank(), w = world.size();
  const int64_t n = 4;
  for (DType dtype : kDtypes) {
    Tensor in = filled(w * n, dtype, [&](int64_t j) { return static_cast<double>(r + j); });
    Tensor out = empty({n}, dtype);
    world.reduce_scatter(out, in)->wait();
    check_values(out, [&](int64_t i) { return static_cast<double>(w * (w - 1) / 2 + w * (r * n + i)); });
  }
}

// The bug: f16 summed in a wider type and never rounded back per element
// would report 120000 as a finite f16; NCCL's and this back end's sum round
// each partial sum to f16, so it overflows exactly as a GPU reduction does.
TEST_CASE("f16 sums overflow to inf and a NaN wins a max, as on a GPU", "[dist]") {
  auto& world = dist::world();
  if (world.size() < 2) return;  // a world of one reduces nothing
  Tensor big = full({3}, 60000.0, kF16);
  world.all_reduce(big)->wait();
  CHECK(std::isinf(big.to_vector()[0]));
  Tensor m = filled(2, kBF16, [&](int64_t i) {
    return world.rank() == 1 && i == 0 ? std::numeric_limits<double>::quiet_NaN() : 1.0;
  });
  world.all_reduce(m, ReduceOp::Max)->wait();
  CHECK(std::isnan(m.to_vector()[0]));
  CHECK(m.to_vector()[1] == 1.0);
}

TEST_CASE("collectives run asynchronously in issue order and can be waited for in any order", "[dist]") {
  auto& world = dist::world();
  const int w = world.size();
  std::vector<Tensor> ts;
  std::vector<std::shared_ptr<dist::Work>> works;
  for (int k = 0; k < 4; ++k) {
    ts.push_back(full({1000}, static_cast<double>(k + 1), kF32));
    works.push_back(world.all_reduce(ts.back()));
  }
  for (int k = 3; k >= 0; --k) {
    works[static_cast<size_t>(k)]->wait();
    CHECK(works[static_cast<size_t>(k)]->is_completed());
    CHECK(ts[static_cast<size_t>(k)].to_vector()[999] == static_cast<double>(w * (k + 1)));
  }
  world.barrier();
}

TEST_CASE("the world is MPI exactly when launched as several ranks", "[dist]") {
  auto& world = dist::world();
  CHECK(world.rank() >= 0);
  CHECK(world.rank() < world.size());
  CHECK(world.backend() == (world.size() > 1 ? "mpi" : "local"));
  CHECK(&dist::group_for(kSIM) == &world);  // sim tensors are host memory: MPI carries them
}

TEST_CASE("sim tensors go through the same collectives", "[dist]") {
  auto& world = dist::world();
  Tensor t = full({6}, static_cast<double>(world.rank() + 1), kF16).to(kSIM);
  world.all_reduce(t)->wait();
  const int w = world.size();
  check_values(t.to(kCPU), [&](int64_t) { return static_cast<double>(w * (w + 1) / 2); });
}

// Run only with MT_DIST_DEBUG=1 as 2 ranks (its own CTest entry): ranks that
// disagree on a collective's shape must get an error naming both shapes, not
// a hang or a wrong sum.
TEST_CASE("with MT_DIST_DEBUG a shape mismatch between ranks is an error naming both", "[.debug]") {
  auto& world = dist::world();
  REQUIRE(world.size() >= 2);
  Tensor t = zeros({world.rank() == 0 ? 3 : 4});
  CHECK_THROWS_WITH(world.all_reduce(t)->wait(), Contains("[3]") && Contains("[4]") && Contains("disagree"));
  Tensor same = full({2}, 1.0);
  world.all_reduce(same)->wait();  // the group still works afterwards
  CHECK(same.to_vector()[0] == static_cast<double>(world.size()));
}

// On a GPU (its own CTest entry, exit 77 without one): the NCCL back end at
// world size 1, forced with MT_DIST_BACKEND=nccl, on CUDA tensors of every
// dtype, and DDP over it giving the gradients of plain backward.
TEST_CASE("NCCL collectives and DDP on a GPU", "[.gpu]") {
  ::setenv("MT_DIST_BACKEND", "nccl", 1);
  auto& group = dist::group_for(kCUDA);
  CHECK(group.backend() == "nccl");
  const int w = group.size();
  for (DType dtype : kDtypes) {
    Tensor t = filled(7, dtype, [&](int64_t i) { return static_cast<double>(i + group.rank()); }).to(kCUDA);
    group.all_reduce(t)->wait();
    check_values(t.to(kCPU), [&](int64_t i) { return static_cast<double>(w * i + w * (w - 1) / 2); });
    Tensor in = filled(5, dtype, [&](int64_t i) { return static_cast<double>(50 * group.rank() + i); }).to(kCUDA);
    Tensor out = empty({w * 5}, dtype, kCUDA);
    group.all_gather(out, in)->wait();
    check_values(out.to(kCPU), [&](int64_t j) { return static_cast<double>(50 * (j / 5) + j % 5); });
    Tensor scattered = empty({5}, dtype, kCUDA);
    group.reduce_scatter(scattered, out)->wait();
    check_values(scattered.to(kCPU), [&](int64_t i) { return static_cast<double>(w * (50 * group.rank() + i)); });
    group.broadcast(in, 0)->wait();
  }
  for (bool as_view : {false, true}) {
    INFO((as_view ? "gradient_as_bucket_view" : "copies"));
    manual_seed(1);
    auto a = std::make_shared<nn::Linear>(6, 3);
    a->to(kCUDA);
    dist::DistributedDataParallel ddp(a, {.gradient_as_bucket_view = as_view});
    const Tensor x = randn({4, 6}).to(kCUDA);
    for (int step = 0; step < 2; ++step) {  // the second finds the gradients where the first left them
      a->zero_grad();
      sum(ddp.forward(x)).backward();
    }
    const Tensor ddp_grad = a->weight.grad().to(kCPU);
    a->zero_grad();
    sum(a->forward(x)).backward();
    CHECK(ddp_grad.to_vector() == a->weight.grad().to(kCPU).to_vector());
  }
  ::unsetenv("MT_DIST_BACKEND");
}
