#include "tools/train/report.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include "runtime/error.h"
#include "tools/train/report_charts.h"

namespace mt::tools {

// ---------------------------------------------------------------- reading

bool RunRecord::add_line(const nlohmann::json& line) {
  if (!line.is_object()) return false;
  if (line.contains("step") && line.contains("loss")) {
    if (!line["step"].is_number_integer() || !line["loss"].is_number()) return false;
    steps.push_back(line);
    return true;
  }
  if (line.contains("eval") && line["eval"].is_object()) {
    evals.push_back(line["eval"]);
    return true;
  }
  if (line.contains("skip") && line["skip"].is_object()) {
    skips.push_back(line["skip"]);
    return true;
  }
  if (line.contains("fp8") && line["fp8"].is_object()) {
    fp8.push_back(line["fp8"]);
    return true;
  }
  if (line.contains("fp8_shadow") && line["fp8_shadow"].is_object()) {
    fp8_shadow.push_back(line["fp8_shadow"]);
    return true;
  }
  if (line.contains("dtype_report") && line["dtype_report"].is_array()) {
    dtype_report = line["dtype_report"];
    return true;
  }
  if (line.contains("summary") && line["summary"].is_object()) {
    summary = line["summary"];
    return true;
  }
  return false;
}

RunRecord run_from_records(const std::vector<nlohmann::json>& records, const std::string& label) {
  RunRecord run;
  for (const nlohmann::json& line : records) run.add_line(line);
  run.label = label;
  return run;
}

RunRecord read_metrics_log(const std::string& path) {
  std::error_code ec;
  MT_CHECK(std::filesystem::exists(path, ec), "report: the metrics log '{}' does not exist", path);
  // A FIFO or a device would block or never end: regular files only.
  MT_CHECK(std::filesystem::is_regular_file(path, ec), "report: '{}' is not a regular file", path);
  std::ifstream in(path, std::ios::binary);
  MT_CHECK(in.good(), "report: cannot read the metrics log '{}'", path);
  RunRecord run;
  run.source = path;
  run.label = std::filesystem::path(path).stem().string();
  std::string line;
  int64_t number = 0, read = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty()) continue;
    const bool last_without_newline = in.eof();
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !run.add_line(j)) {
      run.problem = fmt::format("'{}' line {} {}; the {} line(s) before it are drawn", path, number,
                                j.is_discarded() ? (last_without_newline ? "is cut off mid-line" : "is not JSON")
                                                 : "is not a mixtape metrics record",
                                read);
      break;
    }
    ++read;
  }
  MT_CHECK(read > 0, "report: '{}' holds no mixtape metrics (expected the JSON lines of `mixtape train --log`){}", path,
           run.problem.empty() ? "" : ": " + run.problem);
  if (run.summary.is_object() && run.summary.contains("config") && run.summary["config"].is_object()) {
    const nlohmann::json& precision = run.summary["config"]["precision"];
    if (precision.is_string()) run.label = precision.get<std::string>();
  }
  return run;
}

// ---------------------------------------------------------------- the page's parts

using namespace report_detail;

