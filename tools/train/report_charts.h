// What report.cpp draws with (report_charts.cpp): HTML escaping, fields of
// someone else's log read with fallbacks, and the SVG charts.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tools/train/report.h"

namespace mt::tools::report_detail {

std::string escape(const std::string& text);

// A log is someone else's file: every field is read through these, which
// give the fallback for a missing key or a value of another type.
double number_or(const nlohmann::json& j, const char* key, double fallback);
std::string text_or(const nlohmann::json& j, const char* key, const std::string& fallback = "");
bool flag_or(const nlohmann::json& j, const char* key, bool fallback);

// The number with every digit a double needs: what data-value carries.
std::string exact(double v);
std::string mib(double bytes);
const char* run_color(size_t i, const std::string& label);

// Axis ticks at 1, 2 or 5 times a power of ten, about `count` of them over
// [low, high]; never more than kMaxTicks, and the two ends when no such step
// advances at the values' magnitude (1e17 next to 1e17 + 16).
constexpr size_t kMaxTicks = 50;
std::vector<double> nice_ticks(double low, double high, int count);

struct Series {
  std::string name;
  const char* color;
  std::vector<std::pair<double, double>> points;  // (x, y); non-finite y are left out when drawn
};

struct Marker {
  double x, y;
  std::string label;
};

// A line chart: every series on one pair of axes, a legend on the right,
// markers (skipped steps) as circles with their label on hover.
std::string line_chart(const std::string& id, const std::string& title, const std::string& x_label,
                       const std::string& y_label, const std::vector<Series>& series,
                       const std::vector<Marker>& markers = {}, bool log_y = false);

struct Bar {
  std::string label;
  const char* color;
  double value;
  std::string text;  // what is written beside the bar
};
// Horizontal bars, one per run.
std::string bar_chart(const std::string& id, const std::string& title, const std::vector<Bar>& bars);

// The memory ledger at the training peak, one stacked bar per run, and a
// tick where the theory's parameters + gradients + masters + optimizer state end.
std::string ledger_chart(const std::vector<RunRecord>& runs);

}  // namespace mt::tools::report_detail
