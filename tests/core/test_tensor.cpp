// Tensor basics: factories, strided views, casts, printing, allocator statistics.
#include <catch2/catch.hpp>

#include "mixtape.h"

using namespace mt;
using Catch::Contains;

TEST_CASE("factories fill shape, dtype and values", "[tensor]") {
  const Tensor z = zeros({2, 3}, kF16);
  CHECK(z.sizes() == Shape{2, 3});
  CHECK(z.strides() == Shape{3, 1});
  CHECK(z.dtype() == kF16);
  CHECK(z.numel() == 6);
  CHECK(z.nbytes() == 12);
  CHECK(ones({4}, kI32).to_vector() == std::vector<double>{1, 1, 1, 1});
  CHECK(full({2}, 2.5, kBF16).to_vector() == std::vector<double>{2.5, 2.5});
  CHECK(arange(0, 5).to_vector() == std::vector<double>{0, 1, 2, 3, 4});
  CHECK(arange(1, 2, 0.25, kF64).to_vector() == std::vector<double>{1, 1.25, 1.5, 1.75});
  CHECK(scalar_tensor(3.0).dim() == 0);
  CHECK(scalar_tensor(3.0).item<float>() == 3.0f);
  CHECK(from_vector(std::vector<int64_t>{5, -1}, {2}).dtype() == kI64);
  CHECK(from_vector(std::vector<double>{1, 0, 2}, {3}, kBool).to_vector() == std::vector<double>{1, 0, 1});
}

TEST_CASE("from_vector rounds once into low precision", "[tensor]") {
  const Tensor h = from_vector(std::vector<double>{65520.0, 1e-8, 0.1}, {3}, kF16);
  const auto v = h.to_vector();
  CHECK(std::isinf(v[0]));
  CHECK(v[1] == 0.0);  // below half the smallest f16 subnormal
  CHECK(v[2] == Approx(0.0999755859375));
  const Tensor b = from_vector(std::vector<double>{65520.0, 1e-8}, {2}, kBF16);
  CHECK(b.to_vector()[0] == 65536.0);
  CHECK(b.to_vector()[1] > 0.0);
}

TEST_CASE("views share storage and compose", "[tensor]") {
  const Tensor x = arange(0, 24).reshape({2, 3, 4});
  CHECK(x.is_contiguous());
  const Tensor p = x.permute({2, 0, 1});
  CHECK(p.sizes() == Shape{4, 2, 3});
  CHECK(!p.is_contiguous());
  CHECK(p.storage() == x.storage());
  CHECK(read_element(p, p.offset() + 1 * p.stride(0) + 1 * p.stride(1) + 2 * p.stride(2)) == 1 * 12 + 2 * 4 + 1);
  const Tensor t = x.transpose(0, 2).contiguous();
  CHECK(t.is_contiguous());
  CHECK(t.sizes() == Shape{4, 3, 2});
  CHECK(t.to_vector()[1] == 12);
  CHECK(x.narrow(2, 1, 2).to_vector() == std::vector<double>{1, 2, 5, 6, 9, 10, 13, 14, 17, 18, 21, 22});
  CHECK(x.slice(2, 0, 4, 2).select(0, 1).to_vector() == std::vector<double>{12, 14, 16, 18, 20, 22});
  CHECK(x.select(1, -1).to_vector() == std::vector<double>{8, 9, 10, 11, 20, 21, 22, 23});
  CHECK(x.reshape({-1, 4}).sizes() == Shape{6, 4});
  CHECK(x.flatten(1).sizes() == Shape{2, 12});
  CHECK(x.unsqueeze(1).sizes() == Shape{2, 1, 3, 4});
  CHECK(x.unsqueeze(-1).sizes() == Shape{2, 3, 4, 1});
  CHECK(x.unsqueeze(1).squeeze(1).sizes() == Shape{2, 3, 4});
  CHECK(ones({1, 3, 1}).squeeze().sizes() == Shape{3});
  const Tensor e = arange(0, 3).reshape({3, 1}).expand({3, 4});
  CHECK(e.strides() == Shape{1, 0});
  CHECK(e.to_vector() == std::vector<double>{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2});
  // A non-contiguous tensor reshapes through a copy; view refuses it.
  CHECK(p.reshape({24}).numel() == 24);
  REQUIRE_THROWS_WITH(p.view({24}), Contains("not contiguous"));
}

