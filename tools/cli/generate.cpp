// `mixtape generate`: continue a prompt with a trained language model.
#include "tools/train/generate.h"

#include <cstdio>
#include <memory>

#include "models/registry.h"
#include "tools/cli/options.h"
#include "tools/cli/subcommands.h"

namespace mt::cli {
namespace {

struct GenerateArgs {
  std::string checkpoint, prompt, device = "auto";
  tools::GenerateOptions options;
  bool no_cache = false, allow_nonfinite = false;
};

// "gpt-tiny, gpt-small, ...": the registry's language models.
std::string language_models_help() {
  std::string help;
  for (const auto& m : models::model_list()) {
    if (m.task == models::ModelTask::LanguageModel) help += m.name + ", ";
  }
  return help + "...";
}

}  // namespace

Subcommand add_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "generate",
      "Continue a prompt with a trained language model (text in, text out, through the tokenizer it trained with)");
  cmd->add_option("--checkpoint", a->checkpoint, "checkpoint (.safetensors) of " + language_models_help())
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--prompt", a->prompt, "the text to continue")->required();
  add_integer_option(cmd, "--tokens", a->options.tokens,
                     "new tokens to generate (bytes, or GPT-2 BPE tokens for a --tokenizer gpt2 model)", 0);
  add_integer_option(cmd, "--max-tokens", a->options.max_tokens,
                     "refuse --tokens above this cap (default " + std::to_string(a->options.max_tokens) + ")", 0);
  cmd->add_flag("--allow-nonfinite", a->allow_nonfinite,
                "load a checkpoint whose weights hold NaN or inf (a post-mortem; refused otherwise)");
  cmd->add_option("--temperature", a->options.temperature, "sampling temperature (0 = greedy)")
      ->check(non_negative_number());
  add_integer_option(cmd, "--top-k", a->options.top_k, "sample among the k most likely tokens only (0 = all)", 0);
  add_seed_option(cmd, a->options.seed, "sampling seed (0 to 2^64 - 1)");
  add_device_option(cmd, a->device);
  cmd->add_flag("--no-cache", a->no_cache, "re-run the whole window for every token (no key/value cache)");
  auto run = [a](const std::string&) {
    a->options.use_cache = !a->no_cache;
    // Each byte is written and flushed as it is made: a long generation shows its text as it goes.
    auto stream = [](std::string_view text) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    };
    tools::generate_from_checkpoint(
        a->checkpoint, a->prompt, a->options, a->device, stream,
        a->allow_nonfinite ? tools::NonFiniteWeights::Allow : tools::NonFiniteWeights::Refuse);
    std::fputc('\n', stdout);
    return 0;
  };
  return {cmd, run};
}

}  // namespace mt::cli
