// The HTML report's reader and page (tools/train/report.h), check-data's scan
// (tools/data/check.h) and the trainer's debugging aids end to end. The page
// itself is loaded in Chromium by tests/tools/cli/report_in_browser.sh.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "runtime/error.h"
#include "tools/data/check.h"
#include "tools/train/report.h"
#include "tools/train/report_charts.h"
#include "tools/train/trainer.h"

using namespace mt;
using Catch::Contains;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("mixtape_report_test_" + name)).string();
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

const char* const kLog =
    R"({"step":1,"epoch":0,"batch":0,"loss":2.5,"lr":0.001,"scale":65536,"samples_per_s":100,"memory_bytes":10,"peak_memory_bytes":20,"skipped":true}
{"step":2,"epoch":0,"batch":1,"loss":2.25,"lr":0.001,"scale":32768,"samples_per_s":110,"memory_bytes":10,"peak_memory_bytes":20,"skipped":false,"grad_norm":1.5}
{"eval":{"step":2,"loss":2.0,"accuracy":0.25}}
{"summary":{"steps":2,"skipped_steps":1,"test_accuracy":0.25,"samples_per_s":123.456789,"peak_memory_bytes":4096,"final_scale":32768,"config":{"precision":"fp16","model":"mlp","device":"cpu"},"command":"mixtape train --label '<script>alert(1)</script>'"}}
)";

}  // namespace

TEST_CASE("a metrics log is read into steps, evaluations and the summary, labelled by its precision", "[report]") {
  const std::string path = temp_path("ok.jsonl");
  write_text(path, kLog);
  const tools::RunRecord run = tools::read_metrics_log(path);
  CHECK(run.steps.size() == 2);
  CHECK(run.evals.size() == 1);
  CHECK(run.summary.is_object());
  CHECK(run.label == "fp16");
  CHECK(run.problem.empty());
  std::remove(path.c_str());
}

// Bug caught: a cut or corrupt log made the whole report fail (or drew garbage)
// instead of drawing what came before and saying where it stopped.
TEST_CASE("a log cut off mid-line or holding a non-JSON line is drawn up to there, and says where", "[report]") {
  const std::string log = kLog;
  const std::string cut = temp_path("cut.jsonl");
  write_text(cut, log.substr(0, log.find("{\"eval\"") + 10));  // the eval line cut after 10 bytes
  const tools::RunRecord a = tools::read_metrics_log(cut);
  CHECK(a.steps.size() == 2);
  CHECK_FALSE(a.summary.is_object());
  CHECK_THAT(a.problem, Contains("line 3 is cut off mid-line") && Contains("2 line(s) before it"));

  const std::string bad = temp_path("bad.jsonl");
  write_text(bad, log.substr(0, log.find("{\"eval\"")) + "loss went up\n" + log.substr(log.find("{\"eval\"")));
  const tools::RunRecord b = tools::read_metrics_log(bad);
  CHECK(b.steps.size() == 2);
  CHECK_THAT(b.problem, Contains("line 3 is not JSON"));
  // The page still renders, with the problem on it.
  tools::ReportPage page;
  page.runs = {b};
  CHECK_THAT(tools::render_report_html(page), Contains("class=\"problem\"") && Contains("plot-loss"));
  std::remove(cut.c_str());
  std::remove(bad.c_str());
}

TEST_CASE("a missing, empty, foreign or non-regular metrics file is a clear error", "[report][errors]") {
  CHECK_THROWS_WITH(tools::read_metrics_log(temp_path("missing.jsonl")), Contains("does not exist"));
  const std::string empty = temp_path("empty.jsonl");
  write_text(empty, "");
  CHECK_THROWS_WITH(tools::read_metrics_log(empty), Contains("holds no mixtape metrics"));
  const std::string foreign = temp_path("foreign.jsonl");
  write_text(foreign, "{\"hello\": 1}\n");
  CHECK_THROWS_WITH(tools::read_metrics_log(foreign), Contains("not a mixtape metrics record"));
  CHECK_THROWS_WITH(tools::read_metrics_log(std::filesystem::temp_directory_path().string()),
                    Contains("not a regular file"));
  std::remove(empty.c_str());
  std::remove(foreign.c_str());
}

