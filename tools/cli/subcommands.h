// The `mixtape` subcommands, one file each. Each add_* registers its
// subcommand and options on the app and returns how to run it once the
// command line is parsed; main() runs the one given, inside
// with_error_exit_codes (tools/cli/options.h). A new subcommand is one file
// and one line here and in main.cpp.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

namespace mt::cli {

struct Subcommand {
  CLI::App* app = nullptr;  // *app is true when the command line named it
  // Runs it and returns the exit code; errors are thrown. `command_line` is
  // the whole command line, quoted as a shell would take it back.
  std::function<int(const std::string& command_line)> run;
  // `mpirun -np N mixtape train ...`: every rank joins the process group
  // before running it.
  bool distributed = false;
};

Subcommand add_train(CLI::App& app);
Subcommand add_eval(CLI::App& app);
Subcommand add_generate(CLI::App& app);
Subcommand add_bench(CLI::App& app);
Subcommand add_compare(CLI::App& app);
Subcommand add_report(CLI::App& app);
Subcommand add_check_data(CLI::App& app);
Subcommand add_info(CLI::App& app);
Subcommand add_tokenize(CLI::App& app);
Subcommand add_quantize(CLI::App& app);

}  // namespace mt::cli
