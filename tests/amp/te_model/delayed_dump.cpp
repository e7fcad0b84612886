// Drives amp::DelayedScaling (amp/fp8_scaling.h) over random amax
// sequences for the NumPy model of Transformer Engine's rule
// (te_delayed_scaling.py; tests/dump_then_check.sh runs both): one JSON line per step
// with the configuration, the amax the step's quantize() recorded, and the
// scale and amax history update() left, each f32 as its bit pattern.
//
//   fp8_delayed_dump <out.jsonl>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "mixtape.h"

using namespace mt;

namespace {

uint32_t bits(float x) {
  uint32_t u = 0;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

// 48 steps: log-uniform amaxes over 1e-3 .. 1e4, with a zero step, an
// overflow (inf) and a jump up and down, so both the history window and the
// kept-scale rule are exercised.
std::vector<float> amax_sequence(unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> exponent(-3.0f, 4.0f);
  std::vector<float> amaxes;
  for (int step = 0; step < 48; ++step) amaxes.push_back(std::pow(10.0f, exponent(rng)));
  amaxes[5] = 0.0f;
  amaxes[11] = std::numeric_limits<float>::infinity();
  amaxes[20] = 3.0e4f;
  amaxes[21] = 1.0e-3f;
  return amaxes;
}

// The CUDA code path: the GPU where there is one, else the simulator.
Device cuda_path() {
  try {
    allocator_for(kCUDA);
    return kCUDA;
  } catch (const Error&) {
    return kSIM;
  }
}

// A tensor whose largest |value| is exactly `amax`.
Tensor with_amax(float amax, Device device) {
  const double finite = std::isfinite(amax) ? amax : 1.0;
  return from_vector(std::vector<double>{finite / 3, -static_cast<double>(amax), finite / 7}, {3}, kF32, device);
}

struct Config {
  fp8::Format format;
  int64_t history;
  amp::AmaxAlgo algo;
  int margin;
  Device device;
};

void dump(const Config& c, unsigned seed, FILE* out) {
  amp::DelayedScaling scaling(c.format, {c.history, c.algo, c.margin}, c.device);
  const std::vector<float> amaxes = amax_sequence(seed);
  for (size_t step = 0; step < amaxes.size(); ++step) {
    scaling.quantize(with_amax(amaxes[step], c.device));
    scaling.update();
    std::string history;
    for (const double h : scaling.amax_history().to(kCPU).to_vector()) {
      history += (history.empty() ? "" : ",") + std::to_string(bits(static_cast<float>(h)));
    }
    std::fprintf(out,
                 "{\"format\":\"%s\",\"history_len\":%lld,\"algo\":\"%s\",\"margin\":%d,\"device\":\"%s\","
                 "\"step\":%zu,\"amax\":%u,\"scale\":%u,\"scale_inv\":%u,\"history\":[%s]}\n",
                 c.format == fp8::Format::E4M3 ? "e4m3" : "e5m2", static_cast<long long>(c.history),
                 c.algo == amp::AmaxAlgo::Max ? "max" : "most_recent", c.margin, c.device.str().c_str(), step,
                 bits(amaxes[step]), bits(scaling.scale().item<float>()), bits(scaling.scale_inv().item<float>()),
                 history.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "error: usage: fp8_delayed_dump <out.jsonl>\n");
    return 2;
  }
  FILE* out = std::fopen(argv[1], "w");
  if (out == nullptr) {
    std::fprintf(stderr, "error: cannot write %s\n", argv[1]);
    return 2;
  }
  unsigned seed = 1;
  for (const Device device : {kCPU, cuda_path()}) {
    for (const fp8::Format format : {fp8::Format::E4M3, fp8::Format::E5M2}) {
      for (const int64_t history : {int64_t{1}, int64_t{4}, int64_t{16}}) {
        for (const amp::AmaxAlgo algo : {amp::AmaxAlgo::Max, amp::AmaxAlgo::MostRecent}) {
          for (const int margin : {0, 2}) dump({format, history, algo, margin, device}, seed++, out);
        }
      }
    }
  }
  return std::fclose(out) == 0 ? 0 : 1;
}
