// Token datasets for language modelling: a token stream cut into windows.
//
// Window i holds the stream's tokens [i*T, i*T + T) as its inputs and the
// same positions shifted by one, [i*T + 1, i*T + T + 1), as its targets, so
// every token of the stream (but the first) is predicted exactly once per
// epoch. The loader shuffles the windows with the seeded generator.
//
// Byte-level text (the Brown corpus) is its own tokenizer: token = byte,
// vocabulary 256, and any UTF-8 prompt can be encoded. Classification
// passages add two tokens: [CLS] first and [PAD] after a short passage.
#pragma once

#include <string_view>

#include "tools/data/dataset.h"

namespace mt::data {

inline constexpr int64_t kByteVocabulary = 256;
inline constexpr int64_t kClsToken = 256;
inline constexpr int64_t kPadToken = 257;

// The non-overlapping windows of `context` tokens of a byte stream; an
// mt::Error when the stream is too short for one window.
TensorDataset byte_windows(std::string_view bytes, int64_t context, const std::string& what);

struct TextSplits {
  TensorDataset train, validation;
};

class Tokenizer;

// Brown (tools/data/brown.h) as windows of `tokenizer`'s tokens (bytes when
// none is given), split by document; the datasets' classes are its vocabulary.
TextSplits brown_language_model(int64_t context, const std::string& directory = "",
                                const Tokenizer* tokenizer = nullptr);
TextSplits brown_language_model(int64_t context, const std::string& directory, const Tokenizer& tokenizer);

// Genre classification on Brown: every document cut into passages of
// context - 1 bytes (the last one shorter, padded; pieces under 16 bytes are
// dropped), each [CLS] + bytes + [PAD]..., labelled with the document's genre
// (its index in kBrownGenres). Split by document as brown_byte_split is, so
// no passage of a validation document is trained on.
TextSplits brown_genre_passages(int64_t context, const std::string& directory = "");

// Tokens from a fixed random Markov chain (each token has a few likely
// successors), so that a model can learn them: throughput runs of any size
// and vocabulary without a corpus. The chain depends on `seed` only; the
// walk through it on `stream` as well (train and held-out splits are two
// streams of one chain).
TensorDataset synthetic_tokens(int64_t windows, int64_t context, int64_t vocab, uint64_t seed, uint64_t stream = 0);

}  // namespace mt::data
