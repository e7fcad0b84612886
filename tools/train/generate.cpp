#include "tools/train/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "autograd/autocast.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/philox.h"
#include "core/safetensors.h"
#include "models/decoder.h"
#include "models/registry.h"
#include "tools/data/bpe.h"
#include "tools/data/text.h"
#include "tools/train/checkpoint.h"

namespace mt::tools {
namespace {

// A uniform draw in [0, 1) for step `step` of the stream keyed by `seed`.
double uniform_draw(uint64_t seed, uint64_t step) {
  const PhiloxBlock r = philox4x32_10(seed, step);
  const uint64_t bits = (static_cast<uint64_t>(r.word[0]) << 21) ^ r.word[1];
  return static_cast<double>(bits & ((uint64_t{1} << 53) - 1)) / static_cast<double>(uint64_t{1} << 53);
}

// The next token from one position's logits.
int64_t sample(const std::vector<double>& logits, const GenerateOptions& options, uint64_t step) {
  const auto vocab = static_cast<int64_t>(logits.size());
  if (options.temperature == 0) {
    return std::max_element(logits.begin(), logits.end()) - logits.begin();  // the first of equal maxima
  }
  std::vector<int64_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  const int64_t k = options.top_k > 0 ? std::min(options.top_k, vocab) : vocab;
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
    return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
           (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
  });
  // softmax(logits / T) over the k kept, in f64, shifted by the largest.
  const double top = logits[static_cast<size_t>(order[0])];
  std::vector<double> weight(static_cast<size_t>(k));
  double total = 0;
  for (int64_t i = 0; i < k; ++i) {
    weight[static_cast<size_t>(i)] =
        std::exp((logits[static_cast<size_t>(order[static_cast<size_t>(i)])] - top) / options.temperature);
    total += weight[static_cast<size_t>(i)];
  }
  double u = uniform_draw(options.seed, step) * total;
  for (int64_t i = 0; i < k; ++i) {
    u -= weight[static_cast<size_t>(i)];
    if (u < 0) return order[static_cast<size_t>(i)];
  }
  return order[static_cast<size_t>(k - 1)];
}

// The last position's logits of a [1, t, vocab] forward, on the host in f64.
std::vector<double> last_logits(const Tensor& logits) {
  return logits.select(1, logits.size(1) - 1).reshape({-1}).to(kCPU).to_vector();
}

Tensor token_tensor(std::vector<int64_t>::const_iterator begin, std::vector<int64_t>::const_iterator end,
                    Device device) {
  const std::vector<int64_t> tokens(begin, end);
  return from_vector(tokens, {1, static_cast<int64_t>(tokens.size())}, kI64, device);
}

}  // namespace

