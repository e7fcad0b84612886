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
  bool no_cache = false;
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
  CLI::App* cmd =
      app.add_subcommand("generate", "Continue a prompt with a trained language model (bytes in, bytes out)");
  cmd->add_option("--checkpoint", a->checkpoint, "checkpoint (.safetensors) of " + language_models_help())
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--prompt", a->prompt, "the text to continue")->required();
  add_integer_option(cmd, "--tokens", a->options.tokens, "new tokens (bytes) to generate", 0);
  cmd->add_option("--temperature", a->options.temperature, "sampling temperature (0 = greedy)")
      ->check(non_negative_number());
  add_integer_option(cmd, "--top-k", a->options.top_k, "sample among the k most likely tokens only (0 = all)", 0);
  add_seed_option(cmd, a->options.seed, "sampling seed (0 to 2^64 - 1)");
  add_device_option(cmd, a->device);
  cmd->add_flag("--no-cache", a->no_cache, "re-run the whole window for every token (no key/value cache)");
  auto run = [a](const std::string&) {
    a->options.use_cache = !a->no_cache;
    const auto r = tools::generate_from_checkpoint(a->checkpoint, a->prompt, a->options, a->device);
    std::fwrite(r.text.data(), 1, r.text.size(), stdout);
    std::fputc('\n', stdout);
    return 0;
  };
  return {cmd, run};
}

}  // namespace mt::cli
