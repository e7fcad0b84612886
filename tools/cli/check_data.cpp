// `mixtape check-data`: per split, what would make training go wrong; exit 1
// when anything is found.
#include <cstdio>
#include <memory>

#include "tools/cli/options.h"
#include "tools/cli/subcommands.h"
#include "tools/data/check.h"
#include "tools/data/registry.h"
#include "tools/train/trainer.h"

namespace mt::cli {
namespace {

int run_check_data(tools::TrainConfig c) {
  // The dataset names the model that reads it (the registry's default model).
  if (c.model == "auto" && c.data.dataset != "auto") c.model = data::find_dataset(c.data.dataset).default_model;
  const auto [train, test] = tools::load_training_data(c);
  bool clean = true;
  for (const auto& [name, split] : {std::pair{"train", &train}, std::pair{"held-out", &test}}) {
    // Padding positions of a text dataset carry the cross-entropy's ignore_index.
    const data::DataCheck check = data::check_dataset(*split);
    std::printf("%s: %s\n", name, data::describe(check, split->classes).c_str());
    clean = clean && check.clean();
  }
  std::printf("%s\n", clean ? "check-data: nothing wrong found" : "check-data: problems found (see above)");
  return clean ? 0 : kExitError;
}

}  // namespace

Subcommand add_check_data(CLI::App& app) {
  auto config = std::make_shared<tools::TrainConfig>();
  CLI::App* cmd = app.add_subcommand(
      "check-data", "Scan a dataset for NaN/inf inputs, out-of-range labels and empty samples before training");
  cmd->add_option("--data", config->data.dir, "the dataset's directory (as train --data)");
  // What `--dataset auto` reads on the CPU (tools::load_training_data).
  const std::string fallback = tools::resolve_defaults(tools::TrainConfig{}, kCPU).data.dataset;
  add_dataset_option(cmd, config->data.dataset, "as train --dataset (default " + fallback + ")");
  add_integer_option(cmd, "--context", config->data.context, "text datasets: tokens per window or passage", 0);
  add_tokenizer_option(cmd, config->data.tokenizer, "as train --tokenizer (bytes or gpt2)");
  return {cmd, [config](const std::string&) { return run_check_data(*config); }};
}

}  // namespace mt::cli
