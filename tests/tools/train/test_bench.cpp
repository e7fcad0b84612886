// `mixtape bench` on the CPU: the rows and their JSON, and a batch search
// whose answer is re-checked by training that batch and the next one up
// under the same budget.
#include <catch2/catch.hpp>
#include <cstdio>

#include "core/allocator.h"
#include "runtime/error.h"
#include "tools/train/bench.h"
#include "tools/train/trainer.h"

using namespace mt;
using Catch::Contains;

namespace {

tools::BenchOptions small_bench() {
  tools::BenchOptions o;
  o.model = "mlp";
  o.device = kCPU;
  o.steps = 20;
  o.warmup = 2;
  o.windows = 4;
  o.train_limit = 4096;
  o.progress = false;
  return o;
}

// The training peak (dataset left out) of `batch` under a capped CPU allocator, or -1 when it refused.
int64_t peak_under_cap(const std::string& precision, int64_t batch, int64_t budget) {
  tools::TrainConfig c;
  c.model = "mlp";
  c.device = kCPU;
  c.precision.mode = tools::parse_precision(precision);
  c.batch = batch;
  c.max_steps = 3;
  c.epochs = 1 << 20;
  c.data.train_limit = 4096;
  c.data.test_limit = 256;
  c.report.progress = false;
  c.data.prefetch = false;
  c.memory.budget = budget;
  std::FILE* sink = std::fopen("/dev/null", "w");
  int64_t peak = -1;
  try {
    const auto s = tools::train(c, sink);
    // The dataset held in memory: all 60000 + 10000 Fashion-MNIST images (f32)
    // and labels (i64); --train-limit trains on a view of the first 4096.
    CHECK(s.dataset_bytes == (60000 + 10000) * (784 * 4 + 8));
    peak = s.training_peak_bytes();
  } catch (const OutOfMemoryError&) {
  }
  std::fclose(sink);
  return peak;
}

}  // namespace

TEST_CASE("bench measures fp32, amp-fp16, amp-bf16 and amp at the largest batch, as JSON rows", "[bench][e2e]") {
  tools::BenchOptions o = small_bench();
  std::FILE* out = std::tmpfile();
  const tools::BenchResult r = tools::run_bench(o, out);
  std::rewind(out);
  std::string printed;
  for (int c = std::fgetc(out); c != EOF; c = std::fgetc(out)) printed += static_cast<char>(c);
  std::fclose(out);
  // The amp-fp16 row's cost on a CPU is explained where it is printed.
  CHECK_THAT(printed, Contains("amp-fp16 on the CPU: f16 products are computed in f32"));
  REQUIRE(r.rows.size() == 4);
  CHECK(r.rows[0].config == "fp32");
  CHECK(r.rows[1].precision == tools::Precision::Fp16);
  CHECK(r.rows[2].precision == tools::Precision::Bf16);
  CHECK(r.rows[3].precision == tools::Precision::Bf16);  // the CPU's AMP
  for (const tools::BenchRow& row : r.rows) {
    INFO(row.config);
    CHECK(row.peak_bytes > 0);
    CHECK(row.iters_per_s > 0);
    CHECK(row.iters_per_s_min <= row.iters_per_s);
    CHECK(row.iters_per_s <= row.iters_per_s_max);
    CHECK(row.samples_per_s == Approx(row.iters_per_s * static_cast<double>(row.batch)));
  }
  CHECK(r.budget_bytes == r.rows[0].peak_bytes);  // the default budget: FP32's memory
  CHECK(r.rows[3].peak_bytes <= r.budget_bytes);
  // No claim that AMP saves memory: mlp's activations are tiny, and autocast
  // adds bf16 copies of its f32 weights (measured: 103% of FP32's peak at
  // batch 128, so fewer than 128 samples fit in FP32's memory).
  CHECK(r.rows[3].batch >= 1);
  CHECK_THAT(r.verdict, Contains("AMP (bf16)"));

  const nlohmann::json j = tools::bench_json(r, o);
  const nlohmann::json parsed = nlohmann::json::parse(j.dump());
  REQUIRE(parsed.at("rows").size() == 4);
  for (const auto& row : parsed.at("rows")) {
    for (const char* key : {"config", "precision", "batch", "peak_bytes", "iters_per_s", "samples_per_s"}) {
      INFO(key);
      CHECK(row.contains(key));
    }
  }
  CHECK(parsed.at("machine").at("cores").get<int64_t>() >= 1);
  CHECK(!parsed.at("machine").at("cpu").get<std::string>().empty());
  CHECK(parsed.at("commit").is_string());
}

