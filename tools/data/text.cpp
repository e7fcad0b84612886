#include "tools/data/text.h"

#include <vector>

#include "core/generator.h"
#include "core/philox.h"
#include "tools/data/bpe.h"
#include "tools/data/brown.h"

namespace mt::data {
namespace {

// Windows of `context` over `tokens` (inputs) and the tokens one further on (targets).
TensorDataset windows_of(const std::vector<int64_t>& tokens, int64_t context, int64_t vocab) {
  const auto length = static_cast<int64_t>(tokens.size());
  const int64_t n = (length - 1) / context;
  TensorDataset d;
  d.classes = vocab;
  d.inputs = empty({n, context}, kI64);
  d.targets = empty({n, context}, kI64);
  int64_t* in = d.inputs.data<int64_t>();
  int64_t* next = d.targets.data<int64_t>();
  for (int64_t i = 0; i < n * context; ++i) {
    in[i] = tokens[static_cast<size_t>(i)];
    next[i] = tokens[static_cast<size_t>(i + 1)];
  }
  return d;
}

}  // namespace

TensorDataset byte_windows(std::string_view bytes, int64_t context, const std::string& what) {
  MT_CHECK(context > 0, "{}: the context must be positive, got {}", what, context);
  MT_CHECK(static_cast<int64_t>(bytes.size()) > context, "{}: {} bytes do not fill one window of {} (+1) bytes", what,
           bytes.size(), context);
  std::vector<int64_t> tokens(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) tokens[i] = static_cast<unsigned char>(bytes[i]);
  return windows_of(tokens, context, kByteVocabulary);
}

TextSplits brown_language_model(int64_t context, const std::string& directory, const Tokenizer* tokenizer) {
  const std::vector<BrownDocument> documents =
      directory.empty() ? load_brown() : load_brown(std::filesystem::path(directory));
  const BrownBytes split = brown_byte_split(documents);
  if (tokenizer == nullptr) {
    return {byte_windows(split.train, context, "brown (train)"),
            byte_windows(split.validation, context, "brown (validation)")};
  }
  auto windows = [&](const std::string& text, const char* what) {
    MT_CHECK(context > 0, "{}: the context must be positive, got {}", what, context);
    const std::vector<int64_t> tokens = tokenizer->encode(text);
    MT_CHECK(static_cast<int64_t>(tokens.size()) > context, "{}: {} {} tokens do not fill one window of {} (+1)",
             what, tokens.size(), tokenizer->name(), context);
    return windows_of(tokens, context, tokenizer->vocab_size());
  };
  return {windows(split.train, "brown (train)"), windows(split.validation, "brown (validation)")};
}

TextSplits brown_language_model(int64_t context, const std::string& directory, const Tokenizer& tokenizer) {
  return brown_language_model(context, directory, &tokenizer);
}

namespace {

struct Passages {
  std::vector<int64_t> tokens, labels;
};

void add_passages(const BrownDocument& doc, int64_t context, Passages& out) {
  constexpr size_t kShortest = 16;
  const auto length = static_cast<size_t>(context - 1);
  const auto label = static_cast<int64_t>(kBrownGenres.find(doc.genre));
  MT_CHECK(label >= 0, "brown genre: document {} has an unknown genre '{}'", doc.id, doc.genre);
  for (size_t begin = 0; begin < doc.text.size(); begin += length) {
    const std::string_view piece = std::string_view(doc.text).substr(begin, length);
    if (piece.size() < kShortest) continue;
    out.tokens.push_back(kClsToken);
    for (const char byte : piece) out.tokens.push_back(static_cast<unsigned char>(byte));
    out.tokens.resize(out.tokens.size() + length - piece.size(), kPadToken);
    out.labels.push_back(label);
  }
}

TensorDataset passages_dataset(const Passages& p, int64_t context) {
  const auto n = static_cast<int64_t>(p.labels.size());
  TensorDataset d;
  d.classes = static_cast<int64_t>(kBrownGenres.size());
  d.inputs = from_vector(p.tokens, {n, context}, kI64);
  d.targets = from_vector(p.labels, {n}, kI64);
  return d;
}

}  // namespace

TextSplits brown_genre_passages(int64_t context, const std::string& directory) {
  MT_CHECK(context >= 17, "brown genre: the context must hold [CLS] and at least 16 bytes, got {}", context);
  const std::vector<BrownDocument> documents =
      directory.empty() ? load_brown() : load_brown(std::filesystem::path(directory));
  Passages train, validation;
  for (size_t i = 0; i < documents.size(); ++i) add_passages(documents[i], context, i % 10 == 9 ? validation : train);
  return {passages_dataset(train, context), passages_dataset(validation, context)};
}

TensorDataset synthetic_tokens(int64_t windows, int64_t context, int64_t vocab, uint64_t seed, uint64_t stream) {
  MT_CHECK(windows > 0 && context > 0 && vocab > 1,
           "synthetic tokens: windows, context and vocab (> 1) must be positive");
  constexpr int64_t kSuccessors = 4;
  // The chain: token t is followed by successors[t][j] with probability 1/2, 1/4, 1/8, 1/8.
  std::vector<int64_t> successors(static_cast<size_t>(vocab * kSuccessors));
  for (int64_t i = 0; i < vocab * kSuccessors; ++i) {
    successors[static_cast<size_t>(i)] =
        philox4x32_10(seed, static_cast<uint64_t>(i)).word[0] % static_cast<uint32_t>(vocab);
  }
  std::vector<int64_t> tokens(static_cast<size_t>(windows * context + 1));
  const uint64_t walk = seed ^ ((stream + 1) << 40);
  int64_t t = static_cast<int64_t>(stream % static_cast<uint64_t>(vocab));
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = t;
    const uint32_t r = philox4x32_10(walk, i).word[0] & 7u;
    const int64_t j = r < 4 ? 0 : r < 6 ? 1 : r < 7 ? 2 : 3;
    t = successors[static_cast<size_t>(t * kSuccessors + j)];
  }
  return windows_of(tokens, context, vocab);
}

}  // namespace mt::data
