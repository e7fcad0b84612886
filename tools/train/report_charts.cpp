// The HTML report's drawing: escaping, axis ticks, colours, and the SVG
// line, bar and memory-ledger charts (report.cpp lays out the page).
#include "tools/train/report_charts.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>

namespace mt::tools::report_detail {


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
std::string text_or(const nlohmann::json& j, const char* key, const std::string& fallback) {
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
  // Ticks wider apart than a double holds (the ends of an axis near +-DBL_MAX).
  if (!std::isfinite(spacing) || !(spacing > 0)) return fmt::format("{:.6g}", v);
  if (std::fabs(v) < spacing * 1e-6) return "0";
  const double a = std::fabs(v);
  const int digits = std::max(0, -static_cast<int>(std::floor(std::log10(spacing) + 1e-9)));
  if (a >= 1e6 || digits > 4) {
    const int significant = std::max(1, static_cast<int>(std::ceil(std::log10(a) - std::log10(spacing))) + 1);
    // Up to the 17 digits a double has: ticks one ulp apart at 1e17 still read apart.
    return fmt::format("{:.{}e}", v, std::min(significant, 17) - 1);
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
// Values close together at a large magnitude (1e17 and the next double up)
// make a step below half an ulp, which `t += step` never gets past: a step
// that does not advance stops, with the two ends as the ticks, and no axis
// gets more than kMaxTicks whatever the values.
std::vector<double> nice_ticks(double low, double high, int count) {
  if (!(high > low)) return {low};
  const std::vector<double> ends = {low, high};
  // Halved before subtracting: high - low overflows for values near +-DBL_MAX.
  const double raw = (high / 2 - low / 2) / count * 2, magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (const double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= raw) break;
  }
  if (!std::isfinite(step) || !(step > 0)) return ends;
  std::vector<double> ticks;
  for (double t = std::ceil(low / step) * step; t <= high + step * 1e-9;) {
    ticks.push_back(t);
    const double next = t + step;
    if (!(next > t) || ticks.size() > kMaxTicks) return ends;
    t = next;
  }
  return ticks.empty() ? ends : ticks;
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

struct Axes {
  double x0, x1, y0, y1;
  bool log_y;
  static constexpr double kWidth = 760, kHeight = 300, kLeft = 72, kRight = 150, kTop = 34, kBottom = 44;
  // Where v sits between low and high, 0 to 1; halved before subtracting,
  // since v - low overflows for values near +-DBL_MAX.
  static double fraction(double v, double low, double high) { return (v / 2 - low / 2) / (high / 2 - low / 2); }
  double px(double x) const { return kLeft + fraction(x, x0, x1) * (kWidth - kLeft - kRight); }
  double py(double y) const {
    const double v = log_y ? std::log10(y) : y;
    return kHeight - kBottom - fraction(v, y0, y1) * (kHeight - kTop - kBottom);
  }
};

// `v` moved by `delta`, kept finite: the padding around values near
// +-DBL_MAX stops at the largest double instead of drawing at inf (nan pixels).
double moved_finite(double v, double delta) {
  return std::clamp(v + delta, std::numeric_limits<double>::lowest(), std::numeric_limits<double>::max());
}

bool drawable(double y, bool log_y) { return std::isfinite(y) && (!log_y || y > 0); }

// The range of the finite, drawable values of every series and marker, as
// {x0, x1, y0, y1} (y in log10 when log_y); x0 is inf when there is none.
std::array<double, 4> value_range(const std::vector<Series>& series, const std::vector<Marker>& markers, bool log_y) {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  auto extend = [&](double x, double y) {
    if (!drawable(y, log_y) || !std::isfinite(x)) return;
    const double v = log_y ? std::log10(y) : y;
    x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, v), y1 = std::max(y1, v);
  };
  for (const Series& s : series)
    for (const auto& [x, y] : s.points) extend(x, y);
  for (const Marker& m : markers) extend(m.x, m.y);
  return {x0, x1, y0, y1};
}

// The axes around a finite range: a single value gets a range around it of
// a tenth of itself (or one unit around 0), and y 5% of padding each side.
Axes axes_around(double x0, double x1, double y0, double y1, bool log_y) {
  auto widen = [](double& low, double& high) {
    if (high != low) return;
    const double half = low == 0 ? 0.5 : std::fabs(low) * 0.1;
    low = moved_finite(low, -half), high = moved_finite(high, half);
  };
  widen(x0, x1);
  widen(y0, y1);
  const double pad = (y1 / 2 - y0 / 2) * 0.1;  // 5% of the range, which itself may not fit a double
  return {x0, x1, moved_finite(y0, -pad), moved_finite(y1, pad), log_y};
}

// The plot's frame, its grid lines with tick labels, and the axis labels.
std::string frame_and_grid(const Axes& a, const std::string& x_label, const std::string& y_label) {
  const double left = Axes::kLeft, right = Axes::kWidth - Axes::kRight, top = Axes::kTop,
               bottom = Axes::kHeight - Axes::kBottom;
  std::string svg = fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#fff\" stroke=\"#999\"/>",
                                left, top, right - left, bottom - top);
  const std::vector<double> x_ticks = nice_ticks(a.x0, a.x1, 6);
  const double x_spacing = x_ticks.size() > 1 ? x_ticks[1] - x_ticks[0] : 1.0;
  for (const double t : x_ticks) {
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#eee\"/><text x=\"{0:.1f}\" y=\"{3}\" "
        "text-anchor=\"middle\" font-size=\"11\">{4}</text>",
        a.px(t), top, bottom, bottom + 15, tick_label(t, x_spacing));
  }
  const std::vector<double> y_ticks = a.log_y ? power_of_two_ticks(a.y0, a.y1) : nice_ticks(a.y0, a.y1, 5);
  const double y_spacing = y_ticks.size() > 1 ? y_ticks[1] - y_ticks[0] : 1.0;
  for (const double t : y_ticks) {
    const double value = a.log_y ? std::pow(10.0, t) : t;
    svg += fmt::format(
        "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"#eee\"/><text x=\"{3}\" y=\"{4:.1f}\" "
        "text-anchor=\"end\" font-size=\"11\">{5}</text>",
        left, right, a.py(value), left - 6, a.py(value) + 4,
        a.log_y ? tick_label(value, std::pow(10.0, std::floor(std::log10(value)))) : tick_label(value, y_spacing));
  }
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"12\">{}</text>", (left + right) / 2,
                     Axes::kHeight - 8, escape(x_label));
  svg += fmt::format(
      "<text x=\"14\" y=\"{0}\" text-anchor=\"middle\" font-size=\"12\" transform=\"rotate(-90 14 {0})\">{1}</text>",
      (top + bottom) / 2, escape(y_label));
  return svg;
}

