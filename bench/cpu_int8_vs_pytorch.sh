#!/usr/bin/env bash
# INT8 inference side by side on this machine's CPU: `mixtape quantize` (W8A8
# Linear and Conv2d layers, each observer) against PyTorch's INT8 of the same
# trained fp32 checkpoint (bench/pytorch_int8.py: eager static quantization
# with the fbgemm qconfig for mlp and cnn, dynamic quantization for bert-*),
# calibrated on the first 1024 training images (512 passages for bert-*),
# scored on the held-out split, on 2 threads. Prints a Markdown table
# (accuracy, warm samples/s) and the CPU's flags. Run it on an idle machine.
# Usage: [MODELS="mlp cnn bert-tiny"] [OBSERVERS="mse minmax percentile entropy"] \
#        bench/cpu_int8_vs_pytorch.sh [build-dir]
set -euo pipefail
build=${1:-build}
here="$(cd "$(dirname "$0")" && pwd)"
export OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive MT_NUM_THREADS=2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "| model | side | float accuracy | float samples/s | INT8 accuracy | INT8 samples/s | INT8 / float speed |"
echo "|---|---|---|---|---|---|---|"
for model in ${MODELS:-mlp cnn}; do
  checkpoint="$work/$model.safetensors"
  epochs=$([ "$model" = mlp ] && echo 4 || echo 1)
  calibrate=$([[ "$model" == bert-* ]] && echo 512 || echo 1024)
  "$build/mixtape" train --model "$model" --precision fp32 --epochs "$epochs" --threads 2 --save "$checkpoint" \
    --no-progress > /dev/null
  for observer in ${OBSERVERS:-mse minmax percentile entropy}; do
    out=$("$build/mixtape" quantize --checkpoint "$checkpoint" --out "$work/q_$observer.safetensors" \
          --observer "$observer" --calibrate "$calibrate")
    float_line=$(echo "$out" | grep '^float:')
    int8_line=$(echo "$out" | grep '^int8: *accuracy')
    awk -v m="$model" -v o="$observer" -v f="$float_line" -v q="$int8_line" 'BEGIN {
      split(f, a, /[ ,%]+/); split(q, b, /[ ,%]+/);
      printf "| %s | mixtape %s | %.2f%% | %.0f | %.2f%% | %.0f | %.2fx |\n", m, o, a[3], a[4], b[3], b[4], b[4] / a[4] }'
  done
  read -r fa fr qa qr < <(/usr/bin/python3 "$here/pytorch_int8.py" "$checkpoint" "$calibrate" 2 2>/dev/null)
  torch_version=$(/usr/bin/python3 -c 'import torch; print(torch.__version__)')
  awk -v m="$model" -v v="$torch_version" -v fa="$fa" -v fr="$fr" -v qa="$qa" -v qr="$qr" 'BEGIN {
    side = m ~ /^bert/ ? "dynamic" : "fbgemm static";
    printf "| %s | PyTorch %s %s | %.2f%% | %.0f | %.2f%% | %.0f | %.2fx |\n", m, v, side, 100 * fa, fr, 100 * qa, qr, qr / fr }'
done
echo
echo "Both float sides run f32 (the checkpoints train with --precision fp32)."
echo "lscpu flags: $(lscpu | sed -n 's/^Flags: *//p')"
