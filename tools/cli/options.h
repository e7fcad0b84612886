// What the subcommands share, written once: the options several of them take
// (--model, --dataset, --device, --seed, the debugging aids), the command line
// as logs record it, and the wrapper that turns a command's errors into an
// `error:` line on stderr and an exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tools/train/trainer.h"

namespace mt::cli {

inline constexpr int kExitError = 1;
inline constexpr int kExitNonFiniteLoss = 3;

// --model, one of models/registry.h's names (or "auto" when `with_auto`).
CLI::Option* add_model_option(CLI::App* cmd, std::string& model, const std::string& help, bool with_auto);
// "mlp | cnn | ... | bert-base": the registry's models for a help text.
std::string model_names_help();
// What --model auto picks (models::default_model), for help texts: "mlp on a CPU, cnn on a GPU".
std::string auto_model_help();

// --dataset, "auto" or one of tools/data/registry.h's names.
CLI::Option* add_dataset_option(CLI::App* cmd, std::string& dataset, const std::string& help);
// "fashion-mnist (...) | synthetic (...) | ...": the registry's datasets for a help text.
std::string dataset_names_help();

// --device: auto | cpu | cuda | sim, kept as text: the command parses it
// (tools::parse_device_choice) when it runs, so a bad name is an `error:`
// line from parse_device like any other run error.
CLI::Option* add_device_option(CLI::App* cmd, std::string& device);
// --tokenizer, one of data::tokenizer_names().
CLI::Option* add_tokenizer_option(CLI::App* cmd, std::string& tokenizer, const std::string& help);

// An option CLI11 reads as text and checks against `names` (its messages as
// for any IsMember option); once accepted, `parse` stores it typed in `field`.
template <class T>
CLI::Option* add_choice_option(CLI::App* cmd, const std::string& flag, T& field, T (*parse)(const std::string&),
                               const std::vector<std::string>& names, const std::string& help) {
  return cmd
      ->add_option_function<std::string>(
          flag, [&field, parse](const std::string& text) { field = parse(text); }, help)
      ->check(CLI::IsMember(names));
}

// A seed option read as a whole decimal number that fits 64 bits: CLI11
// would wrap "-1" and an overflowing value without a word.
CLI::Option* add_seed_option(CLI::App* cmd, uint64_t& seed, const std::string& help);

// Every integer option: a whole decimal number from `min` to `max`, parsed
// here. CLI11 alone reads a number too large for the field as its largest
// value without a word (--tokens 18446744073709551616 as 2^63 - 1), and
// "010" as octal.
CLI::Option* add_integer_option(CLI::App* cmd, const std::string& flag, int64_t& field, const std::string& help,
                                int64_t min, int64_t max = INT64_MAX);
// The checks of real-valued options: CLI11's NonNegativeNumber and
// PositiveNumber print their bound as DBL_MAX's 309 digits.
CLI::Validator non_negative_number();
CLI::Validator positive_number();

// --fp8-recipe, --fp8-history, --fp8-margin, --fp8-keep-bf16 (for --precision fp8), shared by train and compare.
void add_fp8_options(CLI::App* cmd, tools::Fp8Options& o);

// The mixed-precision debugging aids, shared by train and compare.
void add_diagnostic_options(CLI::App* cmd, tools::DebugOptions& d);

// The command line as a shell would take it back (for logs and reports).
std::string quoted_command_line(int argc, char** argv);

// With MT_PROFILE=1: the CUDA-path kernels and library calls of the run,
// slowest total first (runtime/launch_check.h).
void print_profile();

// Every environment variable the command line's work reads (MT_NUM_THREADS,
// MT_CPU_MEMORY_LIMIT, MT_CUDA_ALLOC_CONF, MT_GEMM, MT_CONV, MT_ATTENTION,
// the MT_DIST_* settings, the kernel checks' MT_KERNEL_CHECKS,
// MT_KERNEL_CHECK_TIMEOUT_S and MT_SIM_GPU_IDENTITY) parsed now, on the main thread: a bad value is an
// mt::Error naming the variable before any work, not an abort on a worker
// thread or a device reported as missing later.
void check_environment();

// An INT8 checkpoint beside its float source (`quantize` and `eval` print
// it): the recipe, the layers kept in float and why, then score, samples/s
// and weight size of both.
void print_int8_comparison(const tools::Int8Comparison& c, bool language_model);

// Runs a command; its errors become a message on stderr and an exit code.
int with_error_exit_codes(const std::function<int()>& command);

// A command line CLI11 could not parse: `error: ...` and a pointer to --help
// on stderr, kExitError; --help itself prints the help and returns 0.
int parse_error_exit(const CLI::App& app, const CLI::ParseError& error);

}  // namespace mt::cli
