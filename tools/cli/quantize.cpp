// `mixtape quantize`: a trained checkpoint to an INT8 one (post-training
// static quantization of its Linear layers, calibrated on training samples),
// with the float and INT8 models scored side by side.
#include "tools/train/quantize.h"

#include <cstdio>
#include <memory>

#include "tools/cli/options.h"
#include "tools/cli/subcommands.h"

namespace mt::cli {

void print_int8_comparison(const tools::Int8Comparison& c, bool language_model) {
  std::printf("int8: %zu layer(s) W8A8 (%s observer%s, %lld calibration samples)\n", c.layers.size(),
              c.observer.c_str(), c.smoothquant ? fmt::format(", SmoothQuant alpha {}", *c.smoothquant).c_str() : "",
              static_cast<long long>(c.calibration_samples));
  for (const auto& [layer, reason] : c.kept_float)
    std::printf("int8: kept in float: %s (%s)\n", layer.c_str(), reason.c_str());
  for (const amp::int8::FoldedBatchNorm& f : c.folded)
    std::printf("int8: folded %s into %s\n", f.batch_norm.c_str(), f.conv.c_str());
  for (const amp::int8::Int8Handoff& h : c.handoffs)
    std::printf("int8: %s hands u8 to %s%s\n", h.from.c_str(), h.to.c_str(), h.relu ? " (its ReLU applied first)" : "");
  auto score = [&](const tools::Evaluation& e) {
    return language_model ? fmt::format("loss {:.4f}", e.loss) : fmt::format("accuracy {:.2f}%", 100.0 * e.accuracy);
  };
  auto mib = [](int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); };
  if (c.source_scored) {
    std::printf("float: %s, %.0f samples/s, weights %.2f MiB\n", score(c.float_model.evaluation).c_str(),
                c.float_model.samples_per_second, mib(c.float_model.weight_bytes));
  } else {
    std::printf("float: %s (as quantize measured it: %s is gone or changed)\n", score(c.float_model.evaluation).c_str(),
                c.source.c_str());
  }
  std::printf("int8:  %s, %.0f samples/s, weights %.2f MiB\n", score(c.int8_model.evaluation).c_str(),
              c.int8_model.samples_per_second, mib(c.int8_model.weight_bytes));
  const tools::Evaluation& f = c.float_model.evaluation;
  const tools::Evaluation& q = c.int8_model.evaluation;
  if (language_model) {
    std::printf("int8 vs float: loss %+.2f%%", f.loss > 0 ? 100.0 * (q.loss - f.loss) / f.loss : 0.0);
  } else {
    std::printf("int8 vs float: %.2f%% of the float accuracy", f.accuracy > 0 ? 100.0 * q.accuracy / f.accuracy : 0.0);
  }
  if (c.source_scored && c.float_model.samples_per_second > 0 && c.float_model.weight_bytes > 0) {
    std::printf(", %.2fx samples/s, %.2fx weight bytes",
                c.int8_model.samples_per_second / c.float_model.samples_per_second,
                static_cast<double>(c.int8_model.weight_bytes) / static_cast<double>(c.float_model.weight_bytes));
  }
  std::printf("\n");
}

namespace {

int run_quantize(const tools::QuantizeRequest& req) {
  const tools::QuantizeResult r = tools::quantize_checkpoint(req);
  print_int8_comparison(r.comparison, r.language_model);
  std::printf("wrote %s\n", req.out.c_str());
  return 0;
}

}  // namespace

Subcommand add_quantize(CLI::App& app) {
  auto a = std::make_shared<tools::QuantizeRequest>();
  CLI::App* cmd = app.add_subcommand(
      "quantize", "Quantize a checkpoint's Linear layers to INT8 (W8A8, calibrated) and score it beside the float one");
  cmd->add_option("--checkpoint", a->checkpoint, "the float checkpoint (.safetensors)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--out", a->out, "the INT8 checkpoint to write (.safetensors)")->required();
  add_device_option(cmd, a->device);
  cmd->add_option("--data", a->data_dir, "the dataset's directory");
  add_integer_option(cmd, "--calibrate", a->calibrate,
                     "calibration samples from the training split (default 512 for text, 1024 for images)", 0);
  cmd->add_option("--observer", a->observer,
                  "how each input's range is chosen: mse (least squared error, the default) | minmax | "
                  "moving-average-minmax | percentile (99.99) | entropy (KL, TensorRT's)")
      ->check(CLI::IsMember({"minmax", "moving-average-minmax", "percentile", "entropy", "mse"}));
  cmd->add_flag("--per-tensor", a->per_tensor, "one scale per weight instead of one per output channel");
  cmd->add_option(
         "--smoothquant", a->smoothquant,
         "SmoothQuant first, with this alpha (0.5: the paper's; migrates activation outliers into the weights)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--keep-float", a->keep_float, "Linear layers (dotted names) left in float")->delimiter(',');
  cmd->add_flag("--no-fold-batch-norm{false}", a->fold_batch_norm,
                "keep each BatchNorm2d a layer of its own (by default each is folded into the Conv2d before it, "
                "as PyTorch's fuse_modules)");
  cmd->add_flag("--no-requantize{false}", a->requantize,
                "write f32 activations between INT8 layers (by default an INT8 layer feeding another through "
                "ReLU / max-pool hands it u8 requantized with its input scale, as PyTorch's quantized models do)");
  add_integer_option(cmd, "--test-limit", a->test_limit, "score on the first N held-out samples only", 0);
  return {cmd, [a](const std::string&) { return run_quantize(*a); }};
}

}  // namespace mt::cli
