// Tokenizers (tools/data/bpe.h): GPT-2's byte-level BPE against its
// reference encoder (npm gpt-3-encoder's Encoder.js, run with node) on edge
// strings and on the whole Brown corpus, round trips, hostile files, bytes.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/error.h"
#include "tools/data/bpe.h"
#include "tools/data/brown.h"

using namespace mt;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

const data::Gpt2Tokenizer& gpt2() {
  INFO("GPT-2's BPE files are fetched by " << data::gpt2_bpe_fetch_command() << " into "
                                           << data::default_gpt2_bpe_dir().string());
  static const data::Gpt2Tokenizer tokenizer;
  return tokenizer;
}

// The reference encoder's ids for each text, one vector per text.
std::vector<std::vector<int64_t>> reference_ids(const std::vector<std::string>& texts) {
  // One folder per process: CTest runs the cases of this file side by side.
  const fs::path dir = fs::temp_directory_path() / ("mixtape_bpe_reference_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::string command = "node " MT_TESTS_SOURCE_DIR "/tools/data/bpe_reference.js '" +
                        (data::default_gpt2_bpe_dir() / "Encoder.js").string() + "'";
  for (size_t i = 0; i < texts.size(); ++i) {
    const fs::path file = dir / ("text" + std::to_string(i));
    std::ofstream(file, std::ios::binary) << texts[i];
    command += " '" + file.string() + "'";
  }
  std::FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string output;
  char buffer[1 << 16];
  for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0;) output.append(buffer, n);
  INFO("node (Debian's nodejs, installed by tools/scripts/setup.sh) ran: " << command);
  REQUIRE(pclose(pipe) == 0);
  std::vector<std::vector<int64_t>> ids;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    ids.emplace_back();
    for (int64_t id; words >> id;) ids.back().push_back(id);
  }
  REQUIRE(ids.size() == texts.size());
  fs::remove_all(dir);
  return ids;
}

}  // namespace

// Catches: a pre-tokenizer that splits differently from GPT-2's regex
// (contractions, " ?" before letters and numbers, whitespace runs before a
// word, JavaScript's \s with U+00A0 and U+FEFF), merges applied out of rank
// order, invalid UTF-8 replaced differently from Node's decoder, and a
// decode that does not give the text back.
TEST_CASE("GPT-2 BPE equals the reference encoder on edge strings", "[data][bpe]") {
  const std::vector<std::string> texts = {
      "",
      " ",
      "   ",
      "\n\n\n",
      "  \n  x",
      "Hello world",
      "it's they're we've I'm you'll he'd 'S DON'T o'clock",
      "tabs\tand\r\nCRLF lines\r\n",
      "Ünïcödé café naïve façade",
      "日本語のテキスト、中文和한국어",
      "emoji 😀👍🏽 and flags 🇫🇷",
      "numbers 12345 3.14 1,000,000 ½ ³ Ⅻ",
      "\xc2\xa0nbsp\xe3\x80\x80ideographic\xef\xbb\xbf bom",
      "a \xef\xbb\xbfx: U+FEFF is a space to JavaScript's \\s, not to Unicode's",
      "bad \xff\xfe bytes \xc3\x28 cut \xe2\x82 four \xf0\x9f\x98 end \xed\xa0\x80 surrogate",
      std::string(700, 'a') + " " + std::string(300, ' ') + "b",
      "!!!???...---((([[[{{{",
      "  leading and trailing  ",
      "x\xcc\x81 combining accent",
      "mixed123abc ABC123 a1b2c3",
  };
  const auto want = reference_ids(texts);
  for (size_t i = 0; i < texts.size(); ++i) {
    INFO("text " << i << ": \"" << texts[i] << "\"");
    const std::vector<int64_t> got = gpt2().encode(texts[i]);
    CHECK(got == want[i]);
    CHECK(gpt2().decode(got) == data::with_invalid_utf8_replaced(texts[i]));
  }
  CHECK(gpt2().vocab_size() == 50257);
  CHECK(gpt2().encode("Hello world") == std::vector<int64_t>{15496, 995});
}

