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

// ---------------------------------------------------------------- drawing

namespace {

std::string escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += ch;
    }
  }
  return out;
}

// A log is someone else's file: every field is read through these, which
// give the fallback for a missing key or a value of another type.
double number_or(const nlohmann::json& j, const char* key, double fallback) {
  return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<double>() : fallback;
}
std::string text_or(const nlohmann::json& j, const char* key, const std::string& fallback = "") {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : fallback;
}
bool flag_or(const nlohmann::json& j, const char* key, bool fallback) {
  return j.is_object() && j.contains(key) && j[key].is_boolean() ? j[key].get<bool>() : fallback;
}

// The number with every digit a double needs: what data-value carries.
std::string exact(double v) { return fmt::format("{}", v); }

std::string mib(double bytes) { return fmt::format("{:.2f} MiB", bytes / (1 << 20)); }

// An axis tick's label, with as many digits as the ticks' spacing needs
// (ticks 0.00086, 0.00088, ... must not all read 0.001).
std::string tick_label(double v, double spacing) {
  if (std::fabs(v) < spacing * 1e-6) return "0";
  const double a = std::fabs(v);
  const int digits = std::max(0, -static_cast<int>(std::floor(std::log10(spacing) + 1e-9)));
  if (a >= 1e6 || digits > 4) {
    const int significant = std::max(1, static_cast<int>(std::ceil(std::log10(a) - std::log10(spacing))) + 1);
    return fmt::format("{:.{}e}", v, std::min(significant, 10) - 1);
  }
  return fmt::format("{:.{}f}", v, digits);
}

const char* run_color(size_t i, const std::string& label) {
  if (label == "fp32") return "#1f77b4";
  if (label == "fp16") return "#d62728";
  if (label == "bf16") return "#2ca02c";
  static const char* const palette[] = {"#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f"};
  return palette[i % 6];
}

// Ticks at 1, 2 or 5 times a power of ten, about `count` of them over [low, high].
std::vector<double> nice_ticks(double low, double high, int count) {
  const double span = high - low;
  if (!(span > 0)) return {low};
  const double raw = span / count, magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (const double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= raw) break;
  }
  std::vector<double> ticks;
  for (double t = std::ceil(low / step) * step; t <= high + step * 1e-9; t += step) ticks.push_back(t);
  return ticks;
}

// Log-axis ticks (in log10 units) at powers of two, at most about 6 of them:
// loss scales are powers of two, so 65536 reads as 65536.
std::vector<double> power_of_two_ticks(double low, double high) {
  const int first = static_cast<int>(std::ceil(low / std::log10(2.0) - 1e-9));
  const int last = static_cast<int>(std::floor(high / std::log10(2.0) + 1e-9));
  const int stride = std::max(1, (last - first) / 6 + 1);
  std::vector<double> ticks;
  for (int k = first; k <= last; k += stride) ticks.push_back(k * std::log10(2.0));
  return ticks;
}

struct Series {
  std::string name;
  const char* color;
  std::vector<std::pair<double, double>> points;  // (x, y); non-finite y are left out when drawn
};

struct Marker {
  double x, y;
  std::string label;
};

struct Axes {
  double x0, x1, y0, y1;
  bool log_y;
  static constexpr double kWidth = 760, kHeight = 300, kLeft = 72, kRight = 150, kTop = 34, kBottom = 44;
  double px(double x) const { return kLeft + (x - x0) / (x1 - x0) * (kWidth - kLeft - kRight); }
  double py(double y) const {
    const double v = log_y ? std::log10(y) : y;
    return kHeight - kBottom - (v - y0) / (y1 - y0) * (kHeight - kTop - kBottom);
  }
};

bool drawable(double y, bool log_y) { return std::isfinite(y) && (!log_y || y > 0); }