// One series as a polyline (a circle when one point is drawable) and its
// legend entry in row `legend_row`.
std::string series_line(const Axes& a, const Series& s, size_t legend_row) {
  // Long runs are thinned to about 1500 points a line: the page stays small.
  const size_t stride = std::max<size_t>(1, s.points.size() / 1500);
  std::string points, svg;
  size_t drawn = 0;
  for (size_t k = 0; k < s.points.size(); k += stride) {
    const auto& [x, y] = s.points[k];
    if (!drawable(y, a.log_y)) continue;
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
  const double right = Axes::kWidth - Axes::kRight, ly = Axes::kTop + 14 + 18 * static_cast<double>(legend_row);
  svg += fmt::format(
      "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2}\" y2=\"{2}\" stroke=\"{3}\" stroke-width=\"3\"/><text x=\"{4}\" "
      "y=\"{5}\" font-size=\"12\">{6}</text>",
      right + 10, right + 30, ly, s.color, right + 35, ly + 4, escape(s.name));
  return svg;
}

// The markers (skipped steps) as circles with their label on hover, and
// one legend entry for them all in row `legend_row`.
std::string skip_markers(const Axes& a, const std::vector<Marker>& markers, size_t legend_row) {
  std::string svg;
  for (const Marker& m : markers) {
    if (!drawable(m.y, a.log_y)) continue;
    svg += fmt::format(
        "<circle class=\"skip\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"none\" stroke=\"#000\"><title>{}</title>"
        "</circle>",
        a.px(m.x), a.py(m.y), escape(m.label));
  }
  if (!markers.empty()) {
    const double right = Axes::kWidth - Axes::kRight, ly = Axes::kTop + 14 + 18 * static_cast<double>(legend_row);
    svg += fmt::format(
        "<circle cx=\"{}\" cy=\"{}\" r=\"4\" fill=\"none\" stroke=\"#000\"/><text x=\"{}\" y=\"{}\" "
        "font-size=\"12\">skipped step</text>",
        right + 20, ly, right + 35, ly + 4);
  }
  return svg;
}

// A line chart: every series on one pair of axes, a legend on the right,
// markers (skipped steps) as circles with their label on hover.
std::string line_chart(const std::string& id, const std::string& title, const std::string& x_label,
                       const std::string& y_label, const std::vector<Series>& series,
                       const std::vector<Marker>& markers, bool log_y) {
  std::string svg = fmt::format(
      "<figure><figcaption>{}</figcaption><svg id=\"{}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" "
      "height=\"{}\" viewBox=\"0 0 {} {}\" role=\"img\">",
      escape(title), id, Axes::kWidth, Axes::kHeight, Axes::kWidth, Axes::kHeight);
  const auto [x0, x1, y0, y1] = value_range(series, markers, log_y);
  if (!std::isfinite(x0)) return svg + "<text x=\"20\" y=\"40\">no finite values to draw</text></svg></figure>";
  const Axes a = axes_around(x0, x1, y0, y1, log_y);
  svg += frame_and_grid(a, x_label, y_label);
  for (size_t i = 0; i < series.size(); ++i) svg += series_line(a, series[i], i);
  svg += skip_markers(a, markers, series.size());
  return svg + "</svg></figure>\n";
}

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
      {"fp8_activations", "#ff9da7"}, {"fp8_weight_casts", "#edc948"}, {"fp8_state", "#76b7b2"},
      {"workspace", "#9c755f"},       {"data", "#bab0ac"},           {"other", "#79706e"}};
  auto it = colors.find(category);
  return it == colors.end() ? "#cccccc" : it->second;
}

