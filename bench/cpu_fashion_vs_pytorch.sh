#!/usr/bin/env bash
# Side by side on this machine's CPU: mixtape vs PyTorch (Debian's
# python3-torch) training the Fashion-MNIST models, mlp and cnn (and resnet
# when MODELS names it), with AdamW at batch 128, in fp32 and in bf16
# autocast, both on 2 threads, on the same data. Prints a Markdown table of training samples/s and the ratio, the CPU's
# flags and the back end mixtape's CPU GEMMs and convolutions run on. Run it
# on an idle machine: anything else running skews both sides.
# Needs Debian's python3-torch and libopenblas0-pthread (PyTorch's reference).
# The sides alternate ROUNDS times (default 3) and the table compares medians
# (bench/side_by_side.sh).
# Usage: [MODELS="mlp cnn resnet"] [PRECISIONS="fp32 bf16"] [ROUNDS=3] bench/cpu_fashion_vs_pytorch.sh [build-dir] [steps]
set -euo pipefail
build=${1:-build}
steps=${2:-200}
here="$(cd "$(dirname "$0")" && pwd)"
export OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive
source "$here/side_by_side.sh"

mixtape_rate() {  # model precision -> samples/s
  # --threads 2, fixed, as PyTorch's side is (the default 0 lets the ThreadTuner choose).
  "$build/mixtape" train --model "$1" --precision "$2" --optimizer adamw --batch 128 --threads 2 \
    --steps "$steps" --test-limit 500 --no-progress | sed -n 's/.* \([0-9.]*\) samples\/s.*/\1/p' | tail -1
}

torch_rate() {  # model precision -> samples/s
  /usr/bin/python3 "$here/pytorch_fashion.py" "$steps" "$2" 2 "$1"
}

torch_version=$(/usr/bin/python3 -c 'import torch; print(torch.__version__)')
echo "| model | precision | mixtape samples/s | PyTorch $torch_version samples/s | ratio | rounds: mixtape / PyTorch |"
echo "|---|---|---|---|---|---|"
for model in ${MODELS:-mlp cnn}; do
  for precision in ${PRECISIONS:-fp32 bf16}; do
    echo "| $model | $precision | $(side_by_side "mixtape_rate $model $precision" "torch_rate $model $precision") |"
  done
done
echo
"$build/mixtape" info | grep -i "cpu gemm" || true
echo "lscpu flags: $(lscpu | sed -n 's/^Flags: *//p')"