TEST_CASE("view errors name the shapes involved", "[tensor]") {
  const Tensor x = zeros({2, 3});
  REQUIRE_THROWS_WITH(x.reshape({4, 2}), Contains("[4, 2]") && Contains("6 elements"));
  REQUIRE_THROWS_WITH(x.reshape({-1, -1}), Contains("only one dimension can be -1"));
  REQUIRE_THROWS_WITH(x.permute({0, 0}), Contains("repeats"));
  REQUIRE_THROWS_WITH(x.narrow(1, 2, 2), Contains("outside dim 1 of size 3"));
  REQUIRE_THROWS_WITH(x.expand({4, 3}), Contains("cannot expand shape [2, 3]"));
  REQUIRE_THROWS_WITH(x.transpose(0, 2), Contains("dim 2 is out of range"));
  REQUIRE_THROWS_WITH(x.select(0, 5), Contains("index 5 is out of range"));
  REQUIRE_THROWS_WITH(make_view(x, {3, 3}, {3, 1}, 0), Contains("outside a storage of 6 elements"));
}

TEST_CASE("casts round to nearest even and saturate to inf like the GPU", "[tensor]") {
  const Tensor x = from_vector(std::vector<double>{1.0, 70000.0, -70000.0, 2049.0, 3.0e-8}, {5}, kF32);
  const auto h = x.to(kF16).to_vector();
  CHECK(h[0] == 1.0);
  CHECK(std::isinf(h[1]));
  CHECK(std::isinf(h[2]));
  CHECK(h[2] < 0);
  CHECK(h[3] == 2048.0);                // 2049 is a tie between 2048 and 2050: even mantissa wins
  CHECK(h[4] == std::ldexp(1.0, -24));  // rounds to the smallest subnormal
  const auto i = from_vector(std::vector<double>{1.7, -1.7, 3.0}, {3}).to(kI64).to_vector();
  CHECK(i == std::vector<double>{1, -1, 3});  // float -> int truncates, as static_cast and PyTorch do
  const auto b = from_vector(std::vector<double>{0.0, -2.0}, {2}).to(kBool).to_vector();
  CHECK(b == std::vector<double>{0, 1});
}

TEST_CASE("item and errors on multi-element tensors", "[tensor]") {
  CHECK(full({1, 1}, 4.0).item<double>() == 4.0);
  REQUIRE_THROWS_WITH(zeros({2}).item<float>(), Contains("one element") && Contains("[2]"));
  REQUIRE_THROWS_WITH(Tensor().numel(), Contains("undefined tensor"));
  REQUIRE_THROWS_WITH(zeros({2}, kI64).requires_grad_(), Contains("floating-point"));
  REQUIRE_THROWS_WITH(zeros({2}).data<double>(), Contains("dtype f32"));
}

TEST_CASE("printing is readable and summarises large tensors", "[tensor]") {
  CHECK(from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2}).str() ==
        "tensor([[1.0000, 2.0000],\n        [3.0000, 4.0000]])");
  CHECK(from_vector(std::vector<double>{0.5}, {1}, kF16).str() == "tensor([0.5000], dtype=f16)");
  CHECK(from_vector(std::vector<int64_t>{1, 2}, {2}).str() == "tensor([1, 2])");
  CHECK(scalar_tensor(1.0).requires_grad_().str() == "tensor(1.0000, requires_grad=True)");
  const std::string big = arange(0, 5000).str();
  CHECK(big.find("...") != std::string::npos);
  CHECK(big.size() < 200);
  CHECK(fmt::format("{}", from_vector(std::vector<double>{1e-6}, {1})) == "tensor([1.0000e-06])");
}

