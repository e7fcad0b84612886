// examples/transformer_lm.cpp written against libtorch 1.13's C++ frontend,
// to compare what a user writes (bench/libtorch/README.md). Not part of the
// build; compiled by hand with Debian's libtorch-dev:
//   g++ -std=c++17 -O2 transformer_lm.cpp -ltorch -ltorch_cpu -lc10 -o transformer_lm_libtorch
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>

struct BlockImpl : torch::nn::Module {
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::MultiheadAttention attn{nullptr};
  torch::nn::Linear fc{nullptr}, proj{nullptr};
  BlockImpl(int64_t d, int64_t heads) {
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
    attn = register_module("attn", torch::nn::MultiheadAttention(torch::nn::MultiheadAttentionOptions(d, heads)));
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
    fc = register_module("fc", torch::nn::Linear(d, 4 * d));
    proj = register_module("proj", torch::nn::Linear(4 * d, d));
  }
  torch::Tensor forward(const torch::Tensor& x) {  // [B, T, D]; libtorch 1.13's attention has no batch_first
    const int64_t t = x.size(1);
    // -inf above the diagonal: 1.13's C++ attention adds a bool mask as 0/1 instead of masking with it.
    const torch::Tensor causal = torch::full({t, t}, -INFINITY).triu(1);
    const torch::Tensor h = ln1->forward(x).transpose(0, 1);
    const torch::Tensor a = x + std::get<0>(attn->forward(h, h, h, {}, false, causal)).transpose(0, 1);
    return a + proj->forward(torch::gelu(fc->forward(ln2->forward(a))));
  }
};
TORCH_MODULE(Block);

struct CharLMImpl : torch::nn::Module {
  torch::nn::Embedding tok{nullptr}, pos{nullptr};
  torch::nn::ModuleList blocks;
  torch::nn::LayerNorm ln_f{nullptr};
  torch::nn::Linear head{nullptr};
  CharLMImpl(int64_t vocab, int64_t context, int64_t d, int64_t heads, int64_t layers) {
    tok = register_module("tok", torch::nn::Embedding(vocab, d));
    pos = register_module("pos", torch::nn::Embedding(context, d));
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < layers; ++i) blocks->push_back(Block(d, heads));
    ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
    head = register_module("head", torch::nn::Linear(torch::nn::LinearOptions(d, vocab).bias(false)));
  }
  torch::Tensor forward(const torch::Tensor& idx) {
    torch::Tensor x = tok->forward(idx) + pos->forward(torch::arange(idx.size(1)));
    for (const auto& block : *blocks) x = block->as<BlockImpl>()->forward(x);
    return head->forward(ln_f->forward(x));
  }
};
TORCH_MODULE(CharLM);

// Weight decay on matrices only; each group needs its full options in libtorch.
torch::optim::AdamW make_optimizer(CharLM& model) {
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& p : model->named_parameters()) {
    const bool matrix = p.value().dim() >= 2 && p.key().rfind("tok", 0) != 0 && p.key().rfind("pos", 0) != 0;
    (matrix ? decay : no_decay).push_back(p.value());
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay,
                      std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(3e-3).weight_decay(0.1)));
  groups.emplace_back(no_decay,
                      std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(3e-3).weight_decay(0.0)));
  return torch::optim::AdamW(std::move(groups), torch::optim::AdamWOptions(3e-3));
}

// libtorch has no warmup-cosine schedule: the factor by hand, set on every group.
double set_lr(torch::optim::AdamW& opt, int64_t step, int64_t warmup, int64_t total, double min_factor) {
  const double f =
      step < warmup
          ? double(step + 1) / warmup
          : min_factor + (1 - min_factor) * 0.5 * (1 + std::cos(M_PI * double(step - warmup) / double(total - warmup)));
  for (auto& group : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(3e-3 * f);
  return 3e-3 * f;
}

int main() {
  const std::string text =
      "the quick brown fox jumps over the lazy dog. a stitch in time saves nine. "
      "all that glitters is not gold. the early bird catches the worm. ";
  const int64_t context = 32, batch = 16, steps = 150;
  torch::manual_seed(0);
  std::vector<int64_t> codes(text.begin(), text.end());
  const torch::Tensor data = torch::tensor(codes, torch::kLong);
  auto get_batch = [&] {
    const torch::Tensor starts = torch::randint(int64_t(text.size()) - context - 1, {batch}, torch::kLong);
    const torch::Tensor offsets = starts.unsqueeze(1) + torch::arange(context);
    return std::pair{data.index_select(0, offsets.flatten()).view({batch, context}),
                     data.index_select(0, (offsets + 1).flatten()).view({batch, context})};
  };

  CharLM model(128, context, 64, 4, 2);
  torch::optim::AdamW opt = make_optimizer(model);
  std::cout << *model << "\n";
  double first = 0, last = 0;
  for (int64_t step = 0; step < steps; ++step) {
    const double lr = set_lr(opt, step, 10, steps, 0.1);
    const auto [x, y] = get_batch();
    at::autocast::set_cpu_enabled(true);  // no RAII guard in libtorch's C++ API
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    torch::Tensor loss = torch::cross_entropy_loss(model->forward(x).flatten(0, 1), y.flatten());
    at::autocast::set_cpu_enabled(false);
    at::autocast::clear_cache();
    opt.zero_grad();
    loss.backward();
    torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
    if (step % 50 == 0) std::printf("step %3d  loss %.3f  lr %.2e\n", int(step), loss.item<double>(), lr);
  }
  std::printf("loss %.3f -> %.3f\n", first, last);

  // The training state in one archive: model, optimizer and the schedule's step, by hand.
  torch::serialize::OutputArchive archive, model_part, optimizer_part;
  model->save(model_part);
  opt.save(optimizer_part);
  archive.write("model", model_part);
  archive.write("optimizer", optimizer_part);
  archive.write("step", torch::tensor(steps));
  archive.save_to("transformer_lm_libtorch.pt");
  CharLM restored(128, context, 64, 4, 2);
  torch::optim::AdamW restored_opt = make_optimizer(restored);
  torch::serialize::InputArchive in, model_in, optimizer_in;
  in.load_from("transformer_lm_libtorch.pt");
  in.read("model", model_in);
  in.read("optimizer", optimizer_in);
  restored->load(model_in);
  restored_opt.load(optimizer_in);
  restored->eval();
  torch::NoGradGuard no_grad;
  std::string sample = "the ";
  for (int i = 0; i < 60; ++i) {
    const std::string window = sample.substr(sample.size() > size_t(context) ? sample.size() - context : 0);
    std::vector<int64_t> ids(window.begin(), window.end());
    const torch::Tensor idx = torch::tensor(ids, torch::kLong).unsqueeze(0);
    const torch::Tensor logits = restored->forward(idx).select(1, idx.size(1) - 1);
    sample += char(torch::multinomial(torch::softmax(logits / 0.8, -1), 1).item<int64_t>());
  }
  std::printf("sample: %s\n", sample.c_str());
  return last < 0.6 * first ? 0 : 1;
}
