// A character-level transformer language model from scratch, the way a
// PyTorch user writes one: pre-LN blocks with causal self-attention, AdamW
// with two parameter groups, a warmup-cosine schedule, gradient clipping,
// BF16 autocast on the CPU, a checkpoint saved and loaded, and sampling.
// Built and run by the tests (examples_transformer_lm): it must learn.
#include <cstdio>
#include <iostream>
#include <string>

#include "mixtape.h"

using namespace mt;

struct Block : nn::Module {
  std::shared_ptr<nn::LayerNorm> ln1, ln2;
  std::shared_ptr<nn::MultiheadAttention> attn;
  std::shared_ptr<nn::Linear> fc, proj;
  explicit Block(int64_t d, int64_t heads) {
    ln1 = register_module("ln1", std::make_shared<nn::LayerNorm>(Shape{d}));
    attn = register_module("attn", std::make_shared<nn::MultiheadAttention>(d, heads, 0.0, true, true));
    ln2 = register_module("ln2", std::make_shared<nn::LayerNorm>(Shape{d}));
    fc = register_module("fc", std::make_shared<nn::Linear>(d, 4 * d));
    proj = register_module("proj", std::make_shared<nn::Linear>(4 * d, d));
  }
  Tensor forward(const Tensor& x) override {
    const Tensor h = ln1->forward(x);
    const Tensor a = x + attn->forward(h, h, h, Tensor(), Tensor(), /*is_causal=*/true);
    return a + proj->forward(gelu(fc->forward(ln2->forward(a))));
  }
};

struct CharLM : nn::Module {
  std::shared_ptr<nn::Embedding> tok, pos;
  std::shared_ptr<nn::ModuleList> blocks;
  std::shared_ptr<nn::LayerNorm> ln_f;
  std::shared_ptr<nn::Linear> head;
  CharLM(int64_t vocab, int64_t context, int64_t d, int64_t heads, int64_t layers) {
    tok = register_module("tok", std::make_shared<nn::Embedding>(vocab, d));
    pos = register_module("pos", std::make_shared<nn::Embedding>(context, d));
    blocks = register_module("blocks", std::make_shared<nn::ModuleList>());
    for (int64_t i = 0; i < layers; ++i) blocks->push_back(std::make_shared<Block>(d, heads));
    ln_f = register_module("ln_f", std::make_shared<nn::LayerNorm>(Shape{d}));
    head = register_module("head", std::make_shared<nn::Linear>(d, vocab, false));
  }
  Tensor forward(const Tensor& idx) override {  // [B, T] -> logits [B, T, V]
    Tensor x = tok->forward(idx) + pos->forward(arange(0, double(idx.size(1)), 1, kI64));
    for (const auto& block : *blocks) x = block->forward(x);
    return head->forward(ln_f->forward(x));
  }
};

// Weight decay on matrices only, as nanoGPT: biases, norms and embeddings in a group without it.
optim::AdamW make_optimizer(CharLM& model) {
  std::vector<Tensor> decay, no_decay;
  for (const auto& [name, p] : model.named_parameters()) {
    const bool matrix = p.dim() >= 2 && name.rfind("tok", 0) != 0 && name.rfind("pos", 0) != 0;
    (matrix ? decay : no_decay).push_back(p);
  }
  return optim::AdamW({{decay, std::nullopt, 0.1}, {no_decay, std::nullopt, 0.0}}, {.lr = 3e-3});
}

int main() {
  const std::string text =
      "the quick brown fox jumps over the lazy dog. a stitch in time saves nine. "
      "all that glitters is not gold. the early bird catches the worm. ";
  const int64_t context = 32, batch = 16, steps = 150;
  const Tensor data = from_vector(std::vector<double>(text.begin(), text.end()), {int64_t(text.size())}, kI64);
  Generator gen(0);
  auto get_batch = [&] {
    const Tensor starts = multinomial(ones({int64_t(text.size()) - context - 1}), batch, true, &gen);
    const Tensor offsets = starts.unsqueeze(1) + arange(0, double(context), 1, kI64);
    return std::pair{index_select(data, 0, offsets.flatten()).view({batch, context}),
                     index_select(data, 0, (offsets + 1).flatten()).view({batch, context})};
  };

  CharLM model(128, context, 64, 4, 2);
  optim::AdamW opt = make_optimizer(model);
  optim::WarmupCosineLr sched(opt, 10, steps, 0.1);
  std::cout << model << "\n";

  double first = 0, last = 0;
  for (int64_t step = 0; step < steps; ++step) {
    const auto [x, y] = get_batch();
    Tensor loss;
    {
      const amp::Autocast autocast(kCPU, kBF16);
      loss = cross_entropy(model.forward(x).flatten(0, 1), y.flatten());
    }
    opt.zero_grad();
    loss.backward();
    optim::clip_grad_norm_(model.parameters(), 1.0);
    opt.step();
    sched.step();
    (step == 0 ? first : last) = loss.item<double>();
    if (step % 50 == 0)
      std::printf("step %3d  loss %.3f  lr %.2e\n", int(step), loss.item<double>(), sched.current_lr());
  }
  std::printf("loss %.3f -> %.3f\n", first, last);

  // Save the whole training state, load it into a fresh model, and sample from that one.
  save_checkpoint("transformer_lm.safetensors", {{"model", model}, {"optimizer", opt}, {"scheduler", sched}});
  CharLM restored(128, context, 64, 4, 2);
  optim::AdamW restored_opt = make_optimizer(restored);
  optim::WarmupCosineLr restored_sched(restored_opt, 10, steps, 0.1);
  load_checkpoint("transformer_lm.safetensors",
                  {{"model", restored}, {"optimizer", restored_opt}, {"scheduler", restored_sched}});
  restored.eval();
  NoGradGuard no_grad;
  std::string sample = "the ";
  for (int i = 0; i < 60; ++i) {
    const std::string window = sample.substr(sample.size() > size_t(context) ? sample.size() - context : 0);
    const Tensor idx =
        from_vector(std::vector<double>(window.begin(), window.end()), {1, int64_t(window.size())}, kI64);
    const Tensor logits = restored.forward(idx).select(1, idx.size(1) - 1);  // [1, V]: the next character
    sample += char(multinomial((logits / 0.8).softmax(-1), 1, false, &gen).item<int64_t>());
  }
  std::printf("sample: %s\n", sample.c_str());
  return last < 0.6 * first ? 0 : 1;  // it learned
}
