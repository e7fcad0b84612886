#!/usr/bin/env python3
"""PyTorch's side of the CPU Fashion-MNIST benchmarks: the mlp
(784-256-128-10) or the cnn (models/cnn.cpp: two 3x3 conv + batch norm +
ReLU + 2x2 max-pool stages, 32 and 64 channels, then 3136-128-10) with AdamW
at batch 128, 20 untimed steps, then STEPS timed ones. Prints training
samples/s. PRECISION is fp32 or bf16 (CPU autocast; PyTorch 1.13 has no f16
autocast on the CPU); THREADS, when given, is torch.set_num_threads (else
PyTorch's default); MODEL is mlp (the default), cnn or resnet (the twin of
models/cnn.h's ResNet in tools/scripts/load_in_pytorch.py).
Usage: pytorch_fashion.py STEPS PRECISION [THREADS] [MODEL]"""
import gzip, os, sys, time, numpy as np, torch

steps, precision = int(sys.argv[1]), sys.argv[2]
if len(sys.argv) > 3 and sys.argv[3] != "0":
    torch.set_num_threads(int(sys.argv[3]))
model_name = sys.argv[4] if len(sys.argv) > 4 else "mlp"
with gzip.open("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz") as f:
    x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784).astype(np.float32) / 255.0
with gzip.open("/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz") as f:
    y = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)
x = torch.from_numpy((x - 0.2860) / 0.3530)
y = torch.from_numpy(y)
nn = torch.nn
if model_name == "resnet":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "scripts"))
    import load_in_pytorch as twins
    x = x.reshape(-1, 1, 28, 28)
    model = twins.ResNet()
elif model_name == "cnn":
    x = x.reshape(-1, 1, 28, 28)
    stage = lambda c_in, c_out: [nn.Conv2d(c_in, c_out, 3, 1, 1), nn.BatchNorm2d(c_out), nn.ReLU(), nn.MaxPool2d(2, 2)]
    model = nn.Sequential(*stage(1, 32), *stage(32, 64), nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(),
                          nn.Linear(128, 10))
else:
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
perm = torch.randperm(len(y))


def step(i):
    idx = perm[(i * 128) % (len(y) - 128):][:128]
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
        loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


for i in range(20):
    step(i)
start = time.perf_counter()
for i in range(steps):
    step(i)
print(f"{steps * 128 / (time.perf_counter() - start):.0f}")
