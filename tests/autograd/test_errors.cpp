// Bad input: every mismatch is an mt::Error that names the op, the shapes or
// dtypes or devices involved, and what was expected. Never a crash.
#include <catch2/catch.hpp>
#include <cstdlib>

#include "mixtape.h"

using namespace mt;
using Catch::Contains;

TEST_CASE("shape mismatches name the op and both shapes", "[errors]") {
  const Tensor a = zeros({2, 3}), b = zeros({4});
  REQUIRE_THROWS_WITH(add(a, b), Contains("add") && Contains("[2, 3]") && Contains("[4]") &&
                                     Contains("cannot be broadcast"));
  REQUIRE_THROWS_WITH(matmul(zeros({2, 3}), zeros({4, 5})), Contains("matmul") && Contains("[2, 3]") &&
                                                                Contains("[4, 5]"));
  REQUIRE_THROWS_WITH(bmm(zeros({2, 3}), zeros({3, 2})), Contains("bmm") && Contains("3-D"));
  REQUIRE_THROWS_WITH(linear(zeros({2, 3}), zeros({4, 5})), Contains("linear") && Contains("in_features = 5"));
  REQUIRE_THROWS_WITH(layer_norm(zeros({2, 3}), {4}), Contains("layer_norm") && Contains("normalized_shape [4]"));
  REQUIRE_THROWS_WITH(cat({zeros({2, 3}), zeros({2, 4})}, 0), Contains("cat") && Contains("[2, 4]"));
  REQUIRE_THROWS_WITH(mse_loss(zeros({2}), zeros({3})), Contains("mse_loss") && Contains("[3]"));
  REQUIRE_THROWS_WITH(sum(zeros({2}), {3}), Contains("sum") && Contains("dim 3 is out of range"));
  REQUIRE_THROWS_WITH(softmax(zeros({2}), 1), Contains("softmax"));
}

TEST_CASE("dtype mismatches say which dtypes were expected", "[errors]") {
  REQUIRE_THROWS_WITH(bmm(zeros({1, 2, 2}, kF16), zeros({1, 2, 2}, kF32)),
                      Contains("same dtype") && Contains("f16") && Contains("f32"));
  REQUIRE_THROWS_WITH(embedding(zeros({4, 2}), zeros({3}, kF32)), Contains("embedding") && Contains("i64"));
  REQUIRE_THROWS_WITH(cross_entropy(zeros({2, 3}), zeros({2}, kF32)), Contains("cross_entropy"));
  REQUIRE_THROWS_WITH(softmax(zeros({2}, kI64), 0), Contains("floating-point") && Contains("i64"));
  REQUIRE_THROWS_WITH(where(zeros({2}), zeros({2}), zeros({2})), Contains("bool"));
}

TEST_CASE("out-of-range indices and class labels are named with their position", "[errors]") {
  const Tensor table = zeros({4, 2});
  REQUIRE_THROWS_WITH(embedding(table, from_vector(std::vector<int64_t>{1, 4}, {2})),
                      Contains("index 4 at position 1") && Contains("size 4"));
  REQUIRE_THROWS_WITH(index_select(table, 0, from_vector(std::vector<int64_t>{-1}, {1})), Contains("index -1"));
  REQUIRE_THROWS_WITH(gather(table, 1, from_vector(std::vector<int64_t>{0, 2}, {1, 2})), Contains("gather"));
  REQUIRE_THROWS_WITH(cross_entropy(zeros({2, 3}), from_vector(std::vector<int64_t>{0, 3}, {2})),
                      Contains("target 3 at row 1") && Contains("3 classes"));
  REQUIRE_THROWS_WITH(cross_entropy(zeros({2, 3}), from_vector(std::vector<int64_t>{0, 1, 2}, {3})),
                      Contains("does not match logits"));
  // ignore_index is not out of range.
  CHECK_NOTHROW(cross_entropy(zeros({2, 3}), from_vector(std::vector<int64_t>{0, -100}, {2})));
}

TEST_CASE("bad arguments are rejected before any work", "[errors]") {
  REQUIRE_THROWS_WITH(dropout(zeros({2}), 1.5, true), Contains("dropout") && Contains("[0, 1]"));
  REQUIRE_THROWS_WITH(clamp(zeros({2}), 2.0, 1.0), Contains("clamp"));
  REQUIRE_THROWS_WITH(arange(0, 1, 0), Contains("arange"));
  REQUIRE_THROWS_WITH(empty({-1}), Contains("negative dimension"));
  REQUIRE_THROWS_WITH(split(zeros({5}), std::vector<int64_t>{2, 2}, 0), Contains("add up to 4"));
  REQUIRE_THROWS_WITH(max(zeros({0})), Contains("empty"));
}

namespace {
// A stand-in second device so device mismatches can be provoked without a GPU.
class HostBackedAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override { return bytes ? std::malloc(bytes) : nullptr; }
  void deallocate(void* p, size_t) override { std::free(p); }
  Device device() const override { return kSIM; }
  AllocatorStats stats() const override { return {}; }
  void reset_peak() override {}
};
}  // namespace

TEST_CASE("device mismatches name both devices", "[errors]") {
  static HostBackedAllocator allocator;
  bool registered_here = false;
  try {
    allocator_for(kSIM);
  } catch (const Error&) {
    register_allocator(DeviceType::SIM, &allocator);
    registered_here = true;
  }
  {
    const Tensor on_sim = empty({2}, kF32, kSIM);
    REQUIRE_THROWS_WITH(add(zeros({2}), on_sim), Contains("same device") && Contains("cpu") && Contains("sim"));
    REQUIRE_THROWS_WITH(matmul(zeros({2, 2}), empty({2, 2}, kF32, kSIM)), Contains("same device"));
  }
  if (registered_here) register_allocator(DeviceType::SIM, nullptr);
}