// Catches: any difference on real text at scale (rare merges, the cache
// returning another piece's tokens), on the exact text the language models
// train on.
TEST_CASE("GPT-2 BPE equals the reference encoder on the whole Brown corpus", "[data][bpe][brown]") {
  INFO("the corpus is fetched by tools/scripts/setup.sh: " << data::brown_fetch_command());
  const data::BrownBytes brown = data::brown_byte_split(data::load_brown());
  const auto want = reference_ids({brown.train, brown.validation});
  const std::vector<int64_t> train = gpt2().encode(brown.train), validation = gpt2().encode(brown.validation);
  CHECK(train == want[0]);
  CHECK(validation == want[1]);
  CHECK(gpt2().decode(train) == brown.train);
  const double bytes = static_cast<double>(brown.train.size() + brown.validation.size());
  WARN("Brown in GPT-2 BPE: " << train.size() + validation.size() << " tokens for " << bytes << " bytes, "
                              << (train.size() + validation.size()) / bytes << " tokens per byte");
}

// Catches: hostile vocabulary files loaded into silent garbage (duplicate
// ids, a byte without a symbol, merges of unknown symbols, no version line).
TEST_CASE("GPT-2 BPE files are checked before use", "[data][bpe][errors]") {
  const fs::path dir = fs::temp_directory_path() / ("mixtape_bpe_hostile_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path good = data::default_gpt2_bpe_dir();
  auto with = [&](const std::string& encoder, const std::string& merges) {
    std::ofstream(dir / "encoder.json", std::ios::binary) << encoder;
    std::ofstream(dir / "vocab.bpe", std::ios::binary) << merges;
  };
  CHECK_THROWS_WITH(data::Gpt2Tokenizer(dir / "missing"), Contains("is missing") && Contains("setup.sh"));
  with("[1, 2]", "#version: 0.2\n");
  CHECK_THROWS_WITH(data::Gpt2Tokenizer(dir), Contains("must be a JSON object"));
  with("{\"a\": 0, \"b\": 0}", "#version: 0.2\n");
  CHECK_THROWS_WITH(data::Gpt2Tokenizer(dir), Contains("distinct integer"));
  with("{\"a\": 0, \"b\": 1}", "#version: 0.2\n");
  CHECK_THROWS_WITH(data::Gpt2Tokenizer(dir), Contains("has no symbol for byte 0"));
  with("{not json", "#version: 0.2\n");
  CHECK_THROWS_WITH(data::Gpt2Tokenizer(dir), Contains("is not valid JSON"));
  fs::copy_file(good / "encoder.json", dir / "encoder.json", fs::copy_options::overwrite_existing);
  std::ofstream(dir / "vocab.bpe", std::ios::binary) << "Ġ t\n";
  CHECK_THROWS_WITH(data::Gpt2Tokenizer(dir), Contains("#version"));
  std::ofstream(dir / "vocab.bpe", std::ios::binary) << "#version: 0.2\nĠ t\nzzzq xxxq\n";
  CHECK_THROWS_WITH(data::Gpt2Tokenizer(dir), Contains("line 3") && Contains("not in encoder.json"));
  std::ofstream(dir / "vocab.bpe", std::ios::binary) << "#version: 0.2\nĠ t x\n";
  CHECK_THROWS_WITH(data::Gpt2Tokenizer(dir), Contains("line 2: a merge is two symbols"));
  CHECK_THROWS_WITH(gpt2().decode(std::vector<int64_t>{50257}), Contains("outside GPT-2's vocabulary"));
  fs::remove_all(dir);
}

// Catches: the byte tokenizer losing bytes (a signed char read as a
// negative id), and an unknown tokenizer name accepted.
TEST_CASE("the byte tokenizer is the identity on bytes", "[data][bpe]") {
  const data::ByteTokenizer bytes;
  const std::string text = "caf\xc3\xa9 \xff\x00 end";
  const std::vector<int64_t> ids = bytes.encode(std::string_view(text.data(), text.size()));
  CHECK(ids[3] == 0xc3);
  CHECK(ids[6] == 0xff);
  CHECK(bytes.decode(ids) == text);
  CHECK_THROWS_WITH(bytes.decode(std::vector<int64_t>{256}), Contains("outside the byte vocabulary"));
  CHECK_THROWS_WITH(data::make_tokenizer("sentencepiece"), Contains("the choices are bytes and gpt2"));
  CHECK(data::make_tokenizer("bytes")->vocab_size() == 256);
}
