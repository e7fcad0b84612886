// The HTML report of one or more training runs (`mixtape report`,
// `mixtape train --report`, `mixtape compare`).
//
// A run is what `mixtape train --log` writes, one JSON object per line:
//   {"step": 7, "loss": 2.1, "lr": ..., "scale": 65536, "skipped": false, "grad_norm": ..., ...}
//   {"eval": {"step": 100, "loss": ..., "accuracy" | "perplexity": ...}}
//   {"skip": {"step": 3, "parameters": ["fc1.weight", ...]}}          (--explain-skips)
//   {"dtype_report": [{"module": "blocks.0.attn", "op": "linear", ...}]}  (--dtype-report)
//   {"summary": {"steps": ..., "memory_ledger": {...}, "config": {...}, "command": "...", ...}}
// The page is one self-contained file: plots are inline SVG drawn here, no
// script, style sheet, font or image is fetched, so it opens anywhere,
// offline, and can be mailed or committed. Every number the summary table
// shows carries its full-precision value in a data-value attribute (the
// browser test compares them with the log).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mt::tools {

struct RunRecord {
  std::string label;  // "fp32", "fp16", "bf16", or the log's file name
  std::vector<nlohmann::json> steps;
  std::vector<nlohmann::json> evals;
  std::vector<nlohmann::json> skips;       // {"step", "parameters"} from --explain-skips
  nlohmann::json dtype_report;             // an array, or null
  std::vector<nlohmann::json> fp8;         // --fp8-stats: {"step", "recipe", "tensors": [...]} every N steps
  std::vector<nlohmann::json> fp8_shadow;  // --fp8-shadow: {"step", "recipe", "errors": {weight: error}}
  nlohmann::json summary;                  // null when the run did not finish
  std::string source;                      // where it was read from (a path), or empty
  // What went wrong reading it (a line that is not JSON, a file cut off
  // mid-line): the page draws what came before and says where it stopped.
  std::string problem;

  // Files a parsed line under steps, evals, skips, dtype_report, fp8 or summary;
  // false when it is none of them (unknown lines are kept out, not fatal).
  bool add_line(const nlohmann::json& line);
};

// A run from the records a training run kept (TrainSummary::records).
RunRecord run_from_records(const std::vector<nlohmann::json>& records, const std::string& label);

// Reads a metrics log. mt::Error when the file cannot be read or holds no
// valid line at all; a bad line later on ends the reading with `problem` set.
RunRecord read_metrics_log(const std::string& path);

struct ReportPage {
  std::string title = "mixtape training report";
  std::vector<RunRecord> runs;
  nlohmann::json machine;  // machine_json(), or null
  std::string commit;
  std::vector<std::string> commands;  // how the page was made (each a shell command line)
};

std::string render_report_html(const ReportPage& page);

// Writes the page atomically (a temporary file renamed over `path`).
void write_report(const std::string& path, const ReportPage& page);

}  // namespace mt::tools