TEST_CASE("the allocator tracks current and peak bytes per device", "[allocator]") {
  const AllocatorStats before = memory_stats(kCPU);
  allocator_for(kCPU).reset_peak();
  {
    const Tensor big = empty({1024, 256}, kF32);  // 1 MiB
    const AllocatorStats during = memory_stats(kCPU);
    CHECK(during.current_bytes - before.current_bytes == 1024 * 256 * 4);
    CHECK(during.peak_bytes >= during.current_bytes);
    CHECK(during.allocations > before.allocations);
  }
  const AllocatorStats after = memory_stats(kCPU);
  CHECK(after.current_bytes == before.current_bytes);
  CHECK(after.peak_bytes >= before.current_bytes + 1024 * 256 * 4);
}

TEST_CASE("asking for an unavailable device is a clear error", "[device]") {
  bool have_gpu = true;
  try {
    allocator_for(kCUDA);
  } catch (const Error&) {
    have_gpu = false;
  }
  // Without a GPU any CUDA device is unavailable; with one, a missing index is.
  const Device missing = have_gpu ? Device(DeviceType::CUDA, 99) : kCUDA;
  REQUIRE_THROWS_WITH(empty({2}, kF32, missing), Contains("no CUDA device available"));
  CHECK(parse_device("cuda:1") == Device(DeviceType::CUDA, 1));
  CHECK(parse_device("sim").is_sim());
  REQUIRE_THROWS_WITH(parse_device("tpu"), Contains("invalid device 'tpu'"));
  // Catches an index past INT_MAX escaping as std::out_of_range (std::stoi; found by fuzz_options).
  REQUIRE_THROWS_AS(parse_device("cuda:6666666666666666666666666"), Error);
  REQUIRE_THROWS_AS(parse_device("cuda:-1"), Error);
  REQUIRE_THROWS_AS(parse_device("cuda:1x"), Error);
  REQUIRE_THROWS_AS(parse_device("cuda:"), Error);
  CHECK(promote_types(kF16, kBF16) == kF32);
  CHECK(promote_types(kI64, kF16) == kF16);
  CHECK(promote_types(kF32, kF64) == kF64);
  CHECK(promote_types(kBool, kU8) == kU8);
}

// Catches (issue 14): factories accepting shapes whose element count
// overflows int64 and returning a tensor of 0 or 1 elements for them.
TEST_CASE("factories refuse negative dims and shapes whose size overflows", "[tensor][errors]") {
  CHECK_THROWS_WITH(zeros({int64_t{1} << 32, int64_t{1} << 32}), Catch::Contains("more elements than an int64"));
  CHECK_THROWS_WITH(empty({int64_t{1} << 62}, kF32), Catch::Contains("more elements than an int64"));
  CHECK_THROWS_WITH(full({3, -1}, 1.0), Catch::Contains("negative dimension"));
  CHECK(zeros({0, int64_t{1} << 40}).numel() == 0);
}

// FSDP frees a gathered unit's memory while views and saved tensors still
// share its Storage. The bugs: reading a released storage (a crash, or
// another tensor's memory read as this one), or a restore that leaves the
// sharers pointing at the old block.
TEST_CASE("a released storage refuses reads and its sharers see the memory it gets back", "[tensor]") {
  Tensor t = from_vector(std::vector<double>{1, 2, 3, 4}, {4}, kF32);
  const Tensor view = t.narrow(0, 1, 2);
  t.storage()->release_memory();
  CHECK(t.storage()->released());
  CHECK_THROWS_WITH(view.to_vector(), Catch::Contains("read while its memory is released"));
  t.storage()->restore_memory();
  fill_(t, 7.0);
  CHECK(view.to_vector() == std::vector<double>{7, 7});
}
