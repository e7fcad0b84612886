// libFuzzer target: the Brown corpus reader (tools/data/brown.cpp) and the
// text datasets built from it (tools/data/text.cpp).
//
// A folder of 500 small valid documents is made once; each input replaces
// one of the first 256 of them (its first byte picks which), and the folder is read as
// `mixtape train --model gpt-tiny` and `--model bert-tiny` read it.
//
// Catches: tokens the tag stripper mishandles (a lone '/', a slash at the
// start, no newline at the end, NUL bytes, CR), documents that strip to
// nothing, and windows built past the end of a short text.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "tests/fuzz/fuzz_input.h"
#include "tools/data/brown.h"
#include "tools/data/text.h"

namespace {

// 500 names c<genre><nn>, spread over the 15 genres as the real corpus is.
const std::vector<std::string>& document_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (int n = 1; out.size() < 500; ++n) {
      for (char genre : mt::data::kBrownGenres) {
        if (out.size() < 500) out.push_back(std::string("c") + genre + (n < 10 ? "0" : "") + std::to_string(n));
      }
    }
    return out;
  }();
  return names;
}

void write_document(const std::filesystem::path& dir, const std::string& name, std::string_view text) {
  std::ofstream(dir / name, std::ios::binary | std::ios::trunc) << text;
}

std::string valid_document(const std::string& name) {
  return "\n\n\tThe/at jury/nn said/vbd ./.\n\n\tIt/pps was/bedz " + name + "/np ./.\n";
}

std::filesystem::path corpus_with_500_documents() {
  const std::filesystem::path dir = mt::fuzz::work_dir() / "brown";
  std::filesystem::create_directories(dir);
  for (const std::string& name : document_names()) write_document(dir, name, valid_document(name));
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::filesystem::path dir = corpus_with_500_documents();
  if (size < 1) return 0;
  const std::string& name = document_names()[data[0] % document_names().size()];
  write_document(dir, name, std::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
  mt::fuzz::refuses_cleanly([&] {
    (void)mt::data::brown_plain_text(std::string_view(reinterpret_cast<const char*>(data), size));
    (void)mt::data::brown_language_model(16, dir.string());
    (void)mt::data::brown_genre_passages(24, dir.string());
  });
  write_document(dir, name, valid_document(name));
  return 0;
}
