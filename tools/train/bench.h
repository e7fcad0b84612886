// `mixtape bench`: what mixed precision buys on this machine, measured.
//
// On one model and its data it trains, from the same seed:
//   1. FP32 at batch B;
//   2. AMP FP16 (autocast + GradScaler) and AMP BF16 (autocast) at batch B;
//   3. AMP (fp16 on a GPU or sim, bf16 on the CPU) at the largest batch that
//      fits the memory budget: by default the FP32 run's peak, i.e. "what
//      batch does AMP afford in FP32's memory". The batch is found by real
//      trial steps, doubling from B and then bisecting; a trial that runs out
//      of memory (the budget caps the allocator during the search) or peaks
//      above the budget does not fit.
// Each row: peak memory of the training steps (the dataset held in memory
// is left out: it is the same for every row), iterations/s and samples/s as
// the median of repeated timed windows after warm-up steps, with the slowest
// and fastest window beside it.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tools/train/config.h"

namespace mt::tools {

struct BenchOptions {
  std::string model = "auto";    // auto (models::default_model for the device) or a registry name
  DeviceChoice device;           // auto
  int64_t steps = 50;            // timed steps per row
  int64_t warmup = 5;            // steps before timing starts
  int64_t windows = 5;           // the timed steps are cut into this many windows
  int64_t batch = 0;             // 0: the model's default
  int64_t mem_budget = 0;        // bytes for row 3; 0: the FP32 row's peak
  std::string data;              // dataset directory (as train --data)
  std::string dataset = "auto";  // as train --dataset
  int64_t train_limit = 0;
  bool progress = true;
  int64_t accum = 4;  // --ladder: micro-batches per step on the accumulation rungs
  bool fp8 = false;   // --fp8: one more row, amp-fp8 (BF16 autocast + FP8 Linears) at batch B
  Fp8Options fp8_options;
};

struct BenchRow {
  std::string config;      // "fp32", "amp-fp16", "amp-bf16", "amp-fp16-max-batch", ...
  Precision precision = Precision::Fp32;
  int64_t batch = 0;       // per micro-batch
  int64_t grad_accum = 1;  // micro-batches per optimizer step
  bool checkpoint_activations = false;
  bool offload_optimizer = false;  // master weights and optimizer state in host memory
  std::string optimizer_state = "f32";  // how the moments are stored: f32 | bf16 | int8
  int64_t peak_bytes = 0;
  double iters_per_s = 0;  // median window
  double iters_per_s_min = 0, iters_per_s_max = 0;
  double samples_per_s = 0;  // iters_per_s x batch x grad_accum
};

struct BenchResult {
  std::string model;  // the model measured ("auto" resolved)
  std::vector<BenchRow> rows;
  int64_t budget_bytes = 0;     // what row 3 had to fit in
  std::vector<int64_t> tried;   // the batch search's trials, in order
  std::vector<bool> tried_fit;  // whether each fit
  std::string verdict;
};

BenchResult run_bench(const BenchOptions& options, std::FILE* out = stdout);

// `mixtape bench --ladder`: the low-memory ladder at a fixed effective batch
// B, each rung on top of the one before: AMP; + gradient accumulation
// (`accum` micro-batches of B / accum); + activation checkpointing (per
// transformer block; the image models have no checkpointed variant yet, so
// their ladder stops before it). Each rung's peak memory and samples/s, and
// what it saved and cost against the rung before. Offloading the optimizer
// state to host memory, the last rung of the issue, is not built yet.
BenchResult run_ladder(const BenchOptions& options, std::FILE* out = stdout);

// Parses "8GiB", "512MiB", "300MB", "1.5G", "123456" (bytes); mt::Error otherwise.
int64_t parse_bytes(const std::string& text);

// The rows, the machine (CPU model and cores, or the GPU), the commit.
nlohmann::json bench_json(const BenchResult& result, const BenchOptions& options);

}  // namespace mt::tools
