// A decoder-only language model as generation drives it (tools/train's
// `generate`): its vocabulary and context, and logits that continue a
// key/value cache. models::Gpt and models::Llama are decoders; a new
// language-model family becomes one by deriving from it (beside nn::Module),
// and generation needs nothing else.
#pragma once

#include <cstdint>

#include "models/attention_heads.h"

namespace mt::models {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual int64_t vocab() const = 0;
  virtual int64_t context() const = 0;
  // Logits [B, t, vocab] of tokens [B, t] at positions cache.length() ..
  // cache.length() + t - 1, which must fit the context; the cache keeps them.
  virtual Tensor forward(const Tensor& tokens, KvCache& cache) = 0;
};

}  // namespace mt::models
