#!/usr/bin/env bash
# Training on a busy machine (issue 14): mixtape's mlp (784-256-128-10,
# AdamW, batch 128, Fashion-MNIST) on this machine's CPU with 0, 1 and 2
# competing busy processes (each a shell loop that keeps one core busy, as a
# compiler in a build does), in fp32, bf16 and fp16, with --threads 1,
# --threads 2 and the default --threads 0 (the ThreadTuner). PyTorch 1.13
# (fp32, and bf16 autocast; it has no f16 autocast on the CPU) runs the same
# model on its default 2 threads beside it (one run each). Prints a markdown
# table of training samples/s (mixtape: the median of three runs) and each
# figure's share of the quiet one.
# Needs Debian's python3-torch and libopenblas0-pthread for the PyTorch rows.
# Usage: bench/cpu_busy_machine.sh [build-dir] [steps]
set -euo pipefail
build=${1:-build}
steps=${2:-400}
unset OMP_WAIT_POLICY OMP_NUM_THREADS MT_NUM_THREADS

competitors=()
start_competitors() {
  for _ in $(seq 1 "$1"); do
    sh -c 'while :; do :; done' &
    competitors+=($!)
  done
  sleep 0.5
}
stop_competitors() {
  for pid in "${competitors[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  competitors=()
}
trap stop_competitors EXIT

mixtape_rate() {  # precision threads: the median of three runs (a busy machine's share varies run to run)
  for _ in 1 2 3; do
    "$build/mixtape" train --model mlp --precision "$1" --threads "$2" --batch 128 --steps "$steps" \
      --test-limit 500 --no-progress | sed -n 's/.* \([0-9.]*\) samples\/s.*/\1/p' | tail -1
  done | sort -n | sed -n 2p
}

torch_rate() {  # precision
  /usr/bin/python3 "$(dirname "$0")/pytorch_fashion.py" "$steps" "$1"
}

declare -A rate
configs=()
for precision in fp32 bf16 fp16; do
  for threads in 1 2 0; do configs+=("mixtape $precision $threads"); done
done
configs+=("torch fp32 2" "torch bf16 2")

for busy in 0 1 2; do
  start_competitors "$busy"
  for config in "${configs[@]}"; do
    read -r who precision threads <<<"$config"
    if [[ $who == mixtape ]]; then
      rate["$config $busy"]=$(mixtape_rate "$precision" "$threads")
    else
      rate["$config $busy"]=$(torch_rate "$precision")
    fi
  done
  stop_competitors
done

label() {
  read -r who precision threads <<<"$1"
  if [[ $who == torch ]]; then
    echo "PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)') $precision (2 threads)"
  elif [[ $threads == 0 ]]; then
    echo "mixtape $precision --threads 0 (tuned)"
  else
    echo "mixtape $precision --threads $threads"
  fi
}

echo "Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; $steps steps of batch 128; $(date -u +%Y-%m-%d)"
echo
echo "| configuration | quiet | 1 busy process | 2 busy processes |"
echo "|---|---|---|---|"
for config in "${configs[@]}"; do
  quiet=${rate["$config 0"]}
  row="| $(label "$config") | $quiet"
  for busy in 1 2; do
    r=${rate["$config $busy"]}
    row+=" | $r ($(awk -v a="$r" -v b="$quiet" 'BEGIN { printf "%.0f%%", 100 * a / b }'))"
  done
  echo "$row |"
done
