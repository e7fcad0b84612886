// Layers. Each holds its parameters as public Tensors with PyTorch's names
// (weight, bias, running_mean, ...) so state_dicts line up with PyTorch's.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "autograd/ops.h"
#include "nn/module.h"

namespace mt::nn {

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;
  // With the activation fused into the GEMM's epilogue (one kernel, one rounding).
  Tensor forward(const Tensor& x, LinearActivation activation);
  std::string name() const override { return "Linear"; }
  Tensor weight, bias;
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  Tensor forward(const Tensor& x) override;
  bool is_norm_layer() const override { return true; }
  std::string name() const override { return "LayerNorm"; }
  Tensor weight, bias;

 private:
  Shape normalized_shape_;
  double eps_;
};

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim);
  Tensor forward(const Tensor& indices) override;
  std::string name() const override { return "Embedding"; }
  Tensor weight;
};

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override { return dropout(x, p_, is_training()); }
  std::string name() const override { return "Dropout"; }

 private:
  double p_;
};

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return relu(x); }
  std::string name() const override { return "ReLU"; }
};

class GELU : public Module {
 public:
  explicit GELU(GeluApproximation approximation = GeluApproximation::None) : approximation_(approximation) {}
  Tensor forward(const Tensor& x) override { return gelu(x, approximation_); }
  std::string name() const override { return "GELU"; }

 private:
  GeluApproximation approximation_;
};

class SiLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return silu(x); }
  std::string name() const override { return "SiLU"; }
};

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_(start_dim), end_(end_dim) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_, end_); }
  std::string name() const override { return "Flatten"; }

 private:
  int64_t start_, end_;
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel, Size2 stride = 1, Size2 padding = 0,
         Size2 dilation = 1, int64_t groups = 1, bool bias = true);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Conv2d"; }
  Tensor weight, bias;

 private:
  Size2 stride_, padding_, dilation_;
  int64_t groups_;
};

// Batch statistics in training (computed in f32 always, as AMP's "BN in
// FP32" rule says, with f32 parameters and running statistics; f16/bf16
// activations stay in their dtype), running statistics in eval;
// num_batches_tracked as in PyTorch.
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t channels, double eps = 1e-5, double momentum = 0.1);
  Tensor forward(const Tensor& x) override;
  bool is_norm_layer() const override { return true; }
  std::string name() const override { return "BatchNorm2d"; }
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  double eps_, momentum_;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Size2 kernel, std::optional<Size2> stride = std::nullopt, Size2 padding = 0)
      : kernel_(kernel), stride_(stride.value_or(kernel)), padding_(padding) {}
  Tensor forward(const Tensor& x) override { return max_pool2d(x, kernel_, stride_, padding_); }
  std::string name() const override { return "MaxPool2d"; }

 private:
  Size2 kernel_, stride_, padding_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Size2 kernel, std::optional<Size2> stride = std::nullopt, Size2 padding = 0)
      : kernel_(kernel), stride_(stride.value_or(kernel)), padding_(padding) {}
  Tensor forward(const Tensor& x) override { return avg_pool2d(x, kernel_, stride_, padding_); }
  std::string name() const override { return "AvgPool2d"; }

 private:
  Size2 kernel_, stride_, padding_;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Size2 output_size) : output_(output_size) {}
  Tensor forward(const Tensor& x) override { return adaptive_avg_pool2d(x, output_); }
  std::string name() const override { return "AdaptiveAvgPool2d"; }

 private:
  Size2 output_;
};

// Runs its children in order; they are named "0", "1", ... as in PyTorch.
class Sequential : public Module {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<std::shared_ptr<Module>> modules);
  void push_back(std::shared_ptr<Module> module);
  Tensor forward(const Tensor& x) override;
  size_t size() const { return children().size(); }
  std::shared_ptr<Module> operator[](size_t i) const { return children().at(i).second; }
  std::string name() const override { return "Sequential"; }
};

// Holds modules without a forward of its own (named "0", "1", ...).
class ModuleList : public Module {
 public:
  void push_back(std::shared_ptr<Module> module);
  Tensor forward(const Tensor&) override;
  size_t size() const { return children().size(); }
  std::shared_ptr<Module> operator[](size_t i) const { return children().at(i).second; }
  std::string name() const override { return "ModuleList"; }
};

}  // namespace mt::nn