namespace {

Series step_series(const RunRecord& r, const char* key, size_t index) {
  Series s{r.label, run_color(index, r.label), {}};
  for (const nlohmann::json& m : r.steps) {
    if (m.contains(key) && m[key].is_number()) s.points.emplace_back(m["step"].get<double>(), m[key].get<double>());
  }
  return s;
}

// One table cell holding a metric: the shown text and the exact value.
std::string metric_cell(const char* metric, double value, const std::string& shown) {
  return fmt::format("<td data-metric=\"{}\" data-value=\"{}\">{}</td>", metric, exact(value), escape(shown));
}

std::string summary_table(const std::vector<RunRecord>& runs) {
  std::string html =
      "<table id=\"summary\"><tr><th>run</th><th>model</th><th>device</th><th>steps</th><th>skipped</th>"
      "<th>final loss</th><th>held-out result</th><th>samples/s</th><th>peak memory</th><th>training peak (no "
      "dataset)</th><th>final scale</th></tr>\n";
  for (const RunRecord& r : runs) {
    const nlohmann::json& s = r.summary;
    const nlohmann::json config = s.is_object() && s.contains("config") ? s["config"] : nlohmann::json();
    const std::string device = text_or(s, "device", text_or(config, "device", "?"));
    html += fmt::format("<tr data-run=\"{}\"><td>{}</td><td>{}</td><td>{}</td>", escape(r.label), escape(r.label),
                        escape(text_or(config, "model", "?")), escape(device));
    if (!s.is_object()) {
      html += fmt::format("<td colspan=\"8\">the run did not finish: {} step(s) logged{}</td></tr>\n", r.steps.size(),
                          r.problem.empty() ? "" : " (" + escape(r.problem) + ")");
      continue;
    }
    const double steps = number_or(s, "steps", NAN), skipped = number_or(s, "skipped_steps", NAN);
    html += metric_cell("steps", steps, fmt::format("{:.0f}", steps));
    html += metric_cell("skipped_steps", skipped, fmt::format("{:.0f}", skipped));
    const double final_loss = r.steps.empty() ? NAN : r.steps.back()["loss"].get<double>();
    html += metric_cell("final_loss", final_loss, fmt::format("{:.4f}", final_loss));
    if (s.contains("validation_loss")) {
      const double v = number_or(s, "validation_loss", NAN);
      html += metric_cell("validation_loss", v, fmt::format("validation loss {:.4f}", v));
    } else {
      const double a = number_or(s, "test_accuracy", NAN);
      html += metric_cell("test_accuracy", a, fmt::format("test accuracy {:.2f}%", 100 * a));
    }
    const double speed = number_or(s, "samples_per_s", NAN), peak = number_or(s, "peak_memory_bytes", NAN);
    html += metric_cell("samples_per_s", speed, fmt::format("{:.0f}", speed));
    html += metric_cell("peak_memory_bytes", peak, mib(peak));
    const double training_peak = number_or(s, "training_peak_bytes", NAN);
    html += metric_cell("training_peak_bytes", training_peak, mib(training_peak));
    const double scale = number_or(s, "final_scale", NAN);
    html += metric_cell("final_scale", scale, fmt::format("{:g}", scale)) + "</tr>\n";
  }
  return html + "</table>\n";
}

std::string dtype_report_section(const std::vector<RunRecord>& runs) {
  std::string html;
  for (const RunRecord& r : runs) {
    if (!r.dtype_report.is_array()) continue;
    html += fmt::format(
        "<h3>Autocast dtypes: {}</h3><table class=\"dtypes\" data-run=\"{}\"><tr><th>module</th><th>op</th>"
        "<th>policy</th><th>inputs</th><th>ran in</th><th>output</th><th>calls</th><th>note</th></tr>\n",
        escape(r.label), escape(r.label));
    for (const nlohmann::json& row : r.dtype_report) {
      if (!row.is_object()) continue;
      const std::string flag = text_or(row, "flag"), not_fp8 = text_or(row, "fp8");
      const std::string note = !flag.empty() ? flag : !not_fp8.empty() ? "not FP8: " + not_fp8 : "";
      html += fmt::format(
          "<tr{}><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
          flag.empty() ? "" : " class=\"flag\"", escape(text_or(row, "module")), escape(text_or(row, "op")),
          escape(text_or(row, "policy")), escape(text_or(row, "inputs")), escape(text_or(row, "compute")),
          escape(text_or(row, "output")), number_or(row, "calls", 0), escape(note));
    }
    html += "</table>\n";
  }
  return html;
}

// --fp8-stats: one row per FP8 operand (weight x role), one column per
// record; each cell's colour is the share of that operand's elements that
// were clipped (red) or flushed to zero (blue), its text the larger share.
std::string fp8_section(const std::vector<RunRecord>& runs) {
  std::string html;
  for (const RunRecord& r : runs) {
    if (r.fp8.empty()) continue;
    std::vector<std::string> rows;
    std::map<std::string, std::map<size_t, std::pair<double, double>>> cells;  // row -> column -> (clipped, flushed)
    for (size_t col = 0; col < r.fp8.size(); ++col) {
      const nlohmann::json& record = r.fp8[col];
      if (!record.contains("tensors") || !record["tensors"].is_array()) continue;
      for (const nlohmann::json& t : record["tensors"]) {
        if (!t.is_object()) continue;
        const std::string row = text_or(t, "parameter") + " " + text_or(t, "role");
        if (!cells.contains(row)) rows.push_back(row);
        cells[row][col] = {number_or(t, "saturated", 0), number_or(t, "flushed", 0)};
      }
    }
    html += fmt::format("<h3>Where FP8 hurts: {}</h3><table class=\"fp8\" data-run=\"{}\"><tr><th>operand</th>",
                        escape(r.label), escape(r.label));
    for (const nlohmann::json& record : r.fp8) html += fmt::format("<th>step {}</th>", number_or(record, "step", 0));
    html += "</tr>\n";
    for (const std::string& row : rows) {
      html += "<tr><td>" + escape(row) + "</td>";
      for (size_t col = 0; col < r.fp8.size(); ++col) {
        const auto at = cells[row].find(col);
        if (at == cells[row].end()) {
          html += "<td></td>";
          continue;
        }
        const auto [clipped, flushed] = at->second;
        // Shares are small: a 1% share is already a full colour.
        const int red = static_cast<int>(255 * std::min(1.0, clipped * 100)),
                  blue = static_cast<int>(255 * std::min(1.0, flushed * 100));
        html +=
            fmt::format("<td style=\"background:rgb({},{},{})\" data-clipped=\"{}\" data-flushed=\"{}\">{:.2g}%</td>",
                        255 - blue / 2, 255 - (red + blue) / 2, 255 - red / 2, exact(clipped), exact(flushed),
                        100 * std::max(clipped, flushed));
      }
      html += "</tr>\n";
    }
    html += "</table>\n";
  }
  return html;
}

// --fp8-shadow: one row per FP8 Linear, one column per record, each cell
// the relative error of its output against its BF16 twin.
std::string fp8_shadow_section(const std::vector<RunRecord>& runs) {
  std::string html;
  for (const RunRecord& r : runs) {
    if (r.fp8_shadow.empty()) continue;
    std::vector<std::string> weights;
    for (const nlohmann::json& record : r.fp8_shadow) {
      if (!record.contains("errors") || !record["errors"].is_object()) continue;
      for (const auto& [weight, error] : record["errors"].items()) {
        if (std::find(weights.begin(), weights.end(), weight) == weights.end()) weights.push_back(weight);
      }
    }
    html += fmt::format("<h3>FP8 against BF16: {}</h3><table class=\"fp8-shadow\" data-run=\"{}\"><tr><th>Linear</th>",
                        escape(r.label), escape(r.label));
    for (const nlohmann::json& record : r.fp8_shadow)
      html += fmt::format("<th>step {}</th>", number_or(record, "step", 0));
    html += "</tr>\n";
    for (const std::string& weight : weights) {
      html += "<tr><td>" + escape(weight) + "</td>";
      for (const nlohmann::json& record : r.fp8_shadow) {
        const bool has = record.contains("errors") && record["errors"].is_object() && record["errors"].contains(weight);
        const nlohmann::json error = has ? record["errors"][weight] : nlohmann::json();
        html += error.is_number() ? fmt::format("<td>{:.3g}</td>", error.get<double>())
                                  : "<td>" + std::string(has ? "NaN" : "") + "</td>";
      }
      html += "</tr>\n";
    }
    html += "</table>\n";
  }
  return html;
}

std::string skips_section(const std::vector<RunRecord>& runs) {
  std::string html;
  for (const RunRecord& r : runs) {
    if (r.skips.empty()) continue;
    html += fmt::format("<h3>Skipped steps explained: {}</h3><ul class=\"skips\">", escape(r.label));
    for (const nlohmann::json& s : r.skips) {
      std::vector<std::string> names;
      if (s.contains("parameters") && s["parameters"].is_array()) {
        for (const auto& n : s["parameters"]) names.push_back(n.is_string() ? n.get<std::string>() : n.dump());
      }
      html += fmt::format("<li>step {}: {}</li>", number_or(s, "step", NAN),
                          escape(fmt::format("{}", fmt::join(names, ", "))));
    }
    html += "</ul>\n";
  }
  return html;
}

std::string now_utc() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%d %H:%M UTC", &tm);
  return buffer;
}

