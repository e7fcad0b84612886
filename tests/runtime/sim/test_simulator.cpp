// Tests of the SIMT simulator: each feature a kernel can use, the errors it
// reports for broken kernels, and the Tensor Core wrappers' fragment layouts.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "runtime/sim/half.h"
#include "runtime/sim/runtime.h"
#include "tests/runtime/sim/sim_test_kernels.h"

namespace test = mt::sim::test;
namespace simulator = mt::simulator;
using mt::simulator::bfloat16_bits_to_float;
using mt::simulator::float_to_bfloat16_bits;
using mt::simulator::float_to_half_bits;
using mt::simulator::half_bits_to_float;

namespace {

// Restores the worker count a test changed.
struct WorkerThreads {
  explicit WorkerThreads(int count) { mt::simulator::set_worker_threads(count); }
  ~WorkerThreads() { mt::simulator::set_worker_threads(-1); }
};

struct Racecheck {
  explicit Racecheck(bool on) {
    mt::simulator::set_racecheck_enabled(on);
    (void)mt::simulator::take_race_reports();
  }
  ~Racecheck() { mt::simulator::set_racecheck_enabled(false); }
};

std::string error_of(void (*broken)()) {
  try {
    broken();
  } catch (const mt::Error& error) {
    return error.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("threadIdx, blockIdx, blockDim and gridDim cover a 3-D launch", "[sim]") {
  const test::Dim grid{2, 3, 2};
  const test::Dim block{4, 2, 3};
  const unsigned threads = 4 * 2 * 3;
  const unsigned blocks = 2 * 3 * 2;
  std::vector<unsigned> out(12 * threads * blocks, 999);
  test::thread_indices(grid, block, out.data());
  for (unsigned b = 0; b < blocks; ++b) {
    for (unsigned t = 0; t < threads; ++t) {
      const unsigned* v = &out[12 * (b * threads + t)];
      CHECK(v[0] == t % 4);
      CHECK(v[1] == (t / 4) % 2);
      CHECK(v[2] == t / 8);
      CHECK(v[3] == b % 2);
      CHECK(v[4] == (b / 2) % 3);
      CHECK(v[5] == b / 6);
      CHECK((v[6] == 4 && v[7] == 2 && v[8] == 3 && v[9] == 2 && v[10] == 3 && v[11] == 2));
    }
  }
}

TEST_CASE("__syncthreads orders shared-memory writes before reads", "[sim]") {
  for (int threads : {32, 100, 1024}) {
    std::vector<int> out(threads, 0);
    test::barrier_neighbour(threads, out.data());
    for (int t = 0; t < threads; ++t) REQUIRE(out[t] == t + 1);
  }
}

TEST_CASE("warp shuffles with full and partial masks", "[sim][warp]") {
  std::vector<int> out(32);
  auto run = [&](test::Shuffle kind, unsigned mask, int arg, int width) {
    test::shuffle(kind, mask, arg, width, out.data());
    return out;
  };
  SECTION("index, full warp and width 8") {
    auto r = run(test::Shuffle::Index, 0xffffffffu, 5, 32);
    for (int lane = 0; lane < 32; ++lane) CHECK(r[lane] == 105);
    r = run(test::Shuffle::Index, 0xffffffffu, 3, 8);
    for (int lane = 0; lane < 32; ++lane) CHECK(r[lane] == 100 + (lane & ~7) + 3);
  }
  SECTION("up and down keep their own value at the segment edge") {
    auto r = run(test::Shuffle::Up, 0xffffffffu, 2, 16);
    for (int lane = 0; lane < 32; ++lane) CHECK(r[lane] == 100 + ((lane % 16) < 2 ? lane : lane - 2));
    r = run(test::Shuffle::Down, 0xffffffffu, 3, 32);
    for (int lane = 0; lane < 32; ++lane) CHECK(r[lane] == 100 + (lane + 3 < 32 ? lane + 3 : lane));
  }
  SECTION("xor butterfly") {
    auto r = run(test::Shuffle::Xor, 0xffffffffu, 1, 32);
    for (int lane = 0; lane < 32; ++lane) CHECK(r[lane] == 100 + (lane ^ 1));
    r = run(test::Shuffle::Xor, 0xffffffffu, 16, 32);
    for (int lane = 0; lane < 32; ++lane) CHECK(r[lane] == 100 + (lane ^ 16));
  }
  SECTION("partial mask: only the named lanes take part") {
    const unsigned mask = 0x0000ff0fu;  // lanes 0-3 and 8-15
    auto r = run(test::Shuffle::Xor, mask, 1, 32);
    for (int lane = 0; lane < 32; ++lane) {
      if (((mask >> lane) & 1u) == 0) {
        CHECK(r[lane] == -1);
      } else {
        CHECK(r[lane] == 100 + (lane ^ 1));
      }
    }
    r = run(test::Shuffle::Index, mask, 9, 32);
    for (int lane = 0; lane < 32; ++lane) CHECK(r[lane] == (((mask >> lane) & 1u) ? 109 : -1));
  }
}

TEST_CASE("ballot, any and all honour the mask", "[sim][warp]") {
  std::vector<unsigned> out(96, 0xdeadbeefu);
  test::votes(0xffffffffu, 3, out.data());
  unsigned expected = 0;
  for (int lane = 0; lane < 32; lane += 3) expected |= 1u << lane;
  for (int lane = 0; lane < 32; ++lane) {
    CHECK(out[lane * 3] == expected);
    CHECK(out[lane * 3 + 1] == 1u);
    CHECK(out[lane * 3 + 2] == 0u);
  }
  // Only lanes 0, 3, 6, 9 vote: every one of them has the predicate set.
  const unsigned mask = (1u << 0) | (1u << 3) | (1u << 6) | (1u << 9);
  std::fill(out.begin(), out.end(), 0xdeadbeefu);
  test::votes(mask, 3, out.data());
  for (int lane = 0; lane < 32; ++lane) {
    if ((mask >> lane) & 1u) {
      CHECK(out[lane * 3] == mask);
      CHECK(out[lane * 3 + 1] == 1u);
      CHECK(out[lane * 3 + 2] == 1u);
    } else {
      CHECK(out[lane * 3] == 0xdeadbeefu);
    }
  }
}

TEST_CASE("__activemask reports the lanes in the same branch", "[sim][warp]") {
  std::vector<unsigned> out(32);
  test::active_mask_in_branch(12, out.data());
  for (int lane = 0; lane < 32; ++lane) CHECK(out[lane] == (lane < 12 ? 0x00000fffu : 0xfffff000u));
}

TEST_CASE("atomics are exact, on one worker and on several", "[sim][atomics]") {
  for (int workers : {1, 2}) {
    WorkerThreads guard(workers);
    test::AtomicResults results{0, 0.0f, 0, 0, 0, 0, 0};
    test::atomics(8, 96, &results);
    const int total = 8 * 96;
    CHECK(results.int_sum == total);
    CHECK(results.float_sum == 0.5f * total);
    CHECK(results.max_value == static_cast<unsigned>(total - 1));
    CHECK(results.min_value == -(total - 1));
    CHECK(results.cas_counter == 2ull * total);
    CHECK(results.exch_last == 7);
    CHECK(results.or_bits == 0xffffffffu);
  }
}

TEST_CASE("static and dynamic shared memory are private to each block", "[sim][shared]") {
  for (int workers : {1, 2}) {
    WorkerThreads guard(workers);
    std::vector<int> ok(16, 0);
    test::shared_memory(16, 64, 4096, ok.data());
    for (int block = 0; block < 16; ++block) CHECK(ok[block] == 1);
  }
}

TEST_CASE("a barrier some threads never reach is a deadlock, reported", "[sim][deadlock]") {
  const std::string message = error_of(test::early_return_before_barrier);
  CHECK_THAT(message, Catch::Contains("early_return_kernel"));
  CHECK_THAT(message, Catch::Contains("block (0,0,0)"));
  CHECK_THAT(message, Catch::Contains("threads 0..39 wait at __syncthreads() at sim_test_kernels.cu:"));
  CHECK_THAT(message, Catch::Contains("threads 40..63 finished"));
}

TEST_CASE("threads waiting at different barriers are a deadlock", "[sim][deadlock]") {
  const std::string message = error_of(test::divergent_barriers);
  CHECK_THAT(message, Catch::Contains("divergent_barriers_kernel"));
  CHECK_THAT(message, Catch::Contains("threads 0..15 wait at __syncthreads()"));
  CHECK_THAT(message, Catch::Contains("threads 16..31 wait at __syncthreads()"));
}

TEST_CASE("a shuffle whose mask names an exited lane is a deadlock", "[sim][deadlock]") {
  const std::string message = error_of(test::shuffle_with_exited_lane);
  CHECK_THAT(message, Catch::Contains("exited_lane_kernel"));
  CHECK_THAT(message, Catch::Contains("threads 0..30 wait at __shfl_sync (mask 0xffffffff)"));
  CHECK_THAT(message, Catch::Contains("thread 31 finished"));
}

TEST_CASE("a warp op whose mask leaves out the caller is an error", "[sim][deadlock]") {
  CHECK_THAT(error_of(test::mask_without_own_lane), Catch::Contains("does not include its own lane"));
}

TEST_CASE("launches break CUDA's limits the same way on the simulator", "[sim]") {
  CHECK_THAT(error_of(test::bad_launch_too_many_threads), Catch::Contains("1..1024 threads"));
  CHECK_THAT(error_of(test::bad_launch_too_much_shared), Catch::Contains("dynamic shared memory"));
}

TEST_CASE("racecheck reports a missing __syncthreads and nothing for correct code", "[sim][racecheck]") {
  Racecheck on(true);
  std::vector<float> out(64);
  test::fixed_neighbour(out.data());
  CHECK(mt::simulator::take_race_reports().empty());
  test::warp_exchange_with_syncwarp(out.data());
  CHECK(mt::simulator::take_race_reports().empty());

  test::racy_neighbour(out.data());
  const auto reports = mt::simulator::take_race_reports();
  REQUIRE(!reports.empty());
  CHECK(reports[0].kernel == "racy_neighbour_kernel");
  // Thread 0 runs first and reads tile[1]; thread 1 then writes it.
  CHECK(reports[0].kind == "write-after-read");
  CHECK(reports[0].first_thread.x == 0);
  CHECK(reports[0].second_thread.x == 1);
  CHECK(reports[0].where == "static __shared__ memory");

  test::racy_dynamic(out.data());
  const auto dynamic_reports = mt::simulator::take_race_reports();
  REQUIRE(dynamic_reports.size() == 1);
  CHECK(dynamic_reports[0].first_thread.x == 0);
  CHECK(dynamic_reports[0].second_thread.x == 1);
  CHECK(dynamic_reports[0].where == "dynamic shared memory, byte offset 20");
}

TEST_CASE("racecheck is silent when off", "[sim][racecheck]") {
  Racecheck off(false);
  std::vector<float> out(64);
  test::racy_neighbour(out.data());
  CHECK(mt::simulator::take_race_reports().empty());
}

// ---- fp16 / bf16 ---------------------------------------------------------------------------

TEST_CASE("half and bfloat16 round to nearest even, bit-exact", "[sim][half]") {
  CHECK(float_to_half_bits(1.0f) == 0x3c00);
  CHECK(float_to_half_bits(65504.0f) == 0x7bff);
  CHECK(float_to_half_bits(65519.0f) == 0x7bff);
  CHECK(float_to_half_bits(65520.0f) == 0x7c00);  // halfway to 65536: rounds to inf
  CHECK(float_to_half_bits(-1e9f) == 0xfc00);
  CHECK(float_to_half_bits(5.9604645e-8f) == 0x0001);       // 2^-24: smallest subnormal
  CHECK(float_to_half_bits(2.9802322e-8f) == 0x0000);       // 2^-25: tie, rounds to even 0
  CHECK(float_to_half_bits(2.9802326e-8f) == 0x0001);       // just above the tie
  CHECK(float_to_half_bits(1.0f + 1.0f / 2048) == 0x3c00);  // tie between 1 and 1+2^-10: even
  CHECK(float_to_half_bits(1.0f + 3.0f / 2048) == 0x3c02);  // tie: rounds up to even
  CHECK(half_bits_to_float(0x0001) == 5.9604645e-8f);
  CHECK(half_bits_to_float(0x03ff) == 6.0975552e-5f);
  CHECK(float_to_bfloat16_bits(1.0f) == 0x3f80);
  CHECK(float_to_bfloat16_bits(1.00390625f) == 0x3f80);  // 1 + 2^-8: tie, even
  CHECK(float_to_bfloat16_bits(1.01171875f) == 0x3f82);  // 1 + 3*2^-8: tie, up to even
  CHECK(bfloat16_bits_to_float(0x3f81) == 1.0078125f);
  // Every finite half survives a round trip through float.
  for (std::uint32_t bits = 0; bits < 0x10000; ++bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    if ((h & 0x7c00) == 0x7c00) continue;
    REQUIRE(float_to_half_bits(half_bits_to_float(h)) == h);
  }
}

// ---- Tensor Core wrappers ----------------------------------------------------------------------

namespace {

using Encode = std::uint16_t (*)(float);
using Decode = float (*)(std::uint16_t);
using Mma = void (*)(const std::uint16_t*, const std::uint16_t*, const float*, float*);

struct MmaCase {
  std::vector<std::uint16_t> a = std::vector<std::uint16_t>(256);
  std::vector<std::uint16_t> b = std::vector<std::uint16_t>(128);
  std::vector<float> c = std::vector<float>(128);
};

// Naive D = A*B + C in double (exact for the small integers used here).
std::vector<float> naive_mma(const MmaCase& m, Decode decode) {
  std::vector<float> d(128);
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 8; ++j) {
      double sum = m.c[i * 8 + j];
      for (int k = 0; k < 16; ++k) sum += double(decode(m.a[i * 16 + k])) * double(decode(m.b[k * 8 + j]));
      d[i * 8 + j] = static_cast<float>(sum);
    }
  }
  return d;
}

void check_mma_every_position(Mma mma, Encode encode, Decode decode) {
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> small(-4, 4);
  MmaCase base;
  for (auto& v : base.a) v = encode(float(small(rng)));
  for (auto& v : base.b) v = encode(float(small(rng)));
  for (auto& v : base.c) v = float(small(rng));
  std::vector<float> d(128);
  mma(base.a.data(), base.b.data(), base.c.data(), d.data());
  REQUIRE(d == naive_mma(base, decode));
  // One position at a time: a distinctive value in A[i][k] (then B[k][j], then
  // C[i][j]) on top of the random base must move exactly the right outputs.
  for (int position = 0; position < 256 + 128 + 128; ++position) {
    MmaCase m = base;
    if (position < 256) {
      m.a[position] = encode(37.0f);
    } else if (position < 384) {
      m.b[position - 256] = encode(-29.0f);
    } else {
      m.c[position - 384] = 1000.0f;
    }
    mma(m.a.data(), m.b.data(), m.c.data(), d.data());
    INFO("position " << position);
    REQUIRE(d == naive_mma(m, decode));
  }
}

std::uint16_t half_of(float v) { return float_to_half_bits(v); }
std::uint16_t bf16_of(float v) { return float_to_bfloat16_bits(v); }

}  // namespace

TEST_CASE("mma.m16n8k16 f16 matches a naive product at every fragment position", "[sim][mma]") {
  check_mma_every_position(test::mma_f16, half_of, half_bits_to_float);
}

TEST_CASE("mma.m16n8k16 bf16 matches a naive product at every fragment position", "[sim][mma]") {
  check_mma_every_position(test::mma_bf16, bf16_of, bfloat16_bits_to_float);
}

TEST_CASE("mma rounds inputs as f16 vs bf16 differently", "[sim][mma]") {
  // 1 + 2^-9 is exact in f16 but not in bf16: the two paths must differ.
  MmaCase m;
  std::fill(m.c.begin(), m.c.end(), 0.0f);
  std::fill(m.a.begin(), m.a.end(), half_of(0.0f));
  std::fill(m.b.begin(), m.b.end(), half_of(0.0f));
  m.a[0] = half_of(1.0f + 1.0f / 512);
  m.b[0] = half_of(1.0f);
  std::vector<float> d(128);
  test::mma_f16(m.a.data(), m.b.data(), m.c.data(), d.data());
  CHECK(d[0] == 1.0f + 1.0f / 512);
}

TEST_CASE("ldmatrix x1/x2/x4, plain and .trans, follow the PTX fragment layout", "[sim][ldmatrix]") {
  // Element (m, row, col) holds a value that names it.
  std::vector<std::uint16_t> src(4 * 64);
  for (int i = 0; i < 4 * 64; ++i) src[i] = static_cast<std::uint16_t>(0x1000 + i);
  auto element = [&](int m, int row, int col) { return src[m * 64 + row * 8 + col]; };
  for (int matrices : {1, 2, 4}) {
    for (bool trans : {false, true}) {
      std::vector<std::uint32_t> out(32 * 4, 0);
      test::ldmatrix(matrices, trans, src.data(), out.data());
      for (int lane = 0; lane < 32; ++lane) {
        for (int m = 0; m < matrices; ++m) {
          // A group of four lanes holds one row; each lane two adjacent elements.
          const int r = lane / 4;
          const int c = 2 * (lane % 4);
          const std::uint32_t expected = trans ? (element(m, c, r) | (std::uint32_t{element(m, c + 1, r)} << 16))
                                               : (element(m, r, c) | (std::uint32_t{element(m, r, c + 1)} << 16));
          INFO("matrices " << matrices << " trans " << trans << " lane " << lane << " reg " << m);
          REQUIRE(out[lane * 4 + m] == expected);
        }
      }
    }
  }
}

TEST_CASE("cp.async copies only when its group is waited for, zero-filling past src-size", "[sim][cp.async]") {
  const float src[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  float out[12] = {};
  test::cp_async_staging(src, out);
  for (int i = 0; i < 4; ++i) CHECK(out[i] == -1.0f);
  for (int i = 0; i < 4; ++i) CHECK(out[4 + i] == src[i]);
  CHECK(out[8] == 5.0f);
  CHECK(out[9] == 0.0f);
  CHECK(out[10] == 0.0f);
  CHECK(out[11] == 0.0f);
}

// Catches: a bulk copy landing as soon as it is issued (a kernel reading
// before its mbarrier wait would then pass on the simulator and fail on a
// GPU), a wait that returns before the bytes land, a barrier whose phase
// completes with bytes still missing or an arrival still missing (each must
// be a reported deadlock naming the mbarrier, not a hang or a silent pass).
TEST_CASE("cp.async.bulk lands only when waited for, and an mbarrier phase needs every arrival and byte",
          "[sim][mbarrier]") {
  alignas(16) float src[64];
  for (int i = 0; i < 64; ++i) src[i] = static_cast<float>(i) + 0.5f;
  float early[64], late[64];
  test::bulk_copy_read_before_wait(src, early, late);
  for (int i = 0; i < 64; ++i) {
    INFO("thread " << i);
    CHECK(std::isnan(early[i]));  // shared memory's fill: the copy had not landed
    CHECK(late[i] == src[i]);
  }
  float out[64];
  REQUIRE_THROWS_WITH(test::bulk_copy_missing_bytes(src, out),
                      Catch::Contains("deadlock") && Catch::Contains("mbarrier") && Catch::Contains("128 tx bytes"));
  REQUIRE_THROWS_WITH(test::mbarrier_missing_arrival(),
                      Catch::Contains("deadlock") && Catch::Contains("1 arrivals") && Catch::Contains("mbarrier"));
}

// Catches: a TMA box written without the 128-byte swizzle (or with the XOR
// taken from the wrong row bits), out-of-bounds elements not zero-filled
// (negative and past-the-end coordinates), a map the driver would refuse.
TEST_CASE("TMA tensor copies swizzle 128-byte rows and zero-fill outside the tensor", "[sim]") {
  constexpr int kRows = 20, kCols = 64;
  std::vector<std::uint16_t> src(kRows * kCols);
  for (int i = 0; i < kRows * kCols; ++i) src[static_cast<size_t>(i)] = static_cast<std::uint16_t>(i + 1);
  simulator::TensorMapEncoding e;
  e.global_address = src.data();
  e.rank = 2;
  e.element_bytes = 2;
  e.dims[0] = kCols, e.dims[1] = kRows;
  e.strides[0] = 2, e.strides[1] = kCols * 2;
  e.box[0] = 64, e.box[1] = 8;
  e.swizzle_bytes = 128;
  mt::kernels::TensorMap map{};
  simulator::encode_tensor_map(&map, e);
  std::vector<std::uint16_t> raw(8 * 64);
  test::tensor_copy_raw(map, -8, 16, raw.data(), 8 * 64);  // columns -8..55 of rows 16..23
  int bad = 0;
  for (int r = 0; r < 8; ++r) {
    for (int chunk = 0; chunk < 8; ++chunk) {
      for (int e8 = 0; e8 < 8; ++e8) {
        const int row = 16 + r, col = -8 + chunk * 8 + e8;
        const std::uint16_t want = row < kRows && col >= 0 ? src[static_cast<size_t>(row * kCols + col)] : 0;
        const std::uint16_t got = raw[static_cast<size_t>(r * 64 + (chunk ^ (r % 8)) * 8 + e8)];
        if (got != want && ++bad <= 5)
          UNSCOPED_INFO("row " << r << " chunk " << chunk << ": " << got << " != " << want);
      }
    }
  }
  CHECK(bad == 0);
  simulator::TensorMapEncoding narrow = e;
  narrow.box[0] = 32;  // 64-byte rows under a 128-byte swizzle
  CHECK_THROWS_WITH(simulator::encode_tensor_map(&map, narrow), Catch::Contains("128-byte swizzle"));
  simulator::TensorMapEncoding odd_stride = e;
  odd_stride.strides[1] = 100;
  CHECK_THROWS_WITH(simulator::encode_tensor_map(&map, odd_stride), Catch::Contains("multiple of 16"));
}

// Catches: the wgmma accumulator fragment mapped to the wrong rows/columns,
// the no-swizzle descriptor offsets (LBO/SBO) swapped, accumulators written
// at issue instead of at wait_group, a kernel that never waits going unnoticed.
TEST_CASE("wgmma m64n64k16 multiplies descriptor-addressed tiles into the documented fragment", "[sim]") {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  std::vector<std::uint16_t> a(64 * 16), b(64 * 16);
  for (auto& x : a) x = simulator::float_to_half_bits(uniform(rng));
  for (auto& x : b) x = simulator::float_to_half_bits(uniform(rng));
  std::vector<float> early(128, -1.0f), d(64 * 64, 0.0f);
  test::wgmma_interleaved(a.data(), b.data(), early.data(), d.data(), true);
  int bad = 0;
  for (int m = 0; m < 64; ++m) {
    for (int n = 0; n < 64; ++n) {
      double want = 0;
      for (int k = 0; k < 16; ++k) {
        want += double(simulator::half_bits_to_float(a[static_cast<size_t>(m * 16 + k)])) *
                simulator::half_bits_to_float(b[static_cast<size_t>(n * 16 + k)]);
      }
      const float got = d[static_cast<size_t>(m * 64 + n)];
      if (std::abs(got - want) > 1e-4 * (1 + std::abs(want)) && ++bad <= 5) {
        UNSCOPED_INFO("D[" << m << "][" << n << "] = " << got << ", expected " << want);
      }
    }
  }
  CHECK(bad == 0);
  for (float x : early) CHECK(x == 0.0f);  // nothing written before the wait
  REQUIRE_THROWS_WITH(test::wgmma_interleaved(a.data(), b.data(), early.data(), d.data(), false),
                      Catch::Contains("never waited for"));
}

// Catches: a cluster's blocks run one after another (the first would wait
// forever for the second's arrivals, or read its shared memory unwritten),
// blocks of a cluster sharing one shared-memory arena, mapa to the wrong
// block, a deadlock that spans two blocks going unreported.
TEST_CASE("thread block clusters: blocks run together and reach each other's shared memory", "[sim]") {
  std::vector<float> out(4 * 32, -1.0f);
  test::cluster_exchange(out.data(), 2, true);
  for (int block = 0; block < 4; ++block) {
    for (int t = 0; t < 32; ++t) {
      INFO("block " << block << " thread " << t);
      CHECK(out[static_cast<size_t>(block * 32 + t)] == static_cast<float>((1 - block % 2) * 100 + t));
    }
  }
  REQUIRE_THROWS_WITH(test::cluster_exchange(out.data(), 1, false), Catch::Contains("deadlock"));
}

TEST_CASE("printf works from kernel code", "[sim]") {
  test::print_hello(2);
  SUCCEED();
}