// Bugs caught: a rounded number in data-value (the browser test compares it
// with the log), markup from a log or a command line landing in the page
// unescaped, skipped steps not marked on the scale plot.
TEST_CASE("the page carries exact values, escapes what it quotes and marks skipped steps", "[report]") {
  const std::string path = temp_path("page.jsonl");
  write_text(path, kLog);
  tools::ReportPage page;
  page.runs = {tools::read_metrics_log(path)};
  page.commands = {"mixtape report <x> & 'y'"};
  const std::string html = tools::render_report_html(page);
  CHECK_THAT(html, Contains("data-metric=\"samples_per_s\" data-value=\"123.456789\""));
  CHECK_THAT(html, Contains("data-metric=\"final_loss\" data-value=\"2.25\""));
  CHECK_THAT(html, Contains("data-run=\"fp16\""));
  CHECK(html.find("<script>alert") == std::string::npos);
  CHECK_THAT(html, Contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
  CHECK_THAT(html, Contains("mixtape report &lt;x&gt; &amp; &#39;y&#39;"));
  CHECK_THAT(html, Contains("class=\"skip\""));
  for (const char* id :
       {"plot-loss", "plot-scale", "plot-grad-norm", "plot-lr", "plot-eval", "plot-throughput", "plot-memory"}) {
    CHECK_THAT(html, Contains(std::string("id=\"") + id + "\""));
  }
  // The only address in the page is the SVG namespace, which is never fetched.
  std::string rest = html;
  for (size_t at; (at = rest.find("http://www.w3.org/2000/svg")) != std::string::npos;) rest.erase(at, 26);
  CHECK(rest.find("http") == std::string::npos);
  CHECK(html.find("src=") == std::string::npos);  // nothing fetched
  std::remove(path.c_str());
}

namespace {

// The page of one run from the metrics log at `path` (removed after), read
// to its end.
tools::ReportPage page_of_log(const std::string& path) {
  tools::ReportPage page;
  page.runs = {tools::read_metrics_log(path)};
  std::remove(path.c_str());
  REQUIRE(page.runs[0].problem.empty());
  return page;
}

}  // namespace

// Catches: --fp8-stats records ending the log's reading (they once did), and
// a heat map cell that names another operand's share or leaves markup unescaped.
TEST_CASE("fp8 statistics records are read and drawn as a heat map per operand", "[report][fp8]") {
  const std::string path = temp_path("fp8.jsonl");
  write_text(path,
             "{\"step\":1,\"epoch\":0,\"batch\":0,\"loss\":2.0,\"lr\":0.001,\"scale\":1}\n"
             "{\"fp8\":{\"step\":1,\"recipe\":\"delayed\",\"tensors\":[{\"parameter\":\"fc<2>.weight\",\"role\":"
             "\"input\",\"saturated\":0.125,\"flushed\":0.0},{\"parameter\":\"fc<2>.weight\",\"role\":"
             "\"grad_output\",\"saturated\":0.0,\"flushed\":0.25}]}}\n"
             "{\"step\":2,\"epoch\":0,\"batch\":1,\"loss\":1.5,\"lr\":0.001,\"scale\":1}\n");
  const tools::ReportPage page = page_of_log(path);
  CHECK(page.runs[0].steps.size() == 2);  // the step after the fp8 record is read too
  REQUIRE(page.runs[0].fp8.size() == 1);
  const std::string html = tools::render_report_html(page);
  CHECK_THAT(html, Contains("<table class=\"fp8\""));
  CHECK_THAT(html, Contains("<td>fc&lt;2&gt;.weight input</td><td style=\"background:rgb(255,128,128)\" "
                            "data-clipped=\"0.125\" data-flushed=\"0\">12%</td>"));
  CHECK_THAT(html, Contains("<td>fc&lt;2&gt;.weight grad_output</td><td style=\"background:rgb(128,128,255)\" "
                            "data-clipped=\"0\" data-flushed=\"0.25\">25%</td>"));
}

// Catches: --fp8-shadow records ending the log's reading, and an error
// drawn in another Linear's row or step's column, or a NaN error (logged as
// null) drawn as a number.
TEST_CASE("fp8 shadow records are read and drawn per Linear and step", "[report][fp8]") {
  const std::string path = temp_path("fp8_shadow.jsonl");
  write_text(
      path,
      "{\"step\":1,\"epoch\":0,\"batch\":0,\"loss\":2.0,\"lr\":0.001,\"scale\":1}\n"
      "{\"fp8_shadow\":{\"step\":1,\"recipe\":\"current\",\"errors\":{\"fc1.weight\":0.0125,\"fc<2>.weight\":null}}}\n"
      "{\"fp8_shadow\":{\"step\":2,\"recipe\":\"current\",\"errors\":{\"fc<2>.weight\":0.5}}}\n"
      "{\"step\":2,\"epoch\":0,\"batch\":1,\"loss\":1.5,\"lr\":0.001,\"scale\":1}\n");
  const tools::ReportPage page = page_of_log(path);
  CHECK(page.runs[0].steps.size() == 2);  // the step after the fp8_shadow records is read too
  REQUIRE(page.runs[0].fp8_shadow.size() == 2);
  const std::string html = tools::render_report_html(page);
  CHECK_THAT(html, Contains("<table class=\"fp8-shadow\""));
  CHECK_THAT(html, Contains("<tr><td>fc1.weight</td><td>0.0125</td><td></td></tr>"));
  CHECK_THAT(html, Contains("<tr><td>fc&lt;2&gt;.weight</td><td>NaN</td><td>0.5</td></tr>"));
}

// Bugs caught: a NaN pixel or an out-of-range label passing unnoticed, the
// first-index lists pointing at the wrong samples.
TEST_CASE("check-data counts non-finite inputs, out-of-range targets and empty samples with their indices",
          "[report][data]") {
  data::TensorDataset d;
  std::vector<float> x(10 * 4);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7);
  x[3 * 4 + 1] = NAN;
  x[3 * 4 + 2] = INFINITY;
  for (int i = 0; i < 4; ++i) x[7 * 4 + i] = 0.5f;  // sample 7 is blank
  d.inputs = from_vector(x, {10, 4});
  d.targets = from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 12, 6, 7, -1, 9}, {10});
  d.classes = 10;
  const data::DataCheck c = data::check_dataset(d);
  CHECK(c.samples == 10);
  CHECK(c.nonfinite_values == 2);
  CHECK(c.nonfinite_samples == 1);
  CHECK(c.first_nonfinite == std::vector<int64_t>{3});
  CHECK(c.bad_targets == 2);
  CHECK(c.first_bad_targets == std::vector<int64_t>{5, 8});
  CHECK(c.empty_samples == 1);
  CHECK(c.first_empty == std::vector<int64_t>{7});
  CHECK_FALSE(c.clean());
  CHECK_THAT(data::describe(c, 10), Contains("2 targets outside 0..9") && Contains("first bad targets: samples 5, 8"));
  // The padding targets of text (ignore_index) are not out of range.
  d.targets = from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, -100, 9}, {10});
  CHECK(data::check_dataset(d).bad_targets == 0);
}

