// The mixtape half of the PyTorch parity suite: runs every public op on fixed
// inputs (edge values included: NaN, +-inf, +-0, subnormals, ties, huge and
// tiny magnitudes, empty and 0-dim tensors, broadcasting) in every floating
// dtype, on the CPU and on the sim device (the CUDA kernels), and writes
// inputs, outputs and input gradients as JSON lines. check_parity.py
// recomputes each record in PyTorch and compares.
//
//   parity_dump out.jsonl
//
// Each case names a PyTorch twin in check_parity.py's OPS table; the
// backward is seeded with a fixed upstream gradient on the first floating
// output, the same one the Python side uses.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mixtape.h"
#include "models/gpt.h"
#include "models/registry.h"
#include "parity_cases.h"

using namespace mt;
using namespace parity;

namespace {

json encode(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

json encode_tensor(const Tensor& t) {
  json values = json::array();
  for (double v : t.to(kCPU).to_vector()) values.push_back(encode(v));
  return {{"dtype", std::string(dtype_name(t.dtype()))}, {"shape", t.sizes()}, {"values", values}};
}

// The upstream gradient: multiples of 1/4 in [-1.25, 1.25], exact in every dtype.
Tensor upstream_for(const Tensor& out) {
  std::vector<double> g(static_cast<size_t>(out.numel()));
  for (size_t k = 0; k < g.size(); ++k) g[k] = static_cast<double>(static_cast<int>((k * 7) % 11) - 5) / 4.0;
  return from_vector(g, out.sizes(), out.dtype(), out.device());
}

DType dtype_of(Kind kind, DType run) {
  switch (kind) {
    case Kind::Float: return run;
    case Kind::I64: return kI64;
    case Kind::Bool: return kBool;
    case Kind::F32: return kF32;
    case Kind::F64: return kF64;
  }
  return run;
}

json run_case(const Case& c, DType dtype, Device device) {
  json record = {{"name", c.name},
                 {"op", c.op},
                 {"args", c.args},
                 {"device", device.str()},
                 {"dtype", std::string(dtype_name(dtype))}};
  try {
    std::vector<Tensor> inputs;
    json encoded_inputs = json::array();
    for (const InputSpec& spec : c.inputs) {
      const DType t = dtype_of(spec.kind, dtype);
      Tensor x = from_vector(spec.values, spec.shape, t).to(device);
      const bool grad = c.backward && spec.grad && is_floating(t);
      if (grad) x.requires_grad_();
      json e = encode_tensor(x);
      e["grad"] = grad;
      encoded_inputs.push_back(e);
      inputs.push_back(x);
    }
    record["inputs"] = encoded_inputs;
    const std::vector<Tensor> outputs = c.fn(inputs);
    json encoded_outputs = json::array();
    for (const Tensor& o : outputs) encoded_outputs.push_back(encode_tensor(o));
    record["outputs"] = encoded_outputs;
    const Tensor* seeded = nullptr;
    for (const Tensor& o : outputs) {
      if (is_floating(o.dtype()) && o.requires_grad()) {
        seeded = &o;
        break;
      }
    }
    if (seeded != nullptr) {
      const Tensor g = upstream_for(*seeded);
      record["upstream"] = encode_tensor(g);
      seeded->backward(g);
      json grads = json::array();
      for (const Tensor& x : inputs) grads.push_back(x.grad().defined() ? encode_tensor(x.grad()) : json());
      record["grads"] = grads;
    }
  } catch (const Error& e) {
    record["error"] = e.what();
  }
  return record;
}

// ---------------------------------------------------------------- the cases

// Every family's cases, in the order of the dump.
std::vector<Case> all_cases() {
  std::vector<Case> cases;
  add_unary_cases(cases);
  add_binary_cases(cases);
  add_reduction_cases(cases);
  add_linear_algebra_cases(cases);
  add_nn_function_cases(cases);
  add_loss_and_embedding_cases(cases);
  add_shape_and_indexing_cases(cases);
  add_convolution_and_pooling_cases(cases);
  add_attention_cases(cases);
  add_copy_fill_and_dropout_cases(cases);
  add_module_cases(cases);
  return cases;
}

// ---------------------------------------------------------------- the reference models

// Model tensors are large: their values go to a binary file of little-endian
// f32 (or f64) beside the JSON, which records where each one starts.
class Blob {
 public:
  explicit Blob(const std::string& path) : path_(path), out_(path, std::ios::binary) {}
  json put(const Tensor& t) {
    const Tensor host = t.detach().to(kCPU).contiguous();
    const int64_t offset = bytes_;
    out_.write(static_cast<const char*>(host.data_ptr()), static_cast<std::streamsize>(host.nbytes()));
    bytes_ += host.nbytes();
    return {{"dtype", std::string(dtype_name(t.dtype()))}, {"shape", t.sizes()}, {"offset", offset}};
  }
  bool ok() const { return static_cast<bool>(out_); }

 private:
  std::string path_;
  std::ofstream out_;
  int64_t bytes_ = 0;
};

// One training-mode forward and backward of a reference model on a fixed
// batch: its parameters and buffers before, the logits, the loss, every
// parameter gradient and the buffers after (BatchNorm's running statistics).
json run_model(const std::string& name, Device device, Blob& blob) {
  json record = {{"model", name}, {"device", device.str()}, {"dtype", "f32"}};
  manual_seed(7);
  const bool gpt = name.rfind("gpt", 0) == 0;
  const bool language_model = gpt || name.rfind("llama", 0) == 0;
  const std::shared_ptr<nn::Module> model =
      gpt ? std::make_shared<models::Gpt>(models::gpt_config(name)) : models::make_model(name);
  model->to(device);
  model->train();
  json params = json::object(), buffers_before = json::object();
  for (const auto& [n, p] : model->named_parameters()) params[n] = blob.put(p);
  for (const auto& [n, b] : model->named_buffers()) buffers_before[n] = blob.put(b);
  const int64_t batch = 4;
  Tensor x, target;
  if (language_model) {  // two sequences of 16 bytes, predicting the next byte
    std::vector<int64_t> in, next;
    for (int64_t i = 0; i < 2 * 16; ++i) {
      in.push_back((i * 37 + 11) % 256);
      next.push_back((i * 37 + 48) % 256);
    }
    x = from_vector(in, {2, 16}, kI64, device);
    target = from_vector(next, {32}, kI64, device);
  } else {
    std::vector<double> pixels(static_cast<size_t>(batch * 28 * 28));
    for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<double>((i * 7919) % 256) / 255.0;
    x = from_vector(pixels, {batch, 1, 28, 28}, kF32, device);
    target = from_vector(std::vector<int64_t>{3, 7, 0, 9}, {batch}, kI64, device);
  }
  const Tensor out = model->forward(x);
  const Tensor logits = language_model ? out.reshape({32, 256}) : out;
  // A mixture of experts: the gradient also carries the router's losses (the value does not).
  const Tensor loss = models::with_router_losses(cross_entropy(logits, target), *model);
  loss.backward();
  json grads = json::object(), buffers_after = json::object();
  for (const auto& [n, p] : model->named_parameters()) grads[n] = blob.put(p.grad());
  for (const auto& [n, b] : model->named_buffers()) buffers_after[n] = blob.put(b);
  record["params"] = params;
  record["buffers_before"] = buffers_before;
  record["input"] = blob.put(x);
  record["target"] = blob.put(target);
  record["logits"] = blob.put(logits);
  record["loss"] = loss.item<double>();
  record["grads"] = grads;
  record["buffers_after"] = buffers_after;
  return record;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: parity_dump out.jsonl\n");
    return 2;
  }
  std::ofstream out(argv[1]);
  if (!out) {
    std::fprintf(stderr, "parity_dump: cannot write %s\n", argv[1]);
    return 1;
  }
  int records = 0;
  for (const Case& c : all_cases()) {
    for (Device device : {kCPU, kSIM}) {
      if (device.is_sim() && !c.on_sim) continue;
      for (DType dtype : c.dtypes) {
        out << run_case(c, dtype, device).dump() << "\n";
        ++records;
      }
    }
  }
  // The reference models, into <out>.models.jsonl and <out>.models.bin.
  const std::string models_path = std::string(argv[1]) + ".models.jsonl";
  std::ofstream models_out(models_path);
  Blob blob(std::string(argv[1]) + ".models.bin");
  int model_records = 0;
  for (const char* name : {"mlp", "cnn", "resnet", "gpt-tiny", "llama-tiny", "gpt-moe-tiny", "llama-moe-tiny"}) {
    for (Device device : {kCPU, kSIM}) {
      models_out << run_model(name, device, blob).dump() << "\n";
      ++model_records;
    }
  }
  std::printf("parity_dump: %d op records in %s, %d model records in %s\n", records, argv[1], model_records,
              models_path.c_str());
  return out && models_out && blob.ok() ? 0 : 1;
}
