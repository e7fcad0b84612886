// FP8 tensors as storage: casts on the CPU and the CUDA path write exactly
// the scalar conversion's bytes (runtime/fp8.h), arithmetic and promotion
// refuse FP8, and safetensors keeps FP8 under the format's own names.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "kernels/sim_tensor_util.h"
#include "mixtape.h"
#include "runtime/launch_check.h"

using namespace mt;
using Catch::Contains;

namespace {

// Values on and around every decision a conversion makes, in f32.
std::vector<double> cast_inputs() {
  std::vector<double> v = {0.0,
                           -0.0,
                           1.0,
                           -1.5,
                           448.0,
                           464.0,
                           470.0,
                           -500.0,
                           57344.0,
                           61440.0,
                           1e9,
                           -1e30,
                           0.001953125,
                           0.0009765625,
                           0.00146484375,
                           1.52587890625e-05,
                           3e-6,
                           0.1,
                           -0.3,
                           std::numeric_limits<double>::infinity(),
                           -std::numeric_limits<double>::infinity(),
                           std::numeric_limits<double>::quiet_NaN()};
  for (int i = -40; i < 40; ++i) v.push_back(std::ldexp(1.0 + 0.0625 * (i & 15), i / 2));
  return v;
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor host = t.to(kCPU).contiguous();
  std::vector<uint8_t> out(static_cast<size_t>(host.numel()));
  if (!out.empty()) std::memcpy(out.data(), host.data_ptr(), out.size());
  return out;
}

uint8_t encode(DType format, float v) { return format == kF8E4M3 ? f32_to_e4m3_bits(v) : f32_to_e5m2_bits(v); }

}  // namespace

TEST_CASE("fp8 casts write the conversion's bytes on every device (bug: a cast rounding twice)", "[fp8][sim]") {
  const std::vector<double> values = cast_inputs();
  const auto n = static_cast<int64_t>(values.size());
  for (DType format : {kF8E4M3, kF8E5M2}) {
    for (Device device : {kCPU, test::kCudaPath}) {
      for (DType source : {kF32, kBF16}) {
        INFO(dtype_name(format) << " from " << dtype_name(source) << " on " << device.str());
        const Tensor x = from_vector(values, {n}, kF32, device).to(source);
        const std::vector<double> rounded = x.to(kF32).to_vector();
        const std::vector<uint8_t> got = bytes_of(x.to(format));
        for (int64_t i = 0; i < n; ++i) CHECK(int(got[i]) == int(encode(format, static_cast<float>(rounded[i]))));
        // Back to f32: the decoded values, exactly.
        const std::vector<double> back = x.to(format).to(kF32).to_vector();
        for (int64_t i = 0; i < n; ++i) {
          const float want = format == kF8E4M3 ? e4m3_bits_to_f32(got[i]) : e5m2_bits_to_f32(got[i]);
          if (std::isnan(want))
            CHECK(std::isnan(back[i]));
          else
            CHECK(back[i] == static_cast<double>(want));
        }
      }
    }
  }
}

TEST_CASE("fp8 strided copies move bytes unchanged (bug: an FP8 copy that converts)", "[fp8][sim]") {
  for (Device device : {kCPU, test::kCudaPath}) {
    std::vector<double> v(35);
    for (size_t i = 0; i < v.size(); ++i) v[i] = (static_cast<double>(i) - 17) * 30.5;  // -518.5 .. 518.5
    const Tensor x = from_vector(v, {5, 7}, kF32, device).to(kF8E4M3);
    const Tensor t = x.t().contiguous();
    const std::vector<uint8_t> a = bytes_of(x), b = bytes_of(t);
    for (int64_t r = 0; r < 5; ++r) {
      for (int64_t c = 0; c < 7; ++c) CHECK(a[static_cast<size_t>(r * 7 + c)] == b[static_cast<size_t>(c * 5 + r)]);
    }
    CHECK(max(x.to(kF32)).item<float>() == 448.0f);  // saturated, not NaN
  }
}

TEST_CASE("fp8 tensors refuse arithmetic and promotion (bug: unscaled FP8 math, silent garbage)", "[fp8]") {
  const Tensor a = ones({4}).to(kF8E4M3);
  REQUIRE_THROWS_WITH(add(a, a), Contains("f8e4m3") && Contains("dequantize"));
  REQUIRE_THROWS_WITH(mul(a, ones({4})), Contains("f8e4m3"));
  REQUIRE_THROWS_WITH(promote_types(kF8E5M2, kF32), Contains("f8e5m2") && Contains("not supported"));
  REQUIRE_THROWS_WITH(randn({2}, kF8E4M3), Contains("f8e4m3"));
  // A cast into FP8 is storage: it takes no part in autograd.
  Tensor w = ones({3}).requires_grad_();
  CHECK_FALSE(w.to(kF8E4M3).requires_grad());
  CHECK(a.to_vector() == std::vector<double>{1, 1, 1, 1});  // reading FP8 elements works
}

