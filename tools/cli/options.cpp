#include "tools/cli/options.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <new>
#include <stdexcept>
#include <type_traits>

#include "autograd/anomaly.h"
#include "core/allocator.h"
#include "core/caching_allocator.h"
#include "core/threads.h"
#include "distributed/process_group.h"
#include "kernels/attention/attention.h"
#include "kernels/common/cpu_backend.h"
#include "kernels/conv/api.h"
#include "kernels/gemm/api.h"
#include "models/registry.h"
#include "runtime/launch_check.h"
#include "tools/data/bpe.h"
#include "tools/data/registry.h"
#include "tools/train/kernel_verification.h"

namespace mt::cli {

CLI::Option* add_model_option(CLI::App* cmd, std::string& model, const std::string& help, bool with_auto) {
  std::vector<std::string> names;
  for (const auto& m : models::model_list()) names.push_back(m.name);
  if (with_auto) names.push_back("auto");
  return cmd->add_option("--model", model, help)->check(CLI::IsMember(names));
}

std::string model_names_help() {
  std::string help;
  for (const auto& m : models::model_list()) help += (help.empty() ? "" : " | ") + m.name;
  return help;
}

std::string auto_model_help() {
  return models::default_model(kCPU) + " on a CPU, " + models::default_model(kCUDA) + " on a GPU";
}

CLI::Option* add_tokenizer_option(CLI::App* cmd, std::string& tokenizer, const std::string& help) {
  return cmd->add_option("--tokenizer", tokenizer, help)->check(CLI::IsMember(data::tokenizer_names()));
}

CLI::Option* add_dataset_option(CLI::App* cmd, std::string& dataset, const std::string& help) {
  std::vector<std::string> names = data::dataset_names();
  names.insert(names.begin(), "auto");
  return cmd->add_option("--dataset", dataset, help)->check(CLI::IsMember(names));
}

std::string dataset_names_help() {
  std::string help;
  for (const auto& d : data::dataset_list()) help += (help.empty() ? "" : " | ") + d.name + " (" + d.help + ")";
  return help;
}

CLI::Option* add_device_option(CLI::App* cmd, std::string& device) {
  return cmd->add_option("--device", device, "auto | cpu | cuda | sim");
}

namespace {

// A bound as people read it: the type's limits as powers of two, not 19-20 digits.
template <class T>
std::string readable_bound(T bound) {
  if constexpr (std::is_unsigned_v<T>) {
    if (bound == std::numeric_limits<T>::max()) return "2^64 - 1";
  } else {
    if (bound == std::numeric_limits<T>::max()) return "2^63 - 1";
    if (bound == std::numeric_limits<T>::min()) return "-2^63";
  }
  return std::to_string(bound);
}

// `text` as a whole decimal number from `min` to `max`, or CLI11's
// ValidationError naming the flag and the range.
template <class T>
T parse_whole_number(const std::string& flag, const std::string& text, T min, T max) {
  T value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || value < min || value > max) {
    throw CLI::ValidationError(
        flag, fmt::format("'{}' is not a whole number from {} to {}", text, readable_bound(min), readable_bound(max)));
  }
  return value;
}

// A real-valued option's check: finite and above (or at) zero.
CLI::Validator real_number_check(bool zero_allowed) {
  const std::string wanted = zero_allowed ? "a finite number >= 0" : "a finite number > 0";
  return CLI::Validator(
      [zero_allowed, wanted](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0') return "'" + text + "' is not a number";
        const bool fits = std::isfinite(value) && (zero_allowed ? value >= 0 : value > 0);
        return fits ? std::string() : "'" + text + "' is not " + wanted;
      },
      zero_allowed ? ">= 0" : "> 0");
}

}  // namespace

CLI::Option* add_seed_option(CLI::App* cmd, uint64_t& seed, const std::string& help) {
  return cmd
      ->add_option_function<std::string>(
          "--seed",
          [&seed](const std::string& text) {
            seed = parse_whole_number<uint64_t>("--seed", text, 0, std::numeric_limits<uint64_t>::max());
          },
          help)
      ->type_name("UINT");
}

CLI::Option* add_integer_option(CLI::App* cmd, const std::string& flag, int64_t& field, const std::string& help,
                                int64_t min, int64_t max) {
  return cmd
      ->add_option_function<std::string>(
          flag, [&field, flag, min, max](const std::string& text) { field = parse_whole_number(flag, text, min, max); },
          help)
      ->type_name(max == INT64_MAX ? fmt::format("INT >= {}", min) : fmt::format("INT in {}..{}", min, max));
}

CLI::Validator non_negative_number() { return real_number_check(/*zero_allowed=*/true); }
CLI::Validator positive_number() { return real_number_check(/*zero_allowed=*/false); }