std::vector<int64_t> generate(nn::Module& model, const std::vector<int64_t>& prompt, const GenerateOptions& options,
                              Device device) {
  auto* decoder = dynamic_cast<models::Decoder*>(&model);
  MT_CHECK(decoder != nullptr, "generate: '{}' is not a decoder-only language model", model.name());
  const int64_t vocab = decoder->vocab(), context = decoder->context();
  MT_CHECK(!prompt.empty(), "generate: the prompt is empty (give at least one token)");
  MT_CHECK(static_cast<int64_t>(prompt.size()) <= context,
           "generate: the prompt of {} tokens is longer than the model's context of {}", prompt.size(), context);
  for (size_t i = 0; i < prompt.size(); ++i) {
    MT_CHECK(prompt[i] >= 0 && prompt[i] < vocab, "generate: prompt token {} ({}) is outside the vocabulary 0..{}", i,
             prompt[i], vocab - 1);
  }
  MT_CHECK(options.tokens >= 0, "generate: the number of tokens must not be negative, got {}", options.tokens);
  MT_CHECK(options.tokens <= options.max_tokens,
           "generate: --tokens {} is above the cap --max-tokens {} (raise --max-tokens to generate that many)",
           options.tokens, options.max_tokens);
  MT_CHECK(options.temperature >= 0 && std::isfinite(options.temperature),
           "generate: the temperature must be finite and not negative, got {}", options.temperature);
  MT_CHECK(options.top_k >= 0, "generate: top-k must not be negative, got {}", options.top_k);

  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  const amp::Autocast autocast(device, options.precision == Precision::Bf16 ? kBF16 : kF16,
                               options.precision != Precision::Fp32);
  std::vector<int64_t> tokens = prompt;
  models::KvCache cache;
  size_t window = 0;  // the first token the model conditions on
  for (int64_t step = 0; step < options.tokens; ++step) {
    // A full context: restart the window from its last half (run again below).
    if (static_cast<int64_t>(tokens.size() - window) == context) {
      window = tokens.size() - static_cast<size_t>(std::max<int64_t>(context / 2, 1));
      cache.clear();
    }
    Tensor logits;
    if (!options.use_cache) {
      logits = model.forward(token_tensor(tokens.begin() + static_cast<std::ptrdiff_t>(window), tokens.end(), device));
    } else {
      // What the cache has not seen yet: the whole window after a restart, else the newest token.
      const size_t first_unseen = window + static_cast<size_t>(cache.length());
      logits = decoder->forward(
          token_tensor(tokens.begin() + static_cast<std::ptrdiff_t>(first_unseen), tokens.end(), device), cache);
    }
    tokens.push_back(sample(last_logits(logits), options, static_cast<uint64_t>(step)));
    if (options.on_token) options.on_token(tokens.back());
  }
  model.train(was_training);
  return tokens;
}

GenerateResult generate_from_checkpoint(const std::string& path, const std::string& prompt, GenerateOptions options,
                                        const std::string& device_text, const TextSink& stream,
                                        NonFiniteWeights nonfinite) {
  const SafetensorsFile f = load_safetensors(path);
  auto name = f.metadata.find("model");
  auto precision = f.metadata.find("precision");
  MT_CHECK(name != f.metadata.end() && precision != f.metadata.end(),
           "checkpoint '{}' has no model/precision metadata (not a mixtape checkpoint?)", path);
  const models::ModelInfo info = models::model_info(name->second);
  MT_CHECK(info.task == models::ModelTask::LanguageModel,
           "generate: checkpoint '{}' holds '{}', {} model; generate needs a language model (gpt-tiny, gpt-small, ...)",
           path, name->second, models::task_noun(info.task));
  const Device device = resolve_device(device_text);
  const std::shared_ptr<nn::Module> module = load_model_checkpoint(f, path, device, nonfinite);
  MT_CHECK(dynamic_cast<models::Decoder*>(module.get()) != nullptr,
           "generate: '{}' is not a decoder-only language model", name->second);
  options.precision = parse_precision(precision->second);
  // The tokenizer the model was trained with (its recorded --tokenizer).
  const std::unique_ptr<data::Tokenizer> tokenizer = data::make_tokenizer(checkpoint_config(f, path).data.tokenizer);
  const std::vector<int64_t> prompt_tokens = tokenizer->encode(prompt);
  GenerateResult r;
  r.model = name->second;
  r.text = prompt;
  // The prompt goes out with the first new byte (or at the end when there is
  // none), so a prompt generate() refuses is never streamed.
  bool prompt_streamed = false;
  auto stream_prompt = [&] {
    if (stream && !prompt_streamed) stream(prompt);
    prompt_streamed = true;
  };
  options.on_token = [&](int64_t t) {
    MT_CHECK(t >= 0 && t < tokenizer->vocab_size(), "generate: '{}' produced token {}, outside its {} tokenizer's {}",
             name->second, t, tokenizer->name(), tokenizer->vocab_size());
    const std::string piece = tokenizer->decode(std::span<const int64_t>(&t, 1));
    r.text += piece;
    stream_prompt();
    if (stream) stream(piece);
  };
  generate(*module, prompt_tokens, options, device);
  stream_prompt();
  return r;
}

}  // namespace mt::tools