// The memory ledger at the training peak, one stacked bar per run, and a
// tick where the theory's parameters + gradients + masters + optimizer state
// (+ FP8's saved tensors and state) end.
using Ledger = std::pair<std::string, nlohmann::json>;  // a run's label and its memory ledger

// The runs that carry a memory ledger. The dataset held in memory is the
// same for every run and would dwarf the rest: "data" keeps the batches'
// share only.
std::vector<Ledger> peak_ledgers(const std::vector<RunRecord>& runs) {
  std::vector<Ledger> ledgers;
  for (const RunRecord& r : runs) {
    if (!r.summary.is_object() || !r.summary.contains("memory_ledger") || !r.summary["memory_ledger"].is_object())
      continue;
    nlohmann::json ledger = r.summary["memory_ledger"];
    const double dataset = number_or(r.summary, "dataset_bytes", 0);
    if (ledger.contains("at_peak") && ledger["at_peak"].is_object() && ledger["at_peak"].contains("data") &&
        ledger["at_peak"]["data"].is_number()) {
      ledger["at_peak"]["data"] = std::max(0.0, ledger["at_peak"]["data"].get<double>() - dataset);
    }
    ledgers.emplace_back(r.label, ledger);
  }
  return ledgers;
}

// The sum of the numbers in ledger[part] (0 when it is not an object).
double ledger_total(const nlohmann::json& ledger, const char* part) {
  double total = 0;
  if (ledger.contains(part) && ledger[part].is_object()) {
    for (const auto& [category, bytes] : ledger[part].items()) total += bytes.is_number() ? bytes.get<double>() : 0;
  }
  return total;
}

// Every category at the peak in the bars' order: the theory's four
// categories first, so its tick ends where they do, then FP8's, then the
// rest as they come.
std::vector<std::string> ledger_categories(const std::vector<Ledger>& ledgers) {
  std::vector<std::string> categories = {"parameters",      "master_weights",   "gradients", "optimizer_state",
                                         "fp8_activations", "fp8_weight_casts", "fp8_state"};
  for (const auto& [label, ledger] : ledgers) {
    if (!ledger.contains("at_peak") || !ledger["at_peak"].is_object()) continue;
    for (const auto& [category, bytes] : ledger["at_peak"].items()) {
      if (bytes.is_number() && std::find(categories.begin(), categories.end(), category) == categories.end())
        categories.push_back(category);
    }
  }
  return categories;
}

// One run's stacked bar at height y, `scale` pixels a byte: its label, a
// segment per category, the theory's tick and the totals.
std::string ledger_bar(const Ledger& run, const std::vector<std::string>& categories, double y, double scale) {
  const double row = 34, left = 90;
  const auto& [label, ledger] = run;
  std::string svg = fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\" font-size=\"12\">{}</text>", left - 8,
                                y + 16, escape(label));
  double x = left, total = 0;
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
  const double theory = ledger_total(ledger, "theory");
  if (ledger.contains("theory") && ledger["theory"].is_object()) {
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#000\" stroke-width=\"2\"><title>theory "
        "{3}</title></line>",
        left + theory * scale, y - 3, y + row - 9, mib(theory));
  }
  return svg + fmt::format("<text x=\"{:.1f}\" y=\"{}\" font-size=\"12\">{} (theory {})</text>", std::max(x, left) + 6,
                           y + 16, mib(total), mib(theory));
}

std::string ledger_chart(const std::vector<RunRecord>& runs) {
  const std::vector<Ledger> ledgers = peak_ledgers(runs);
  if (ledgers.empty()) return "";
  const std::vector<std::string> categories = ledger_categories(ledgers);
  double most = 0;
  for (const auto& [label, ledger] : ledgers)
    most = std::max({most, ledger_total(ledger, "at_peak"), ledger_total(ledger, "theory")});
  const double width = 760, row = 34, left = 90, right = 170;
  const double height = 40 + row * static_cast<double>(ledgers.size()) + 20 * std::ceil(categories.size() / 4.0);
  std::string svg = fmt::format(
      "<figure><figcaption>Memory ledger at the training peak (bytes by category, the dataset held in memory left "
      "out; the black tick is the theory of parameters + gradients + master weights + optimizer "
      "state, and FP8 training's saved tensors and state)</figcaption><svg id=\"plot-ledger\" "
      "xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" role=\"img\">",
      width, height);
  const double scale = most > 0 ? (width - left - right) / most : 0;
  for (size_t i = 0; i < ledgers.size(); ++i)
    svg += ledger_bar(ledgers[i], categories, 10 + row * static_cast<double>(i), scale);
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

}  // namespace mt::tools::report_detail
