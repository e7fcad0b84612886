// `mixtape report`: the HTML report of metrics logs written by train --log.
#include "tools/train/report.h"

#include <cstdio>
#include <memory>
#include <vector>

#include "tools/cli/subcommands.h"
#include "tools/train/output_paths.h"

namespace mt::cli {
namespace {

struct ReportArgs {
  std::vector<std::string> logs;
  std::string out;
};

// --out must not be one of the logs it draws (nor a device).
void check_report_output(const ReportArgs& a) {
  std::vector<tools::NamedPath> logs;
  for (const std::string& path : a.logs) logs.push_back({"the metrics log", path});
  tools::check_output_paths("report", {{"--out", a.out}}, logs);
}

int run_report(const ReportArgs& a, const std::string& command_line) {
  check_report_output(a);
  tools::ReportPage page;
  page.title = "mixtape report";
  for (const std::string& path : a.logs) {
    page.runs.push_back(tools::read_metrics_log(path));
    if (!page.runs.back().problem.empty()) std::fprintf(stderr, "report: %s\n", page.runs.back().problem.c_str());
  }
  page.commands.push_back(command_line);
  tools::write_report(a.out, page);
  std::printf("report of %zu run(s) written to %s\n", page.runs.size(), a.out.c_str());
  return 0;
}

}  // namespace

Subcommand add_report(CLI::App& app) {
  auto a = std::make_shared<ReportArgs>();
  CLI::App* cmd = app.add_subcommand("report", "Draw the HTML report of metrics logs written by train --log");
  cmd->add_option("logs", a->logs, "metrics logs (JSON lines of train --log); several are drawn together")->required();
  cmd->add_option("--out", a->out, "the HTML report to write")->required();
  return {cmd, [a](const std::string& command_line) { return run_report(*a, command_line); }};
}

}  // namespace mt::cli
