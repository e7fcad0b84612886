// The CPU's fused attention (kernels/attention/cpu.cpp) against the reference
// path (matmul -> mask -> softmax -> matmul, MT_ATTENTION=math), side by side
// in one run: forward + backward tokens/s and the peak bytes of tensor
// memory one forward + backward holds, per sequence length.
//
//   cpu_attention_bench [--batch 1 --heads 12 --dim 64 --seqs 256,1024,4096]
//                       [--dtype bf16|f32] [--no-causal] [--min-ms 1000]
//
// Tokens are queries: batch x seq per forward + backward. The inputs are
// random, the upstream gradient ones; the first call of each side is a
// warm-up. Both sides run on mt::num_threads() threads (MT_NUM_THREADS).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "bench/cpu_timing.h"
#include "core/threads.h"
#include "mixtape.h"

namespace {

struct Options {
  int64_t batch = 1, heads = 12, dim = 64;
  std::vector<int64_t> seqs = {256, 1024, 4096};
  std::string dtype = "bf16";
  bool causal = true;
  double min_ms = 1000;
};

struct Measured {
  double ms = 0;
  int64_t peak_bytes = 0;
};

// One forward + backward of attention over fresh leaves, timed, and the
// peak tensor bytes of one more call beyond what its inputs hold.
Measured measure(const Options& o, int64_t seq, mt::DType dtype, bool fused) {
  if (fused) {
    ::unsetenv("MT_ATTENTION");
  } else {
    ::setenv("MT_ATTENTION", "math", 1);
  }
  const mt::Shape shape{o.batch, o.heads, seq, o.dim};
  const mt::Tensor q = mt::randn(shape, dtype).requires_grad_();
  const mt::Tensor k = mt::randn(shape, dtype).requires_grad_();
  const mt::Tensor v = mt::randn(shape, dtype).requires_grad_();
  mt::AttentionOptions options;
  options.is_causal = o.causal;
  const auto step = [&] {
    const mt::Tensor out = mt::scaled_dot_product_attention(q, k, v, options);
    mt::sum(out).backward();
    for (const mt::Tensor* t : {&q, &k, &v}) t->set_grad(mt::Tensor());
  };
  Measured m;
  m.ms = mt::bench::time_ms(step, o.min_ms);
  const int64_t inputs = mt::memory_stats(mt::kCPU).current_bytes;
  mt::allocator_for(mt::kCPU).reset_peak();
  step();
  m.peak_bytes = mt::memory_stats(mt::kCPU).peak_bytes - inputs;
  ::unsetenv("MT_ATTENTION");
  return m;
}

std::vector<int64_t> parse_list(const std::string& text) {
  std::vector<int64_t> values;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) values.push_back(std::stoll(item));
  return values;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string seqs = "256,1024,4096";
  CLI::App app{"The CPU's fused attention against the reference path"};
  app.add_option("--batch", o.batch)->check(CLI::PositiveNumber);
  app.add_option("--heads", o.heads)->check(CLI::PositiveNumber);
  app.add_option("--dim", o.dim)->check(CLI::Range(1, 128));
  app.add_option("--seqs", seqs, "comma-separated sequence lengths");
  app.add_option("--dtype", o.dtype)->check(CLI::IsMember({"bf16", "f32"}));
  app.add_flag("!--no-causal", o.causal, "attend to every key (default: causal)");
  app.add_option("--min-ms", o.min_ms)->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    o.seqs = parse_list(seqs);
  } catch (const std::exception&) {
    std::fprintf(stderr, "error: --seqs '%s': expected comma-separated whole numbers\n", seqs.c_str());
    return 2;
  }
  const mt::DType dtype = o.dtype == "bf16" ? mt::kBF16 : mt::kF32;
  std::printf("B=%lld H=%lld D=%lld %s%s, %d threads\n\n", static_cast<long long>(o.batch),
              static_cast<long long>(o.heads), static_cast<long long>(o.dim), o.dtype.c_str(),
              o.causal ? " causal" : "", mt::num_threads());
  std::printf("| T | reference tokens/s | fused tokens/s | speed-up | reference peak MiB | fused peak MiB |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (const int64_t seq : o.seqs) {
    const Measured reference = measure(o, seq, dtype, false);
    const Measured fused = measure(o, seq, dtype, true);
    const double tokens = static_cast<double>(o.batch * seq);
    std::printf("| %lld | %.0f | %.0f | %.2fx | %.1f | %.1f |\n", static_cast<long long>(seq),
                tokens / reference.ms * 1e3, tokens / fused.ms * 1e3, reference.ms / fused.ms,
                static_cast<double>(reference.peak_bytes) / (1 << 20),
                static_cast<double>(fused.peak_bytes) / (1 << 20));
    std::fflush(stdout);
  }
  return 0;
}
