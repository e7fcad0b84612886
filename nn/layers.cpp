#include "nn/layers.h"

#include "nn/init.h"

namespace mt::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias) {
  MT_CHECK(in_features > 0 && out_features > 0, "Linear: features must be positive, got {} -> {}", in_features,
           out_features);
  register_parameter("weight", weight, empty({out_features, in_features}));
  init::default_weight_(weight, in_features);
  if (with_bias) {
    register_parameter("bias", bias, empty({out_features}));
    init::default_bias_(bias, in_features);
  }
}

Tensor Linear::forward(const Tensor& x) { return linear(x, weight, bias); }

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool elementwise_affine)
    : normalized_shape_(std::move(normalized_shape)), eps_(eps) {
  if (elementwise_affine) {
    register_parameter("weight", weight, ones(normalized_shape_));
    register_parameter("bias", bias, zeros(normalized_shape_));
  }
}

Tensor LayerNorm::forward(const Tensor& x) { return layer_norm(x, normalized_shape_, weight, bias, eps_); }

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim) {
  register_parameter("weight", weight, empty({num_embeddings, embedding_dim}));
  init::normal_(weight);
}

Tensor Embedding::forward(const Tensor& indices) { return embedding(weight, indices); }

Dropout::Dropout(double p) : p_(p) { MT_CHECK(p >= 0 && p <= 1, "Dropout: p must be in [0, 1], got {}", p); }

Sequential::Sequential(std::vector<std::shared_ptr<Module>> modules) {
  for (auto& m : modules) push_back(std::move(m));
}

void Sequential::push_back(std::shared_ptr<Module> module) {
  register_module(std::to_string(children().size()), std::move(module));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (const auto& [name, child] : children()) h = child->forward(h);
  return h;
}

void ModuleList::push_back(std::shared_ptr<Module> module) {
  register_module(std::to_string(children().size()), std::move(module));
}

Tensor ModuleList::forward(const Tensor&) {
  fail("ModuleList has no forward of its own: iterate over its modules");
}

}  // namespace mt::nn