// A line chart: every series on one pair of axes, a legend on the right,
// markers (skipped steps) as circles with their label on hover.
std::string line_chart(const std::string& id, const std::string& title, const std::string& x_label,
                       const std::string& y_label, const std::vector<Series>& series,
                       const std::vector<Marker>& markers = {}, bool log_y = false) {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  auto extend = [&](double x, double y) {
    if (!drawable(y, log_y) || !std::isfinite(x)) return;
    const double v = log_y ? std::log10(y) : y;
    x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, v), y1 = std::max(y1, v);
  };
  for (const Series& s : series)
    for (const auto& [x, y] : s.points) extend(x, y);
  for (const Marker& m : markers) extend(m.x, m.y);
  std::string svg = fmt::format(
      "<figure><figcaption>{}</figcaption><svg id=\"{}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" "
      "height=\"{}\" viewBox=\"0 0 {} {}\" role=\"img\">",
      escape(title), id, Axes::kWidth, Axes::kHeight, Axes::kWidth, Axes::kHeight);
  if (!std::isfinite(x0)) return svg + "<text x=\"20\" y=\"40\">no finite values to draw</text></svg></figure>";
  // A single value gets a range around it of a tenth of itself (or one unit around 0).
  auto widen = [](double& low, double& high) {
    if (high != low) return;
    const double half = low == 0 ? 0.5 : std::fabs(low) * 0.1;
    low -= half, high += half;
  };
  widen(x0, x1);
  widen(y0, y1);
  const double pad = (y1 - y0) * 0.05;
  const Axes a{x0, x1, y0 - pad, y1 + pad, log_y};
  const double left = Axes::kLeft, right = Axes::kWidth - Axes::kRight, top = Axes::kTop,
               bottom = Axes::kHeight - Axes::kBottom;
  svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#fff\" stroke=\"#999\"/>", left, top,
                     right - left, bottom - top);
  const std::vector<double> x_ticks = nice_ticks(a.x0, a.x1, 6);
  const double x_spacing = x_ticks.size() > 1 ? x_ticks[1] - x_ticks[0] : 1.0;
  for (const double t : x_ticks) {
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#eee\"/><text x=\"{0:.1f}\" y=\"{3}\" "
        "text-anchor=\"middle\" font-size=\"11\">{4}</text>",
        a.px(t), top, bottom, bottom + 15, tick_label(t, x_spacing));
  }
  const std::vector<double> y_ticks = log_y ? power_of_two_ticks(a.y0, a.y1) : nice_ticks(a.y0, a.y1, 5);
  const double y_spacing = y_ticks.size() > 1 ? y_ticks[1] - y_ticks[0] : 1.0;
  for (const double t : y_ticks) {
    const double value = log_y ? std::pow(10.0, t) : t;
    svg += fmt::format(
        "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"#eee\"/><text x=\"{3}\" y=\"{4:.1f}\" "
        "text-anchor=\"end\" font-size=\"11\">{5}</text>",
        left, right, a.py(value), left - 6, a.py(value) + 4,
        log_y ? tick_label(value, std::pow(10.0, std::floor(std::log10(value)))) : tick_label(value, y_spacing));
  }
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"12\">{}</text>", (left + right) / 2,
                     Axes::kHeight - 8, escape(x_label));
  svg += fmt::format(
      "<text x=\"14\" y=\"{0}\" text-anchor=\"middle\" font-size=\"12\" transform=\"rotate(-90 14 {0})\">{1}</text>",
      (top + bottom) / 2, escape(y_label));
  for (size_t i = 0; i < series.size(); ++i) {
    const Series& s = series[i];
    // Long runs are thinned to about 1500 points a line: the page stays small.
    const size_t stride = std::max<size_t>(1, s.points.size() / 1500);
    std::string points;
    size_t drawn = 0;
    for (size_t k = 0; k < s.points.size(); k += stride) {
      const auto& [x, y] = s.points[k];
      if (!drawable(y, log_y)) continue;
      points += fmt::format("{:.1f},{:.1f} ", a.px(x), a.py(y));
      ++drawn;
    }
    if (drawn == 1) {
      const auto& [x, y] = s.points.front();
      svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"><title>{}</title></circle>", a.px(x),
                         a.py(y), s.color, escape(s.name));
    } else if (drawn > 1) {
      svg += fmt::format(
          "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"><title>{}</title></polyline>",
          s.color, points, escape(s.name));
    }
    const double ly = top + 14 + 18 * static_cast<double>(i);
    svg += fmt::format(
        "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2}\" y2=\"{2}\" stroke=\"{3}\" stroke-width=\"3\"/><text x=\"{4}\" "
        "y=\"{5}\" font-size=\"12\">{6}</text>",
        right + 10, right + 30, ly, s.color, right + 35, ly + 4, escape(s.name));
  }
  for (const Marker& m : markers) {
    if (!drawable(m.y, log_y)) continue;
    svg += fmt::format(
        "<circle class=\"skip\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"none\" stroke=\"#000\"><title>{}</title>"
        "</circle>",
        a.px(m.x), a.py(m.y), escape(m.label));
  }
  if (!markers.empty()) {
    const double ly = top + 14 + 18 * static_cast<double>(series.size());
    svg += fmt::format(
        "<circle cx=\"{}\" cy=\"{}\" r=\"4\" fill=\"none\" stroke=\"#000\"/><text x=\"{}\" y=\"{}\" "
        "font-size=\"12\">skipped step</text>",
        right + 20, ly, right + 35, ly + 4);
  }
  return svg + "</svg></figure>\n";
}

