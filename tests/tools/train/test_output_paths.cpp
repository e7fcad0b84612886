// The one output-path rule (tools/train/output_paths.h): an output is never
// one of the command's inputs or another of its outputs, however spelled,
// and never replaces a device. Nothing here writes to an output: the rule
// is checked before any work.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "runtime/error.h"
#include "tools/train/output_paths.h"

using namespace mt;
using Catch::Contains;
using tools::OutputKind;

namespace {

namespace fs = std::filesystem;

// A fresh folder per test, holding `run.jsonl` (an input).
struct Folder {
  fs::path root = fs::temp_directory_path() / ("mixtape_output_paths_" + std::to_string(::getpid()));
  Folder() {
    fs::remove_all(root);
    fs::create_directories(root / "x");
    std::ofstream(root / "x" / "run.jsonl") << "{}\n";
  }
  ~Folder() { fs::remove_all(root); }
  std::string operator/(const std::string& name) const { return (root / name).string(); }
};

}  // namespace

TEST_CASE("report --out naming its own log, however spelled, is refused naming both paths", "[output_paths]") {
  const Folder f;
  const std::string log = f / "x/run.jsonl";
  for (const std::string& out : {log, f / "x/../x/run.jsonl", f / "x/./run.jsonl"}) {
    CHECK_THROWS_WITH(tools::check_output_paths("report", {{"--out", out}}, {{"the metrics log", log}}),
                      Contains("report: --out '" + out + "' is the same file as the metrics log '" + log + "'"));
  }
  // The second of two inputs too.
  const std::string other = f / "other.jsonl";
  CHECK_THROWS_WITH(
      tools::check_output_paths("report", {{"--out", log}}, {{"the metrics log", other}, {"the metrics log", log}}),
      Contains("is the same file as the metrics log"));
}

TEST_CASE("an output that is a symlink or hard link to an input is refused", "[output_paths]") {
  const Folder f;
  const std::string checkpoint = f / "x/run.jsonl";
  fs::create_symlink(checkpoint, f / "link");
  CHECK_THROWS_WITH(tools::check_output_paths("train", {{"--log", f / "link"}}, {{"--resume", checkpoint}}),
                    Contains("train: --log '" + (f / "link") + "' is the same file as --resume"));
  fs::create_hard_link(checkpoint, f / "hard");
  CHECK_THROWS_WITH(tools::check_output_paths("train", {{"--report", f / "hard"}}, {{"--resume", checkpoint}}),
                    Contains("--report '" + (f / "hard") + "' is the same file as --resume"));
}

TEST_CASE("train --resume ck --save ck continues the checkpoint in place, but --log ck is refused", "[output_paths]") {
  const Folder f;
  const std::string ck = f / "x/run.jsonl";
  const tools::OutputPath save{"--save", ck, OutputKind::File, /*may_replace=*/"--resume"};
  CHECK_NOTHROW(tools::check_output_paths("train", {save}, {{"--resume", ck}}));
  CHECK_THROWS_WITH(tools::check_output_paths("train", {save}, {{"--data", ck}}),
                    Contains("--save '" + ck + "' is the same file as --data"));
  CHECK_THROWS_WITH(tools::check_output_paths("train", {save, {"--log", ck}}, {{"--resume", ck}}),
                    Contains("--log '" + ck + "' is the same file as --resume"));
}

TEST_CASE("train --save s --report s: two outputs on one path are refused", "[output_paths]") {
  const Folder f;
  const std::string s = f / "s";  // not there yet: compared by its resolved path
  CHECK_THROWS_WITH(tools::check_output_paths("train", {{"--save", s}, {"--log", ""}, {"--report", f / "x/../s"}}, {}),
                    Contains("train: --save '" + s + "' and --report '" + (f / "x/../s") + "' are the same file"));
}

TEST_CASE("a character device named by --save or --out is refused, never replaced", "[output_paths]") {
  const Folder f;
  REQUIRE(fs::is_character_file("/dev/null"));
  CHECK_THROWS_WITH(tools::check_output_paths("train", {{"--save", "/dev/null"}}, {}),
                    Contains("train: --save '/dev/null' is a character device"));
  fs::create_symlink("/dev/null", f / "null-link");  // through a symlink too
  CHECK_THROWS_WITH(tools::check_output_paths("report", {{"--out", f / "null-link"}}, {}),
                    Contains("is a character device"));
  REQUIRE(::mkfifo((f / "fifo").c_str(), 0600) == 0);
  CHECK_THROWS_WITH(tools::check_output_paths("bench", {{"--json", f / "fifo"}}, {}), Contains("is a FIFO"));
}

TEST_CASE("a folder where a file is written is refused, but --tensorboard's folder may exist", "[output_paths]") {
  const Folder f;
  CHECK_THROWS_WITH(tools::check_output_paths("train", {{"--log", f / "x"}}, {}), Contains("is a folder"));
  CHECK_NOTHROW(tools::check_output_paths("train", {{"--tensorboard", f / "x", OutputKind::Folder}}, {}));
  CHECK_THROWS_WITH(tools::check_output_paths("train", {{"--tensorboard", f / "x/run.jsonl", OutputKind::Folder}}, {}),
                    Contains("--tensorboard '" + (f / "x/run.jsonl") + "' is a regular file"));
}

TEST_CASE("distinct outputs beside their inputs pass, existing or new", "[output_paths]") {
  const Folder f;
  std::ofstream(f / "old.html") << "old";
  CHECK_NOTHROW(tools::check_output_paths(
      "train", {{"--save", f / "c.safetensors"}, {"--log", f / "run2.jsonl"}, {"--report", f / "old.html"}},
      {{"--resume", f / "x/run.jsonl"}, {"--data", f / "x"}, {"--resume", ""}}));
  CHECK_FALSE(tools::same_file(f / "x/run.jsonl", f / "run.jsonl"));
}

TEST_CASE("a relative spelling with .. names the same file as the absolute one", "[output_paths]") {
  const Folder f;
  const std::string log = f / "x/run.jsonl";
  const std::string relative = "./" + fs::relative(log).string();  // ./../../tmp/... from the working folder
  CHECK(tools::same_file(relative, log));
  CHECK_THROWS_WITH(tools::check_output_paths("report", {{"--out", relative}}, {{"the metrics log", log}}),
                    Contains("is the same file as the metrics log"));
}
