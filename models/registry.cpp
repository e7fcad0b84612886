#include "models/registry.h"

#include <functional>

#include "models/bert.h"
#include "models/cnn.h"
#include "models/gpt.h"
#include "models/llama.h"
#include "models/mlp.h"

namespace mt::models {
namespace {

struct Entry {
  ModelInfo info;
  std::function<std::shared_ptr<nn::Module>(int64_t classes)> make;
};

// A language model's `classes` is its dataset's vocabulary: the model's own
// grows to hold it (gpt-small's 256 bytes become GPT-2 BPE's 50257 tokens;
// gpt2-124m's 50304 holds both).
template <typename Model, typename Config>
Entry decoder_entry(const std::string& name, const std::string& description, const Config& config, bool checkpointable,
                    const std::string& embedding) {
  return {{name, description, ModelTask::LanguageModel, config.vocab, config.context, checkpointable, embedding},
          [config](int64_t vocab) {
            Config c = config;
            c.vocab = std::max(c.vocab, vocab);
            return std::make_shared<Model>(c);
          }};
}

Entry gpt_entry(const std::string& name, const std::string& description) {
  return decoder_entry<Gpt>(name, description, gpt_config(name), /*checkpointable=*/true, "wte.weight");
}

// (No activation checkpointing for the Llamas yet.)
Entry llama_entry(const std::string& name, const std::string& description) {
  return decoder_entry<Llama>(name, description, llama_config(name), /*checkpointable=*/false,
                              "model.embed_tokens.weight");
}

Entry bert_entry(const std::string& name, const std::string& description) {
  const BertConfig config = bert_config(name, 1);
  return {{name, description, ModelTask::TextClassification, config.vocab, config.context, /*checkpointable=*/true,
           "classifier.bias"},
          [name](int64_t classes) { return std::make_shared<Bert>(bert_config(name, classes)); }};
}

const std::vector<Entry>& entries() {
  static const std::vector<Entry> all = {
      {{"mlp", "784-256-128-10 MLP with ReLU (235,146 parameters)"},
       [](int64_t classes) { return std::make_shared<Mlp>(784, classes); }},
      {{.name = "cnn",
        .description = "2 x (conv3x3 + BN + ReLU + maxpool) + 2 FC (421,834 parameters)",
        .checkpointable = true},
       [](int64_t classes) { return std::make_shared<Cnn>(classes); }},
      {{.name = "resnet",
        .description = "ResNet for 28x28: 3 stages x 2 BasicBlocks, 32/64/128 channels (696,042 parameters)",
        .checkpointable = true},
       [](int64_t classes) { return std::make_shared<ResNet>(classes); }},
      gpt_entry("gpt-tiny", "GPT, bytes, context 64, 2 layers x 2 heads, width 64"),
      gpt_entry("gpt-small", "GPT, bytes, context 256, 6 layers x 6 heads, width 384"),
      gpt_entry("gpt2-124m", "GPT-2 small's shape: 50304 tokens, context 1024, 12 layers x 12 heads, width 768"),
      // (Not checkpointable: recomputing a block would count its routing twice in the router statistics.)
      decoder_entry<Gpt>("gpt-moe-tiny", "gpt-tiny with each MLP a mixture of 4 GELU experts, top-1 (Switch) routing",
                         gpt_config("gpt-moe-tiny"), /*checkpointable=*/false, "wte.weight"),
      llama_entry("llama-tiny", "Llama (RMSNorm, RoPE, SwiGLU, GQA), bytes, context 64, 2 layers x 4 heads (2 KV)"),
      llama_entry("llama-small", "Llama, bytes, context 256, 6 layers x 6 heads (2 KV), width 384"),
      llama_entry("llama-125m", "Llama, 50304 tokens, context 1024, 12 layers x 12 heads (4 KV), width 768"),
      llama_entry("llama-moe-tiny", "llama-tiny with each MLP a mixture of 4 SwiGLU experts, top-2 routing"),
      bert_entry("bert-tiny", "BERT encoder, bytes, context 128, 2 layers x 2 heads, width 128"),
      bert_entry("bert-mini", "BERT encoder, bytes, context 128, 4 layers x 4 heads, width 256"),
      bert_entry("bert-base", "BERT-base's shape over bytes: context 512, 12 layers x 12 heads, width 768"),
  };
  return all;
}

const Entry& entry(const std::string& name) {
  std::vector<std::string> names;
  for (const Entry& e : entries()) {
    if (e.info.name == name) return e;
    names.push_back(e.info.name);
  }
  fail("unknown model '{}': known models are {}", name, fmt::join(names, ", "));
}

}  // namespace

std::string task_noun(ModelTask task) {
  switch (task) {
    case ModelTask::ImageClassification: return "an image-classification";
    case ModelTask::LanguageModel: return "a language";
    case ModelTask::TextClassification: return "a text-classification";
  }
  return "?";
}

bool reads_tokens(ModelTask task) { return task != ModelTask::ImageClassification; }

std::string default_model(Device device) { return device.is_cpu() ? "mlp" : "cnn"; }

std::vector<ModelInfo> model_list() {
  std::vector<ModelInfo> out;
  for (const Entry& e : entries()) out.push_back(e.info);
  return out;
}

ModelInfo model_info(const std::string& name) { return entry(name).info; }

std::shared_ptr<nn::Module> make_model(const std::string& name, int64_t classes) { return entry(name).make(classes); }

}  // namespace mt::models