struct Bar {
  std::string label;
  const char* color;
  double value;
  std::string text;  // what is written beside the bar
};

// Horizontal bars, one per run.
std::string bar_chart(const std::string& id, const std::string& title, const std::vector<Bar>& bars) {
  const double width = 560, row = 28, left = 90, right_text = 150;
  const double height = 16 + row * static_cast<double>(bars.size());
  double most = 0;
  for (const Bar& b : bars) most = std::max(most, std::isfinite(b.value) ? b.value : 0.0);
  std::string svg = fmt::format(
      "<figure><figcaption>{}</figcaption><svg id=\"{}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" "
      "height=\"{}\" viewBox=\"0 0 {} {}\" role=\"img\">",
      escape(title), id, width, height, width, height);
  for (size_t i = 0; i < bars.size(); ++i) {
    const Bar& b = bars[i];
    const double y = 8 + row * static_cast<double>(i);
    const double w = most > 0 && std::isfinite(b.value) ? b.value / most * (width - left - right_text) : 0;
    svg += fmt::format(
        "<text x=\"{0}\" y=\"{1}\" text-anchor=\"end\" font-size=\"12\">{2}</text><rect x=\"{3}\" y=\"{4}\" "
        "width=\"{5:.1f}\" height=\"{6}\" fill=\"{7}\"><title>{8}</title></rect><text x=\"{9:.1f}\" y=\"{1}\" "
        "font-size=\"12\">{8}</text>",
        left - 8, y + 14, escape(b.label), left, y, std::max(w, 1.0), row - 8, b.color, escape(b.text),
        left + std::max(w, 1.0) + 6);
  }
  return svg + "</svg></figure>\n";
}

const char* category_color(const std::string& category) {
  static const std::map<std::string, const char*> colors = {
      {"parameters", "#4e79a7"},      {"master_weights", "#a0cbe8"}, {"gradients", "#f28e2b"},
      {"optimizer_state", "#59a14f"}, {"activations", "#e15759"},    {"autocast_cache", "#b07aa1"},
      {"workspace", "#9c755f"},       {"data", "#bab0ac"},           {"other", "#79706e"}};
  auto it = colors.find(category);
  return it == colors.end() ? "#cccccc" : it->second;
}

