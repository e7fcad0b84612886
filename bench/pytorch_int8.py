#!/usr/bin/env python3
"""PyTorch's side of the INT8 benchmark (bench/cpu_int8_vs_pytorch.sh): a
mixtape checkpoint loaded into its PyTorch twin (tools/scripts/load_in_pytorch.py).
mlp and cnn: eager-mode post-training static quantization with the fbgemm
qconfig (histogram observer on activations, per-channel symmetric INT8
weights; the cnn's batch norms fused into their convolutions first), calibrated on the first CALIBRATE training images as `mixtape
quantize` is. bert-*: dynamic quantization of every nn.Linear
(torch.ao.quantization.quantize_dynamic, qint8 weights, activations
quantized per batch at run time: what PyTorch offers transformers), on
Brown's held-out genre passages. Both score in batches of 512, as `mixtape
eval` and `mixtape quantize` do (tools/train/evaluate.cpp). Prints the accuracy and the warm samples/s, float and INT8, on
THREADS threads. Usage: pytorch_int8.py CHECKPOINT CALIBRATE THREADS"""
import gzip, os, sys, time
import numpy as np, torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "scripts"))
from load_in_pytorch import (BERT_CONFIGS, CNN, MLP, Bert, brown_genre_passages, default_brown_dir,  # noqa: E402
                             read_safetensors)

path, calibrate, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
root = "/usr/share/datasets/fashion-mnist"


def images(split):
    with gzip.open(f"{root}/{split}-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28).astype(np.float32) / 255.0
    with gzip.open(f"{root}/{split}-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)
    return torch.from_numpy((x - 0.2860) / 0.3530), torch.from_numpy(y)


class Quantized(torch.nn.Module):  # eager mode: quantize the input, dequantize the logits
    def __init__(self, model):
        super().__init__()
        self.quant, self.model, self.dequant = torch.ao.quantization.QuantStub(), model, torch.ao.quantization.DeQuantStub()

    def forward(self, x):  # the twins' F.relu runs on quint8 tensors as it is
        return self.dequant(self.model(self.quant(x)))


def score(model, x, y, batch=512):
    with torch.no_grad():
        model(x[:batch])  # warm
        start = time.perf_counter()
        predicted = torch.cat([model(x[b:b + batch]).argmax(1) for b in range(0, len(x), batch)])
        seconds = time.perf_counter() - start
    return (predicted == y).double().mean().item(), len(y) / seconds


tensors, meta = read_safetensors(path)
if meta["model"] in BERT_CONFIGS:
    model = Bert(tensors["classifier.bias"].shape[0], **BERT_CONFIGS[meta["model"]])
    model.load_state_dict({k: v.float() for k, v in tensors.items() if not k.startswith(("optimizer.", "scaler."))})
    model.eval()
    x, y = brown_genre_passages(default_brown_dir(), BERT_CONFIGS[meta["model"]]["context"], 0)
    float_accuracy, float_rate = score(model, x, y)
    dynamic = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
    int8_accuracy, int8_rate = score(dynamic, x, y)
    print(f"{float_accuracy:.4f} {float_rate:.0f} {int8_accuracy:.4f} {int8_rate:.0f}")
    sys.exit(0)
model = {"mlp": MLP, "cnn": CNN}[meta["model"]]()
model.load_state_dict({k: v.float() for k, v in tensors.items() if not k.startswith(("optimizer.", "scaler."))})
model.eval()
test_x, test_y = images("t10k")
train_x, _ = images("train")
float_accuracy, float_rate = score(model, test_x, test_y)

if meta["model"] == "cnn":  # what `mixtape quantize` does by default (--no-fold-batch-norm keeps them)
    model = torch.ao.quantization.fuse_modules(model, [["conv1", "bn1"], ["conv2", "bn2"]])
q = Quantized(model)
q.eval()
q.qconfig = torch.ao.quantization.get_default_qconfig("fbgemm")
prepared = torch.ao.quantization.prepare(q)
with torch.no_grad():
    for begin in range(0, calibrate, 64):
        prepared(train_x[begin:min(begin + 64, calibrate)])
converted = torch.ao.quantization.convert(prepared)
int8_accuracy, int8_rate = score(converted, test_x, test_y)
print(f"{float_accuracy:.4f} {float_rate:.0f} {int8_accuracy:.4f} {int8_rate:.0f}")
