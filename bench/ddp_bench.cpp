// Data parallel on the CPU: what DDP's overlap hides, and what its
// all-reduce costs against MPI's own. Run as `mpirun -np 2 ddp_bench`.
//
// Per step of the chosen model (random batches of its input shape) it times:
//   * backward under no_sync()  - the model's own backward, nothing sent;
//   * backward synchronised     - buckets all-reduced while backward runs,
//                                 waited for at its end;
//   * the same buckets all-reduced alone, one after another (nothing to hide
//     behind), through mixtape's group, and MPI_Allreduce of the same bytes
//     called directly (outside mixtape).
// Also: the MiB whose all-reduce had finished before backward's own work
// ended (rank 0's mean), what overlap took off the end of backward.
// The share of communication hidden = 1 - (synced - no_sync) / alone, with
// the backward times of each step taken from its slowest rank, the
// difference taken per step and averaged over the timed steps (with its
// uncertainty; the other columns are medians); rank 0 prints a Markdown table.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "mixtape.h"
#include "models/registry.h"

using namespace mt;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Tensor input_batch(const models::ModelInfo& info, int64_t batch) {
  if (info.task == models::ModelTask::ImageClassification) return randn({batch, 1, 28, 28});
  Tensor tokens = mul(rand({batch, info.context}), static_cast<double>(info.vocab - 1)).to(kI64);
  return tokens;
}

Tensor loss_of(const models::ModelInfo& info, nn::Module& model, const Tensor& x, bool bf16) {
  amp::Autocast ac(kCPU, kBF16, bf16);
  Tensor logits = model.forward(x);
  if (info.task == models::ModelTask::LanguageModel) logits = logits.reshape({-1, logits.size(-1)});
  return sum(logits);
}

struct Options {
  std::string model_name = "mlp", precision = "fp32";
  int64_t batch = 64, steps = 30, warmup = 5, bucket_mb = 25;
  bool grad_views = true;
};

void add_options(CLI::App& app, Options& o) {
  app.add_option("--model", o.model_name);
  app.add_option("--batch", o.batch, "per rank");
  app.add_option("--steps", o.steps);
  app.add_option("--warmup", o.warmup);
  app.add_option("--precision", o.precision, "fp32 | bf16");
  app.add_option("--bucket-mb", o.bucket_mb, "DDP bucket size (MiB); the first bucket is 1 MiB");
  app.add_option("--grad-views", o.grad_views, "1: gradient_as_bucket_view (as mixtape train); 0: copies");
}

// What one step measured: seconds, and the bytes overlap finished early.
struct StepTimes {
  double local = 0, synced = 0, wait = 0, early = 0, alone = 0, direct = 0;
};

// Every timed step's measurements, column by column.
struct Samples {
  std::vector<double> local_backward, synced_backward, alone, direct, waits, finished_early;

  void add(const StepTimes& t) {
    local_backward.push_back(t.local);
    synced_backward.push_back(t.synced);
    alone.push_back(t.alone);
    direct.push_back(t.direct);
    waits.push_back(t.wait);
    finished_early.push_back(t.early);
  }
};

// The buckets' bytes, as mixtape tensors and as raw floats for MPI itself.
struct Payloads {
  std::vector<Tensor> copies;
  std::vector<std::vector<float>> raw;
};

Payloads payloads_for(const std::vector<int64_t>& buckets) {
  Payloads p;
  for (int64_t bytes : buckets) {
    p.copies.push_back(zeros({bytes / 4}));
    p.raw.emplace_back(static_cast<size_t>(bytes / 4), 1.0f);
  }
  return p;
}

double time_backward(const Tensor& loss, dist::ProcessGroup& world) {
  world.barrier();  // every rank starts backward together
  const auto t = Clock::now();
  loss.backward();
  return seconds_since(t);
}

// Backward under no_sync(), then synchronised (buckets all-reduced while it runs).
void time_backwards(const models::ModelInfo& info, dist::DistributedDataParallel& ddp, nn::Module& model,
                    const Tensor& x, bool bf16, StepTimes& times) {
  auto& world = dist::world();
  {
    auto guard = ddp.no_sync();
    Tensor loss = loss_of(info, ddp, x, bf16);
    times.local = time_backward(loss, world);
  }
  model.zero_grad();
  world.barrier();
  {
    Tensor loss = loss_of(info, ddp, x, bf16);
    times.synced = time_backward(loss, world);
  }
  times.wait = ddp.last_backward_comm().wait_seconds;
  times.early = static_cast<double>(ddp.last_backward_comm().bytes_finished_during_backward);
}