// The page's head (title, style), its heading and the problems met reading the runs.
std::string page_head(const ReportPage& page) {
  const auto& runs = page.runs;
  std::string html = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{0}</title>\n<style>"
      "body{{font-family:sans-serif;margin:24px;color:#222;max-width:1000px}}"
      "table{{border-collapse:collapse;margin:8px 0}}td,th{{border:1px solid #ccc;padding:3px 8px;font-size:13px}}"
      "th{{background:#f4f4f4}}tr.flag{{background:#fff1c2}}figure{{margin:12px 0}}figcaption{{font-weight:bold;"
      "margin-bottom:4px}}.problem{{color:#a00}}code,pre{{background:#f6f6f6;padding:2px 4px}}</style></head>\n"
      "<body><h1>{0}</h1>\n<p>Generated {1} from {2} run(s).</p>\n",
      escape(page.title), now_utc(), runs.size());
  for (const RunRecord& r : runs) {
    if (!r.problem.empty()) html += "<p class=\"problem\">" + escape(r.problem) + "</p>\n";
  }
  return html;
}

// Every run's curves for the Training charts.
struct TrainingSeries {
  std::vector<Series> losses, scales, norms, lr;
  std::vector<Marker> skipped;
  std::vector<Series> held_out;
  bool any_language_model = false;
};

