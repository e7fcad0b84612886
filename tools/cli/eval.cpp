// `mixtape eval`: a checkpoint's score on the held-out split of the data it
// trained on (and, with --half, of its f16/bf16 copy; for an INT8
// checkpoint, beside the float checkpoint it was quantized from).
#include <cstdio>
#include <memory>

#include "tools/cli/options.h"
#include "tools/cli/subcommands.h"
#include "tools/train/trainer.h"

namespace mt::cli {
namespace {

struct EvalArgs {
  std::string checkpoint, device = "auto", data;
  int64_t limit = 0;
  bool half = false, allow_nonfinite = false;
};

int run_eval(const EvalArgs& a) {
  const auto r =
      tools::evaluate_checkpoint(a.checkpoint, a.data, a.device, a.limit, a.half,
                                 a.allow_nonfinite ? tools::NonFiniteWeights::Allow : tools::NonFiniteWeights::Refuse);
  if (r.language_model) {
    std::printf("%s (%s, step %lld): validation loss %.4f nats/token (perplexity %.2f) on %s\n", r.model.c_str(),
                r.precision.c_str(), static_cast<long long>(r.step), r.evaluation.loss, r.evaluation.perplexity(),
                r.dataset.c_str());
  } else {
    std::printf("%s (%s, step %lld): test accuracy %.2f%%\n", r.model.c_str(), r.precision.c_str(),
                static_cast<long long>(r.step), 100.0 * r.evaluation.accuracy);
  }
  if (r.int8) print_int8_comparison(*r.int8, r.language_model);
  if (r.half) {
    auto score = [&](const tools::Evaluation& e) {
      return r.language_model ? fmt::format("validation loss {:.4f}", e.loss)
                              : fmt::format("test accuracy {:.2f}%", 100.0 * e.accuracy);
    };
    std::printf(
        "%s weights (norms in f32): %s; f32 weights under the same autocast: %s; parameters %.2f MiB -> "
        "%.2f MiB\n",
        r.half_dtype.c_str(), score(r.half_evaluation).c_str(), score(r.autocast_evaluation).c_str(),
        static_cast<double>(r.parameter_bytes) / (1 << 20), static_cast<double>(r.half_parameter_bytes) / (1 << 20));
  }
  print_profile();
  return 0;
}

}  // namespace

Subcommand add_eval(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand("eval", "Evaluate a checkpoint on the held-out split of the data it trained on");
  cmd->add_option("--checkpoint", a->checkpoint, "checkpoint (.safetensors)")->required()->check(CLI::ExistingFile);
  add_device_option(cmd, a->device);
  cmd->add_option("--data", a->data, "the dataset's directory");
  add_integer_option(cmd, "--test-limit", a->limit, "only the first N held-out samples", 0);
  cmd->add_flag("--half", a->half,
                "also evaluate the model converted to f16 (GPU, sim) or bf16 (CPU) weights, norms kept in f32, "
                "beside the f32 weights under the same autocast");
  cmd->add_flag("--allow-nonfinite", a->allow_nonfinite,
                "load a checkpoint whose weights hold NaN or inf (a post-mortem; refused otherwise)");
  return {cmd, [a](const std::string&) { return run_eval(*a); }};
}

}  // namespace mt::cli