TEST_CASE("the batch search finds the largest batch that fits a small budget, re-checked by training it and the next",
          "[bench][e2e]") {
  tools::BenchOptions o = small_bench();
  o.steps = 4;
  o.windows = 2;
  o.mem_budget = 6 << 20;  // 6 MiB: mlp's f32 weights and AdamW state (3.6 MiB) and a few hundred samples
  std::FILE* out = std::tmpfile();
  const tools::BenchResult r = tools::run_bench(o, out);
  std::fclose(out);
  const int64_t best = r.rows[3].batch;
  INFO("largest batch " << best);
  REQUIRE(best >= 1);
  REQUIRE(best < 4096);
  const int64_t at_best = peak_under_cap("bf16", best, o.mem_budget);
  CHECK(at_best >= 0);
  CHECK(at_best <= o.mem_budget);
  const int64_t above = peak_under_cap("bf16", best + 1, o.mem_budget);
  CHECK((above < 0 || above > o.mem_budget));
  // The search doubled, then bisected: every trial below the answer fit, every one above did not.
  for (size_t i = 0; i < r.tried.size(); ++i) CHECK(r.tried_fit[i] == (r.tried[i] <= best));
}

TEST_CASE("bench refuses a budget too small for batch 1 and bad sizes, with a clear message", "[bench][errors]") {
  tools::BenchOptions o = small_bench();
  o.steps = 2;
  o.windows = 1;
  o.mem_budget = 1000;
  std::FILE* out = std::tmpfile();
  CHECK_THROWS_WITH(tools::run_bench(o, out), Contains("too small") && Contains("batch 1"));
  std::fclose(out);
  CHECK(tools::parse_bytes("8GiB") == int64_t{8} << 30);
  CHECK(tools::parse_bytes("300MB") == 300000000);
  CHECK(tools::parse_bytes("1.5K") == 1536);
  CHECK(tools::parse_bytes("4096") == 4096);
  CHECK_THROWS_WITH(tools::parse_bytes("12abc"), Contains("unknown unit"));
  CHECK_THROWS_WITH(tools::parse_bytes("lots"), Contains("not an amount"));
  CHECK_THROWS_WITH(tools::parse_bytes("-5MiB"), Contains("not a usable"));
  o = small_bench();
  o.steps = 3;
  o.windows = 5;
  CHECK_THROWS_WITH(tools::run_bench(o, out), Contains("windows"));
}

// Catches rungs that do not change what they claim: accumulation that still
// runs the whole batch at once, checkpointing that keeps every block's
// activations, state rungs that keep f32 moments, or samples/s that forget
// the micro-batches.
TEST_CASE("bench --ladder: each rung of gpt-tiny holds less memory at the same effective batch", "[bench][e2e]") {
  tools::BenchOptions o = small_bench();
  o.model = "gpt-tiny";
  o.dataset = "synthetic-tokens";
  o.batch = 8;
  o.accum = 4;
  o.steps = 4;
  o.windows = 2;
  o.warmup = 1;
  o.train_limit = 256;
  std::FILE* out = std::tmpfile();
  const tools::BenchResult r = tools::run_ladder(o, out);
  std::fclose(out);
  REQUIRE(r.rows.size() == 5);
  CHECK(r.rows[0].grad_accum == 1);
  CHECK(r.rows[1].batch == 2);
  CHECK(r.rows[1].grad_accum == 4);
  CHECK(r.rows[2].checkpoint_activations);
  CHECK(r.rows[3].optimizer_state == "bf16");
  CHECK(r.rows[4].optimizer_state == "int8");
  CHECK(r.rows[4].checkpoint_activations);
  for (size_t i = 1; i < r.rows.size(); ++i) {
    INFO(r.rows[i].config);
    CHECK(r.rows[i].peak_bytes < r.rows[i - 1].peak_bytes);
  }
  for (const tools::BenchRow& row : r.rows) {
    CHECK(row.samples_per_s == Approx(row.iters_per_s * 8));
  }
  o.model = "mlp";
  o.dataset = "auto";
  o.batch = 128;
  out = std::tmpfile();
  CHECK(tools::run_ladder(o, out).rows.size() == 4);  // no checkpointed mlp
  o.accum = 3;
  CHECK_THROWS_WITH(tools::run_ladder(o, out), Contains("equal micro-batches"));
  std::fclose(out);
}