TrainingSeries training_series(const std::vector<RunRecord>& runs) {
  TrainingSeries t;
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunRecord& r = runs[i];
    t.losses.push_back(step_series(r, "loss", i));
    t.lr.push_back(step_series(r, "lr", i));
    Series norm = step_series(r, "grad_norm", i);
    if (!norm.points.empty()) t.norms.push_back(norm);
    // The scale matters where a scaler ran: a run whose scale never left 1 had none.
    Series scale = step_series(r, "scale", i);
    const bool scaled = std::any_of(scale.points.begin(), scale.points.end(), [](auto& p) { return p.second != 1.0; });
    if (scaled) t.scales.push_back(scale);
    for (const nlohmann::json& m : r.steps) {
      if (flag_or(m, "skipped", false))
        t.skipped.push_back(
            {m["step"].get<double>(), number_or(m, "scale", NAN),
             fmt::format("{}: step {} skipped (inf/NaN gradients)", r.label, m["step"].get<int64_t>())});
    }
    Series e{r.label, run_color(i, r.label), {}};
    for (const nlohmann::json& ev : r.evals) {
      const bool lm = ev.contains("perplexity");
      t.any_language_model |= lm;
      e.points.emplace_back(number_or(ev, "step", NAN),
                            lm ? number_or(ev, "loss", NAN) : number_or(ev, "accuracy", NAN));
    }
    if (!e.points.empty()) t.held_out.push_back(e);
  }
  return t;
}

std::string training_section(const std::vector<RunRecord>& runs) {
  const TrainingSeries t = training_series(runs);
  std::string html = "<h2>Training</h2>\n";
  html += line_chart("plot-loss", "Training loss per optimizer step", "step", "loss", t.losses);
  if (!t.scales.empty()) {
    html += line_chart("plot-scale", "Loss scale (GradScaler), skipped steps circled", "step", "scale (log)", t.scales,
                       t.skipped, /*log_y=*/true);
  } else {
    html +=
        "<p id=\"no-scale\">No run used loss scaling (fp32 and bf16 need none), so there is no scale to draw.</p>\n";
  }
  if (!t.norms.empty()) {
    html += line_chart("plot-grad-norm", "Gradient norm (unscaled, before clipping)", "step", "L2 norm", t.norms);
  } else {
    html += "<p>No gradient norms were logged (train with --clip or --report to record them).</p>\n";
  }
  html += line_chart("plot-lr", "Learning rate", "step", "lr", t.lr);
  if (!t.held_out.empty()) {
    html += line_chart("plot-eval", t.any_language_model ? "Validation loss (nats/token)" : "Held-out accuracy", "step",
                       t.any_language_model ? "loss" : "accuracy", t.held_out);
  }
  return html;
}

