#!/usr/bin/env bash
# Side by side on this machine's CPU: mixtape vs PyTorch training the `mlp`
# (784-256-128-10) in FP32 with AdamW at batch 128, both on 2 threads, on
# the same Fashion-MNIST data. Prints samples/s of each and the ratio.
# Needs Debian's python3-torch and libopenblas0-pthread (PyTorch's reference).
# Usage: bench/cpu_mlp_vs_pytorch.sh [build-dir] [steps]
set -euo pipefail
build=${1:-build}
steps=${2:-400}
export OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive

mixtape_rate=$("$build/mixtape" train --model mlp --precision fp32 --optimizer adamw --batch 128 \
  --steps "$steps" --test-limit 1000 --no-progress | sed -n 's/.* \([0-9.]*\) samples\/s.*/\1/p' | tail -1)

torch_rate=$(/usr/bin/python3 - "$steps" <<'PY'
import gzip, sys, time, numpy as np, torch
torch.set_num_threads(2)
steps = int(sys.argv[1])
with gzip.open("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz") as f:
    x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784).astype(np.float32) / 255.0
with gzip.open("/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz") as f:
    y = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)
x = torch.from_numpy((x - 0.2860) / 0.3530)
y = torch.from_numpy(y)
model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128), torch.nn.ReLU(),
                            torch.nn.Linear(128, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
perm = torch.randperm(len(y))
def step(i):
    idx = perm[(i * 128) % (len(y) - 128):][:128]
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
PY
)
echo "mixtape fp32 mlp: ${mixtape_rate} samples/s"
echo "PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)') fp32 mlp: ${torch_rate} samples/s"
awk -v a="$mixtape_rate" -v b="$torch_rate" 'BEGIN { printf "ratio mixtape / PyTorch: %.2f\n", a / b }'
