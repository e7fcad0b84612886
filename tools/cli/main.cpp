// The `mixtape` command line: train, eval, generate, bench, compare, report,
// check-data, info, tokenize, quantize — one file each in tools/cli/, their shared options and
// the error wrapper in tools/cli/options.h.
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "distributed/process_group.h"
#include "tools/cli/options.h"
#include "tools/cli/subcommands.h"

namespace {

// Everything a command does, its start-up included, inside the error wrapper:
// a bad environment variable is an `error:` line, never an abort.
int run_subcommand(const mt::cli::Subcommand& subcommand, const std::string& command_line) {
  return mt::cli::with_error_exit_codes([&] {
    mt::cli::check_environment();
    // `mpirun -np N mixtape train ...`: every rank runs this; a failure on one
    // ends them all (the others would wait for it in their next collective).
    if (subcommand.distributed) mt::dist::init_process_group();
    return subcommand.run(command_line);
  });
}

}  // namespace

int main(int argc, char** argv) {
  using namespace mt::cli;
  CLI::App app{"mixtape: native mixed-precision training in C++/CUDA"};
  app.require_subcommand(1);
  const std::vector<Subcommand> subcommands = {add_train(app),   add_eval(app),   add_generate(app),   add_bench(app),
                                               add_compare(app), add_report(app), add_check_data(app), add_info(app),
                                               add_tokenize(app), add_quantize(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return parse_error_exit(app, error);
  }
  int code = 0;
  for (const Subcommand& subcommand : subcommands) {
    if (*subcommand.app) code = run_subcommand(subcommand, quoted_command_line(argc, argv));
  }
  if (code != 0 && mt::dist::is_distributed()) mt::dist::abort_job(code);
  mt::dist::finalize();
  return code;
}
