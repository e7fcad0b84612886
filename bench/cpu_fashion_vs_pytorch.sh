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

# --threads 2: fixed, as PyTorch's side is (the default 0 lets the ThreadTuner choose).
mixtape_rate=$("$build/mixtape" train --model mlp --precision fp32 --optimizer adamw --batch 128 --threads 2 \
  --steps "$steps" --test-limit 1000 --no-progress | sed -n 's/.* \([0-9.]*\) samples\/s.*/\1/p' | tail -1)

torch_rate=$(/usr/bin/python3 "$(dirname "$0")/pytorch_mlp.py" "$steps" fp32 2)
echo "mixtape fp32 mlp: ${mixtape_rate} samples/s"
echo "PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)') fp32 mlp: ${torch_rate} samples/s"
awk -v a="$mixtape_rate" -v b="$torch_rate" 'BEGIN { printf "ratio mixtape / PyTorch: %.2f\n", a / b }'