// Throughput and memory bars and the memory ledger; empty when no run finished.
std::string speed_and_memory_section(const std::vector<RunRecord>& runs) {
  std::string html;
  std::vector<Bar> speed, memory;
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunRecord& r = runs[i];
    if (!r.summary.is_object()) continue;
    // The training peak leaves out the dataset held in memory (the same for every run).
    const double s = number_or(r.summary, "samples_per_s", NAN),
                 p = number_or(r.summary, "training_peak_bytes", number_or(r.summary, "peak_memory_bytes", NAN));
    speed.push_back({r.label, run_color(i, r.label), s, fmt::format("{:.0f} samples/s", s)});
    memory.push_back({r.label, run_color(i, r.label), p, mib(p)});
  }
  if (!speed.empty()) {
    html += "<h2>Speed and memory</h2>\n";
    html += bar_chart("plot-throughput", "Training throughput (samples/s, first step excluded)", speed);
    html += bar_chart("plot-memory", "Peak memory of the training steps (the dataset held in memory left out)", memory);
    html += ledger_chart(runs);
  }
  return html;
}

// The commands, sources, machine and commit behind the page.
std::string how_this_was_made(const ReportPage& page) {
  std::string html = "<h2>How this was made</h2>\n<ul id=\"commands\">";
  for (const std::string& c : page.commands) html += "<li><code>" + escape(c) + "</code></li>";
  for (const RunRecord& r : page.runs) {
    if (r.summary.is_object() && r.summary.contains("command") && r.summary["command"].is_string())
      html += "<li>" + escape(r.label) + ": <code>" + escape(r.summary["command"].get<std::string>()) + "</code></li>";
    if (!r.source.empty()) html += "<li>" + escape(r.label) + ": read from <code>" + escape(r.source) + "</code></li>";
  }
  html += "</ul>\n";
  if (page.machine.is_object())
    html += "<p id=\"machine\">Machine: <code>" + escape(page.machine.dump()) + "</code></p>\n";
  if (!page.commit.empty()) html += "<p id=\"commit\">Commit: <code>" + escape(page.commit) + "</code></p>\n";
  return html;
}

}  // namespace

std::string render_report_html(const ReportPage& page) {
  const auto& runs = page.runs;
  std::string html = page_head(page);
  html += "<h2>Summary</h2>\n" + summary_table(runs);
  html += training_section(runs);
  html += speed_and_memory_section(runs);
  const std::string dtypes = dtype_report_section(runs);
  if (!dtypes.empty()) html += "<h2>Autocast dtype report</h2>\n" + dtypes;
  const std::string fp8 = fp8_section(runs);
  if (!fp8.empty()) html += "<h2>FP8: clipped and flushed elements per operand</h2>\n" + fp8;
  const std::string shadow = fp8_shadow_section(runs);
  if (!shadow.empty()) html += "<h2>FP8: each Linear's relative error against its BF16 twin</h2>\n" + shadow;
  const std::string skips = skips_section(runs);
  if (!skips.empty()) html += "<h2>Overflow attribution</h2>\n" + skips;
  html += how_this_was_made(page);
  return html + "</body></html>\n";
}

void write_report(const std::string& path, const ReportPage& page) {
  const std::string html = render_report_html(page);
  const std::string temporary = fmt::format("{}.tmp.{}", path, ::getpid());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    MT_CHECK(out.good(), "report: cannot write '{}'", path);
    out << html;
    out.flush();
    if (!out.good()) {
      std::remove(temporary.c_str());
      fail("report: writing '{}' failed (disk full?)", path);
    }
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) {
    std::remove(temporary.c_str());
    fail("report: cannot move the report into '{}': {}", path, ec.message());
  }
}

}  // namespace mt::tools