void add_fp8_options(CLI::App* cmd, tools::Fp8Options& o) {
  add_choice_option(cmd, "--fp8-recipe", o.recipe, amp::parse_fp8_recipe, {"current", "delayed", "block"},
                    "--precision fp8: current (per-tensor scales from this step's amax; default) | delayed (from an "
                    "amax history, Transformer Engine's) | block (1x128 tiles, 128x128 weight blocks, DeepSeek-V3's)");
  add_integer_option(cmd, "--fp8-history", o.history, "delayed: amax history length (default 1024)", 1, 1 << 20);
  add_integer_option(cmd, "--fp8-margin", o.margin, "scale = max / amax * 2^-margin (default 0)", 0, 64);
  cmd->add_option("--fp8-keep-bf16", o.keep_bf16,
                  "Linears kept in BF16: first, last, head (a Linear named classifier, head or lm_head), or none "
                  "(default first,last,head)")
      ->delimiter(',')
      ->check(CLI::IsMember({"first", "last", "head", "none"}));
  add_integer_option(cmd, "--fp8-stats", o.stats_every,
                     "every N steps, log each FP8 operand's amax, scales and shares of saturated and flushed-to-zero "
                     "elements (--log, --tensorboard; a host read then; 0 = off)",
                     0);
  add_integer_option(cmd, "--fp8-shadow", o.shadow_every,
                     "every N steps, run each FP8 Linear's BF16 twin on the same inputs and report the relative "
                     "error of its output (stdout, --log, --tensorboard; one more GEMM per Linear and a host read "
                     "then; 0 = off)",
                     0);
}

void add_diagnostic_options(CLI::App* cmd, tools::DebugOptions& d) {
  cmd->add_flag("--detect-anomaly", d.detect_anomaly,
                "stop at the first NaN/inf an op produces in forward or backward and name the op, its module, dtype "
                "and input ranges (slow: reads every result back)");
  cmd->add_flag("--dtype-report", d.dtype_report,
                "list the dtype autocast chose per module and op (first step) and flag activations left in f32");
  add_integer_option(cmd, "--explain-skips", d.explain_skips,
                     "when the GradScaler skips a step, name the parameters whose gradients held inf/NaN: at the "
                     "first skip and every Nth after it (N = the value, e.g. 1 for every skip; 0 = off)",
                     0);
}

std::string quoted_command_line(int argc, char** argv) {
  std::string line;
  for (int i = 0; i < argc; ++i) {
    std::string arg = i == 0 ? std::string("mixtape") : std::string(argv[i]);
    const bool plain =
        !arg.empty() &&
        arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=,+@%") ==
            std::string::npos;
    if (!plain) {
      std::string q = "'";
      for (const char ch : arg) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
      arg = q + "'";
    }
    line += (i == 0 ? "" : " ") + arg;
  }
  return line;
}

void print_profile() {
  if (kernels::profiling())
    std::fprintf(stderr, "\nkernel profile (MT_PROFILE)\n%s", kernels::profile_report().c_str());
}

namespace {

// " (rank r of n)" in a data-parallel job: known only once the command has
// started the process group, so asked when an error is reported.
std::string rank_label() {
  return dist::is_distributed() ? fmt::format(" (rank {} of {})", dist::world().rank(), dist::world().size())
                                : std::string();
}

}  // namespace

void check_environment() {
  default_num_threads();                  // MT_NUM_THREADS
  cpu_memory_limit();                     // MT_CPU_MEMORY_LIMIT
  alloc_conf_from_environment();          // MT_CUDA_ALLOC_CONF
  kernels::attention_backend_from_env();  // MT_ATTENTION
  kernels::cpu_gemm_library();            // MT_CPU_GEMM
  try {
    // MT_GEMM and MT_CONV: the simulator's entry points parse them as the GPU's do.
    sim::gemm_backend_name(kernels::GemmBackend::Auto);
    sim::conv2d_backend(kernels::ConvBackend::Auto);
  } catch (const std::invalid_argument& e) {
    fail("{}", e.what());
  }
  dist::check_settings();  // MT_DIST_BACKEND, MT_DIST_TIMEOUT, MT_DIST_DEBUG
  tools::check_verification_settings();  // MT_KERNEL_CHECKS, MT_KERNEL_CHECK_TIMEOUT_S, MT_SIM_GPU_IDENTITY
}

int with_error_exit_codes(const std::function<int()>& command) {
  try {
    return command();
  } catch (const AnomalyError& e) {
    std::fprintf(stderr, "\nerror%s: %s\n", rank_label().c_str(), e.what());
    return kExitNonFiniteLoss;
  } catch (const tools::NonFiniteLoss& e) {
    std::fprintf(stderr, "\nerror%s: %s\n", rank_label().c_str(), e.what());
    return kExitNonFiniteLoss;
  } catch (const Error& e) {
    std::fprintf(stderr, "\nerror%s: %s\n", rank_label().c_str(), e.what());
    return kExitError;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "\nerror%s: out of memory (an input asked for more than this machine has)\n",
                 rank_label().c_str());
    return kExitError;
  } catch (const std::exception& e) {  // nlohmann, filesystem, ...: a bug to report, but never a crash
    std::fprintf(stderr, "\nerror%s: %s\n", rank_label().c_str(), e.what());
    return kExitError;
  }
}

int parse_error_exit(const CLI::App& app, const CLI::ParseError& error) {
  if (error.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(error);  // --help
  std::fprintf(stderr, "error: %s\nRun with --help for more information.\n", error.what());
  return kExitError;
}

}  // namespace mt::cli
