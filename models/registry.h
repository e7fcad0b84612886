// Reference models by name, for the CLI and the tests.
//
//   mlp     784-256-128-10, ReLU                       235,146 parameters
//   cnn     2 x (conv3x3 + BN + ReLU + maxpool), 2 FC  421,834 parameters (models/cnn.h)
//   resnet  a small ResNet for 28x28 inputs            696,042 parameters (models/cnn.h)
//   gpt-tiny, gpt-small, gpt2-124m   GPT-2-style decoders (models/gpt.h)
//   llama-tiny, llama-small, llama-125m   Llama-style decoders: RMSNorm, RoPE, SwiGLU, GQA (models/llama.h)
//   llama-moe-tiny, gpt-moe-tiny   llama-tiny (top-2) and gpt-tiny (top-1) whose MLPs are mixtures of experts (models/moe.h)
//   bert-tiny, bert-mini, bert-base  BERT-style encoders for text classification (models/bert.h)
//
// Parameter names and shapes match the PyTorch modules written out in each
// model's comment, so their safetensors checkpoints load into PyTorch.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "nn/module.h"

namespace mt::models {

enum class ModelTask {
  ImageClassification,  // [B, 1, 28, 28] images -> [B, classes] logits
  LanguageModel,        // i64 [B, T] tokens -> [B, T, vocab] next-token logits
  TextClassification,   // i64 [B, T] tokens ([CLS] first, padded) -> [B, classes] logits
};

// The task as messages name it before "model" or "dataset": "an
// image-classification", "a language", "a text-classification".
std::string task_noun(ModelTask task);
// Whether a model of `task` reads token windows (i64 [B, T]) rather than images.
bool reads_tokens(ModelTask task);

struct ModelInfo {
  std::string name;
  std::string description;
  ModelTask task = ModelTask::ImageClassification;
  int64_t vocab = 0;    // text models: the token vocabulary
  int64_t context = 0;  // text models: the longest sequence
  // It has stages or blocks that activation checkpointing recomputes
  // (nn::Module::enable_activation_checkpointing).
  bool checkpointable = false;
  // The parameter whose first dimension is the model's number of outputs
  // when its data sets it (make_model's `classes`: a language model's
  // vocabulary, a text classifier's classes), so a checkpoint's model can be
  // rebuilt at its size; empty when the outputs are fixed (10 classes).
  std::string outputs_parameter;
};

std::vector<ModelInfo> model_list();
// The model `mixtape train` trains when none is named: mlp on a CPU, cnn on a GPU (or the simulator).
std::string default_model(Device device);
// An mt::Error lists the known names when `name` is unknown.
ModelInfo model_info(const std::string& name);
// An mt::Error lists the known names when `name` is unknown.
std::shared_ptr<nn::Module> make_model(const std::string& name, int64_t classes = 10);

}  // namespace mt::models