// Bug caught: --report writing nothing when training stopped early, or a
// run whose page lacks its own numbers.
TEST_CASE("train --report writes the page of the run, with the gradient norm measured without clipping",
          "[report][e2e]") {
  tools::TrainConfig c;
  c.model = "mlp";
  c.data.dataset = "synthetic";
  c.precision.mode = tools::Precision::Fp16;
  c.max_steps = 6;
  c.batch = 64;
  c.data.train_limit = 512;
  c.data.test_limit = 64;
  c.report.progress = false;
  c.report.html = temp_path("run.html");
  std::FILE* sink = std::fopen("/dev/null", "w");
  const tools::TrainSummary s = tools::train(c, sink);
  std::fclose(sink);
  std::ifstream in(c.report.html);
  const std::string html{std::istreambuf_iterator<char>(in), {}};
  CHECK_THAT(html, Contains("plot-grad-norm") && Contains("plot-scale") && Contains("plot-ledger"));
  CHECK_THAT(html, Contains(fmt::format("data-metric=\"steps\" data-value=\"{}\"", s.steps)));
  size_t norms = 0;
  for (const nlohmann::json& r : s.records) norms += r.contains("grad_norm") && r["grad_norm"].get<double>() > 0;
  CHECK(norms == static_cast<size_t>(s.steps - s.skipped_steps));
  CHECK(norms >= 1);
  std::remove(c.report.html.c_str());
}