// The memory ledger at the training peak, one stacked bar per run, and a
// tick where the theory's parameters + gradients + masters + optimizer state end.
std::string ledger_chart(const std::vector<RunRecord>& runs) {
  std::vector<std::pair<std::string, nlohmann::json>> ledgers;
  for (const RunRecord& r : runs) {
    if (!r.summary.is_object() || !r.summary.contains("memory_ledger") || !r.summary["memory_ledger"].is_object())
      continue;
    nlohmann::json ledger = r.summary["memory_ledger"];
    // The dataset held in memory is the same for every run and would dwarf
    // the rest: the bar shows the batches' share of "data" only.
    const double dataset = number_or(r.summary, "dataset_bytes", 0);
    if (ledger.contains("at_peak") && ledger["at_peak"].is_object() && ledger["at_peak"].contains("data") &&
        ledger["at_peak"]["data"].is_number()) {
      ledger["at_peak"]["data"] = std::max(0.0, ledger["at_peak"]["data"].get<double>() - dataset);
    }
    ledgers.emplace_back(r.label, ledger);
  }
  if (ledgers.empty()) return "";
  double most = 0;
  // The theory's four categories first, so its tick ends where they do.
  std::vector<std::string> categories = {"parameters", "master_weights", "gradients", "optimizer_state"};
  for (const auto& [label, ledger] : ledgers) {
    double total = 0, theory = 0;
    if (ledger.contains("at_peak") && ledger["at_peak"].is_object()) {
      for (const auto& [category, bytes] : ledger["at_peak"].items()) {
        if (!bytes.is_number()) continue;
        total += bytes.get<double>();
        if (std::find(categories.begin(), categories.end(), category) == categories.end())
          categories.push_back(category);
      }
    }
    if (ledger.contains("theory") && ledger["theory"].is_object()) {
      for (const auto& [category, bytes] : ledger["theory"].items())
        theory += bytes.is_number() ? bytes.get<double>() : 0;
    }
    most = std::max({most, total, theory});
  }
  const double width = 760, row = 34, left = 90, right = 170;
  const double height = 40 + row * static_cast<double>(ledgers.size()) + 20 * std::ceil(categories.size() / 4.0);
  std::string svg = fmt::format(
      "<figure><figcaption>Memory ledger at the training peak (bytes by category, the dataset held in memory left "
      "out; the black tick is the theory of parameters + gradients + master weights + optimizer "
      "state)</figcaption><svg id=\"plot-ledger\" "
      "xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" role=\"img\">",
      width, height);
  const double scale = most > 0 ? (width - left - right) / most : 0;
  for (size_t i = 0; i < ledgers.size(); ++i) {
    const auto& [label, ledger] = ledgers[i];
    const double y = 10 + row * static_cast<double>(i);
    svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\" font-size=\"12\">{}</text>", left - 8, y + 16,
                       escape(label));
    double x = left, total = 0, theory = 0;
    for (const std::string& category : categories) {
      if (!ledger.contains("at_peak") || !ledger["at_peak"].is_object() || !ledger["at_peak"].contains(category))
        continue;
      const nlohmann::json& bytes = ledger["at_peak"][category];
      if (!bytes.is_number() || bytes.get<double>() <= 0) continue;
      const double b = bytes.get<double>();
      svg += fmt::format(
          "<rect x=\"{:.1f}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\"><title>{}: {}</title></rect>", x, y,
          b * scale, row - 12, category_color(category), escape(category), mib(b));
      x += b * scale;
      total += b;
    }
    if (ledger.contains("theory") && ledger["theory"].is_object()) {
      for (const auto& [category, bytes] : ledger["theory"].items())
        theory += bytes.is_number() ? bytes.get<double>() : 0;
      const double tx = left + theory * scale;
      svg += fmt::format(
          "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#000\" stroke-width=\"2\"><title>theory "
          "{3}</title></line>",
          tx, y - 3, y + row - 9, mib(theory));
    }
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" font-size=\"12\">{} (theory {})</text>", std::max(x, left) + 6,
                       y + 16, mib(total), mib(theory));
  }
  for (size_t k = 0; k < categories.size(); ++k) {
    const double lx = left + 150 * static_cast<double>(k % 4);
    const double ly = 20 + row * static_cast<double>(ledgers.size()) + 20 * static_cast<double>(k / 4);
    svg += fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{}\" y=\"{}\" "
        "font-size=\"12\">{}</text>",
        lx, ly - 10, category_color(categories[k]), lx + 16, ly, escape(categories[k]));
  }
  return svg + "</svg></figure>\n";
}

// ---------------------------------------------------------------- the page's parts

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
      const std::string note = text_or(row, "flag");
      html += fmt::format(
          "<tr{}><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
          note.empty() ? "" : " class=\"flag\"", escape(text_or(row, "module")), escape(text_or(row, "op")),
          escape(text_or(row, "policy")), escape(text_or(row, "inputs")), escape(text_or(row, "compute")),
          escape(text_or(row, "output")), number_or(row, "calls", 0), escape(note));
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

}  // namespace