// The same buckets all-reduced alone through mixtape's group, then with
// MPI_Allreduce called directly.
void time_all_reduces(Payloads& payloads, StepTimes& times) {
  auto& world = dist::world();
  auto t = Clock::now();
  std::vector<std::shared_ptr<dist::Work>> works;
  for (const Tensor& c : payloads.copies) works.push_back(world.all_reduce(c));
  for (auto& w : works) w->wait();
  times.alone = seconds_since(t);
  world.barrier();
  t = Clock::now();
  for (auto& r : payloads.raw) {
    MPI_Allreduce(MPI_IN_PLACE, r.data(), static_cast<int>(r.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  times.direct = seconds_since(t);
}

Samples run_steps(const Options& o, const models::ModelInfo& info, nn::Module& model,
                  dist::DistributedDataParallel& ddp, Payloads& payloads) {
  auto& world = dist::world();
  const bool bf16 = o.precision == "bf16";
  Samples samples;
  for (int64_t s = 0; s < o.warmup + o.steps; ++s) {
    const Tensor x = input_batch(info, o.batch);
    StepTimes times;
    time_backwards(info, ddp, model, x, bf16, times);
    model.zero_grad();
    world.barrier();
    time_all_reduces(payloads, times);
    if (s < o.warmup) continue;
    samples.add(times);
  }
  return samples;
}

// A synchronised step lasts as long as its slowest rank: per step, the
// slowest rank's backward without and with communication, so that one
// rank's lag (the ranks share the machine's cores) is not counted as
// communication that overlap failed to hide.
std::vector<double> slowest(dist::ProcessGroup& world, const std::vector<double>& mine) {
  const auto n = static_cast<int64_t>(mine.size());
  Tensor all = empty({world.size() * n}, kF64);
  world.all_gather(all, from_vector(mine, {n}, kF64))->wait();
  const std::vector<double> v = all.to_vector();
  std::vector<double> out(mine.size(), 0.0);
  for (size_t r = 0; r < static_cast<size_t>(world.size()); ++r) {
    for (size_t i = 0; i < mine.size(); ++i) out[i] = std::max(out[i], v[r * mine.size() + i]);
  }
  return out;
}

// What communication added to each step's backward, paired step by
// step (the two backwards run back to back, so drift in the machine's
// speed cancels), against what the same all-reduces take alone. The
// machine's noise is of the same order as the communication, so the
// mean comes with +- 2 standard errors, and the hidden share with the
// range those give.
struct AddedCost {
  double mean = 0, margin = 0;
};

AddedCost added_by_communication(const Samples& samples) {
  const std::vector<double>& local_backward = samples.local_backward;
  const std::vector<double>& synced_backward = samples.synced_backward;
  std::vector<double> added;
  for (size_t i = 0; i < local_backward.size(); ++i) added.push_back(synced_backward[i] - local_backward[i]);
  double mean = 0, variance = 0;
  for (double x : added) mean += x / static_cast<double>(added.size());
  for (double x : added) variance += (x - mean) * (x - mean) / static_cast<double>(added.size() - 1);
  const double margin = 2 * std::sqrt(variance / static_cast<double>(added.size()));
  return {mean, margin};
}

// Rank 0's Markdown row.
void print_row(const Options& o, int world_size, const std::vector<int64_t>& buckets, const Samples& samples) {
  int64_t total = 0;
  for (int64_t b : buckets) total += b;
  const double lb = median(samples.local_backward), sb = median(samples.synced_backward), a = median(samples.alone),
               d = median(samples.direct);
  const auto [mean, margin] = added_by_communication(samples);
  const auto hidden_if = [&](double cost) { return 100 * std::clamp(1.0 - cost / a, 0.0, 1.0); };
  double early = 0;  // rank 0's mean
  for (double b : samples.finished_early) early += b / static_cast<double>(samples.finished_early.size());
  std::printf(
      "| %s | %s | %s | %d | %lld | %zu | %.2f | %.2f | %.2f | %.2f | %.2f +- %.2f | %.0f%% (%.0f-%.0f%%) | %.2f | "
      "%.2f | %.0f | %.0f |\n",
      o.model_name.c_str(), o.precision.c_str(), o.grad_views ? "views" : "copies", world_size,
      static_cast<long long>(o.batch), buckets.size(), static_cast<double>(total) / (1 << 20), early / (1 << 20),
      1e3 * lb, 1e3 * sb, 1e3 * mean, 1e3 * margin, hidden_if(mean), hidden_if(mean + margin), hidden_if(mean - margin),
      1e3 * a, 1e3 * d, static_cast<double>(total) / a / 1e6, static_cast<double>(total) / d / 1e6);
}

void run_bench(const Options& o) {
  auto& world = dist::world();
  const models::ModelInfo info = models::model_info(o.model_name);
  manual_seed(0);
  auto model = models::make_model(o.model_name, 10);
  dist::DistributedDataParallel ddp(model,
                                    {.bucket_bytes = o.bucket_mb << 20, .gradient_as_bucket_view = o.grad_views});
  const std::vector<int64_t> buckets = ddp.bucket_sizes();
  Payloads payloads = payloads_for(buckets);
  Samples samples = run_steps(o, info, *model, ddp, payloads);
  if (std::getenv("DDP_BENCH_VERBOSE") != nullptr) {
    std::fprintf(stderr, "rank %d: backward no_sync %.2f ms, with DDP %.2f ms (of which waiting at the end %.2f ms)\n",
                 world.rank(), 1e3 * median(samples.local_backward), 1e3 * median(samples.synced_backward),
                 1e3 * median(samples.waits));
  }
  samples.local_backward = slowest(world, samples.local_backward);
  samples.synced_backward = slowest(world, samples.synced_backward);
  if (world.rank() == 0) print_row(o, world.size(), buckets, samples);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"DDP overlap and all-reduce bandwidth on the CPU (run under mpirun)"};
  Options options;
  add_options(app, options);
  CLI11_PARSE(app, argc, argv);
  dist::init_process_group();
  run_bench(options);
  dist::finalize();
  return 0;
}