// Bug caught: a log someone else wrote, with fields of the wrong type (a
// number where the page expects text, a string for "skipped", a config that
// is not an object), made nlohmann's value() throw its own type_error out of
// `mixtape report` instead of drawing what is valid.
TEST_CASE("fields of the wrong type in a log are drawn as unknown, never thrown", "[report][errors]") {
  const std::string path = temp_path("types.jsonl");
  write_text(path,
             R"({"step":1,"loss":2.5,"scale":"big","skipped":"yes"}
{"dtype_report":[{"module":5,"op":["linear"],"calls":"many","flag":null}, 7]}
{"summary":{"steps":"one","config":"fp16","device":3,"memory_ledger":{"at_peak":[1,2],"theory":"none"}}}
)");
  tools::ReportPage page;
  page.runs = {tools::read_metrics_log(path)};
  std::string html;
  REQUIRE_NOTHROW(html = tools::render_report_html(page));
  CHECK_THAT(html, Contains("plot-loss") && Contains("class=\"dtypes\""));
  std::remove(path.c_str());
}

namespace {

// The points="..." attributes of the page's polylines and circles' centres.
std::vector<std::string> drawn_coordinates(const std::string& html) {
  std::vector<std::string> out;
  for (const std::string attribute : {"points=\"", "cx=\"", "cy=\"", "x1=\"", "y1=\""}) {
    for (size_t at = html.find(attribute); at != std::string::npos; at = html.find(attribute, at + 1)) {
      const size_t begin = at + attribute.size();
      out.push_back(html.substr(begin, html.find('"', begin) - begin));
    }
  }
  return out;
}

}  // namespace

// Bug caught: losses 1e17, 1.0000000000000002e17, 1e17 (or steps near 2^60)
// made a tick step below half an ulp, and `t += step` looped, appending the
// same tick until memory ran out.
TEST_CASE("values one ulp apart at a large magnitude give a bounded axis, never an endless tick loop",
          "[report][errors]") {
  using tools::report_detail::kMaxTicks;
  using tools::report_detail::nice_ticks;
  const double two_to_60 = std::ldexp(1.0, 60);
  for (const auto& [low, high] : std::vector<std::pair<double, double>>{
           {1e17, std::nextafter(1e17, INFINITY)}, {two_to_60, two_to_60 + 1024}, {-1e300, 1e300}}) {
    INFO(low << " .. " << high);
    const std::vector<double> ticks = nice_ticks(low, high, 5);
    CHECK(ticks.size() >= 2);
    CHECK(ticks.size() <= kMaxTicks);
    for (size_t i = 1; i < ticks.size(); ++i) CHECK(ticks[i] > ticks[i - 1]);
  }
  const std::string path = temp_path("close.jsonl");
  write_text(path, R"({"step":1152921504606846976,"loss":1e17,"lr":0.001}
{"step":1152921504606847232,"loss":1.0000000000000002e17,"lr":0.001}
{"step":1152921504606847488,"loss":1e17,"lr":0.001}
)");
  tools::ReportPage page;
  page.runs = {tools::read_metrics_log(path)};
  const std::string html = tools::render_report_html(page);
  CHECK_THAT(html, Contains("plot-loss"));
  CHECK(html.size() < 200000);
  std::remove(path.c_str());
}

// Bug caught: the 5% padding around values near +-DBL_MAX overflowed to inf,
// and every point of the line was drawn at nan.
TEST_CASE("values near plus and minus DBL_MAX draw finite coordinates, never nan", "[report][errors]") {
  const std::string path = temp_path("huge.jsonl");
  write_text(path, R"({"step":1,"loss":1.7976931348623157e308,"lr":1.7976931348623157e308}
{"step":2,"loss":-1.7976931348623157e308,"lr":1.7976931348623157e308}
{"step":1.7976931348623157e308,"loss":0,"lr":1.7976931348623157e308}
)");
  tools::ReportPage page;
  page.runs = {tools::read_metrics_log(path)};
  const std::string html = tools::render_report_html(page);
  CHECK_THAT(html, Contains("plot-loss") && Contains("<polyline"));
  const std::vector<std::string> coordinates = drawn_coordinates(html);
  CHECK(coordinates.size() > 3);
  for (const std::string& c : coordinates) {
    INFO(c);
    CHECK(c.find("nan") == std::string::npos);
    CHECK(c.find("inf") == std::string::npos);
  }
  std::remove(path.c_str());
}