std::string render_report_html(const ReportPage& page) {
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
  html += "<h2>Summary</h2>\n" + summary_table(runs);

  std::vector<Series> losses, scales, norms, lr;
  std::vector<Marker> skipped;
  std::vector<Series> held_out;
  bool any_language_model = false;
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunRecord& r = runs[i];
    losses.push_back(step_series(r, "loss", i));
    lr.push_back(step_series(r, "lr", i));
    Series norm = step_series(r, "grad_norm", i);
    if (!norm.points.empty()) norms.push_back(norm);
    // The scale matters where a scaler ran: a run whose scale never left 1 had none.
    Series scale = step_series(r, "scale", i);
    const bool scaled = std::any_of(scale.points.begin(), scale.points.end(), [](auto& p) { return p.second != 1.0; });
    if (scaled) scales.push_back(scale);
    for (const nlohmann::json& m : r.steps) {
      if (flag_or(m, "skipped", false))
        skipped.push_back({m["step"].get<double>(), number_or(m, "scale", NAN),
                           fmt::format("{}: step {} skipped (inf/NaN gradients)", r.label, m["step"].get<int64_t>())});
    }
    Series e{r.label, run_color(i, r.label), {}};
    for (const nlohmann::json& ev : r.evals) {
      const bool lm = ev.contains("perplexity");
      any_language_model |= lm;
      e.points.emplace_back(number_or(ev, "step", NAN),
                            lm ? number_or(ev, "loss", NAN) : number_or(ev, "accuracy", NAN));
    }
    if (!e.points.empty()) held_out.push_back(e);
  }
  html += "<h2>Training</h2>\n";
  html += line_chart("plot-loss", "Training loss per optimizer step", "step", "loss", losses);
  if (!scales.empty()) {
    html += line_chart("plot-scale", "Loss scale (GradScaler), skipped steps circled", "step", "scale (log)", scales,
                       skipped, /*log_y=*/true);
  } else {
    html +=
        "<p id=\"no-scale\">No run used loss scaling (fp32 and bf16 need none), so there is no scale to draw.</p>\n";
  }
  if (!norms.empty()) {
    html += line_chart("plot-grad-norm", "Gradient norm (unscaled, before clipping)", "step", "L2 norm", norms);
  } else {
    html += "<p>No gradient norms were logged (train with --clip or --report to record them).</p>\n";
  }
  html += line_chart("plot-lr", "Learning rate", "step", "lr", lr);
  if (!held_out.empty()) {
    html += line_chart("plot-eval", any_language_model ? "Validation loss (nats/token)" : "Held-out accuracy", "step",
                       any_language_model ? "loss" : "accuracy", held_out);
  }

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
  const std::string dtypes = dtype_report_section(runs);
  if (!dtypes.empty()) html += "<h2>Autocast dtype report</h2>\n" + dtypes;
  const std::string skips = skips_section(runs);
  if (!skips.empty()) html += "<h2>Overflow attribution</h2>\n" + skips;

  html += "<h2>How this was made</h2>\n<ul id=\"commands\">";
  for (const std::string& c : page.commands) html += "<li><code>" + escape(c) + "</code></li>";
  for (const RunRecord& r : runs) {
    if (r.summary.is_object() && r.summary.contains("command") && r.summary["command"].is_string())
      html += "<li>" + escape(r.label) + ": <code>" + escape(r.summary["command"].get<std::string>()) + "</code></li>";
    if (!r.source.empty()) html += "<li>" + escape(r.label) + ": read from <code>" + escape(r.source) + "</code></li>";
  }
  html += "</ul>\n";
  if (page.machine.is_object())
    html += "<p id=\"machine\">Machine: <code>" + escape(page.machine.dump()) + "</code></p>\n";
  if (!page.commit.empty()) html += "<p id=\"commit\">Commit: <code>" + escape(page.commit) + "</code></p>\n";
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
