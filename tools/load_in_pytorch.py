#!/usr/bin/env python3
"""Loads a mixtape checkpoint into the equivalent PyTorch model and evaluates it.

Proves the checkpoint's model tensors carry PyTorch's names and shapes: the
state dict loads with strict=True and the test accuracy matches `mixtape eval`.
Reads safetensors with the standard library + numpy (no safetensors package
needed). Usage: tools/load_in_pytorch.py ckpt.safetensors [fashion-mnist dir]
"""
import gzip
import json
import struct
import sys

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


DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64, "I32": np.int32,
          "U8": np.uint8, "BOOL": np.bool_}


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


def main():
    path = sys.argv[1]
    root = sys.argv[2] if len(sys.argv) > 2 else "/usr/share/datasets/fashion-mnist"
    tensors, meta = read_safetensors(path)
    model = {"mlp": MLP, "cnn": CNN}[meta["model"]]()
    state = {k: v.float() if v.is_floating_point() else v for k, v in tensors.items()
             if not k.startswith(("optimizer.", "scaler."))}
    model.load_state_dict(state, strict=True)
    model.eval()
    with gzip.open(f"{root}/t10k-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28).astype(np.float32) / 255.0
    with gzip.open(f"{root}/t10k-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)
    x = torch.from_numpy((x - 0.2860) / 0.3530)
    with torch.no_grad():
        accuracy = (model(x).argmax(1).numpy() == y).mean()
    print(f"PyTorch {torch.__version__}: loaded {len(state)} tensors of a '{meta['model']}' strictly; "
          f"test accuracy {100 * accuracy:.2f}%")


if __name__ == "__main__":
    main()