TEST_CASE("safetensors keeps fp8 as F8_E4M3 and F8_E5M2 (bug: FP8 saved under another name)", "[fp8]") {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("mt_fp8_" + std::to_string(::getpid()) + ".safetensors")).string();
  const Tensor e4 = test::random_tensor({3, 4}, kF32, kCPU, 5, -300, 300).to(kF8E4M3);
  const Tensor e5 = test::random_tensor({6}, kF32, kCPU, 6, -6e4, 6e4).to(kF8E5M2);
  save_safetensors(path, {{"e4", e4}, {"e5", e5}});
  const SafetensorsFile loaded = load_safetensors(path);
  std::filesystem::remove(path);
  CHECK(loaded.tensors.at("e4").dtype() == kF8E4M3);
  CHECK(loaded.tensors.at("e5").dtype() == kF8E5M2);
  CHECK(bytes_of(loaded.tensors.at("e4")) == bytes_of(e4));
  CHECK(bytes_of(loaded.tensors.at("e5")) == bytes_of(e5));
  CHECK(safetensors_dtype_name(kF8E4M3) == "F8_E4M3");
  CHECK(safetensors_dtype_name(kF8E5M2) == "F8_E5M2");
}

// Catches the FP8 kernels leaving their traffic undeclared (the profile then
// shows no GB/s for them, and nothing tells a learner whether they run at
// the bandwidth they should) or declaring another operand's bytes.
TEST_CASE("fp8 kernels declare their bytes to the profile (bug: a quantize with no GB/s)", "[fp8][sim]") {
  const Tensor x = test::random_tensor({64, 256}, kF32, test::kCudaPath, 3);
  kernels::profile_reset();
  kernels::set_profiling(true);
  const fp8::Fp8Tensor q = fp8::quantize(x, fp8::Format::E4M3, fp8::ScaleLayout::Tiles1x128);
  fp8::dequantize(q);
  kernels::set_profiling(false);
  std::map<std::string, double> bytes_per_call;
  for (const kernels::ProfileEntry& e : kernels::profile_entries()) {
    bytes_per_call[e.name] = e.bytes / static_cast<double>(e.calls);
  }
  kernels::profile_reset();
  const double elements = 64.0 * 256.0;
  CHECK(bytes_per_call["fp8_quantize_grouped_kernel"] == elements * (4 + 1));  // read f32, write one byte
  CHECK(bytes_per_call["fp8_dequantize_kernel"] == elements * (1 + 4));        // read one byte, write f32
}

TEST_CASE("a large per-tensor quantize uses the whole grid and writes the CPU's bytes (bug: one block per tensor)",
          "[fp8][sim]") {
  // One group covering 300 x 300 elements: the grid-wide passes, with
  // outliers that saturate and a NaN-free amax; then a small tensor that
  // stays on the one-block kernel. Both must equal the CPU exactly.
  for (const Shape& shape : {Shape{300, 300}, Shape{17, 33}}) {
    Tensor x = test::random_tensor(shape, kF32, kCPU, 5);
    x = mul(x, 3.0);
    for (const fp8::Format format : {fp8::Format::E4M3, fp8::Format::E5M2}) {
      const fp8::Fp8Tensor want = fp8::quantize(x, format, fp8::ScaleLayout::PerTensor, 1);
      kernels::profile_reset();
      kernels::set_profiling(true);
      const fp8::Fp8Tensor got = fp8::quantize(x.to(test::kCudaPath), format, fp8::ScaleLayout::PerTensor, 1);
      kernels::set_profiling(false);
      double grid = 0;
      for (const kernels::ProfileEntry& e : kernels::profile_entries()) {
        if (e.name == "fp8_quantize_from_amax_kernel") grid = e.blocks / static_cast<double>(e.calls);
      }
      kernels::profile_reset();
      INFO(shape[0] << " x " << shape[1]);
      CHECK(bytes_of(got.data) == bytes_of(want.data));
      CHECK(got.scale_inv.to(kCPU).item<float>() == want.scale_inv.item<float>());
      CHECK((shape[0] * shape[1] >= 65536 ? grid > 1 : grid == 0));
    }
  }
}

TEST_CASE("a quantize that also writes the transpose writes the transposed bytes (bug: a tile edge or a swapped index)",
          "[fp8][sim]") {
  // Catches the fused cast + transpose writing a tile's transpose to the
  // wrong place at ragged edges, or scaling differently from the plain cast.
  for (const Device device : {kCPU, test::kCudaPath}) {
    for (const Shape& shape : {Shape{37, 70}, Shape{130, 300}, Shape{1, 33}}) {
      const Tensor x = mul(test::random_tensor(shape, kF32, kCPU, 9), 5.0).to(device);
      INFO(device.str() << " " << shape[0] << " x " << shape[1]);
      // Current scaling.
      const fp8::Fp8Tensor plain = fp8::quantize(x, fp8::Format::E4M3);
      const fp8::Fp8Tensor fused = fp8::quantize(x, fp8::Format::E4M3, fp8::ScaleLayout::PerTensor, 0, true);
      CHECK(bytes_of(fused.data) == bytes_of(plain.data));
      CHECK(bytes_of(fused.t().data) == bytes_of(plain.data.t()));
      CHECK(fused.scale_inv.to(kCPU).item<float>() == plain.scale_inv.to(kCPU).item<float>());
      // Delayed scaling: a given scale, and the pass's amax folded in.
      const Tensor scale = full({}, 7.0, kF32, device), amax = zeros({}, kF32, device);
      const fp8::Fp8Tensor delayed = fp8::quantize_with_scale(x, fp8::Format::E5M2, scale, amax, true);
      const fp8::Fp8Tensor delayed_plain = fp8::quantize_with_scale(x, fp8::Format::E5M2, scale);
      CHECK(bytes_of(delayed.data) == bytes_of(delayed_plain.data));
      CHECK(bytes_of(delayed.t().data) == bytes_of(delayed_plain.data.t()));
      CHECK(amax.to(kCPU).item<float>() == fp8::amax(x).to(kCPU).item<float>());
    }
  }
}
