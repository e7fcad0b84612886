#!/usr/bin/env bash
# CTest's checkpoints_load_in_pytorch: a checkpoint written by `mixtape train`
# loads strictly into the PyTorch twin of its model (tools/scripts/load_in_pytorch.py)
# and scores what `mixtape eval` scores: the same test accuracy for an mlp,
# the same validation loss on Brown for gpt-tiny and llama-moe-tiny, the same genre accuracy
# for bert-tiny. Exit 77 (skip) when
# PyTorch is not importable.
#   tests/tools/cli/checkpoints_in_pytorch.sh path/to/mixtape
set -euo pipefail
mixtape="$1"
here="$(cd "$(dirname "$0")" && pwd)"
loader="$here/../../../tools/scripts/load_in_pytorch.py"
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "checkpoints_load_in_pytorch: SKIPPED, /usr/bin/python3 cannot import torch (tools/scripts/setup.sh installs python3-torch)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The first number after `label` in `text`.
number_after() { sed -nE "s/.*$1 ([0-9.]+).*/\1/p" <<<"$2" | head -1; }

"$mixtape" train --model mlp --precision fp32 --steps 20 --train-limit 2048 --test-limit 100 --no-progress \
  --save "$tmp/mlp.safetensors" > /dev/null
ours=$("$mixtape" eval --checkpoint "$tmp/mlp.safetensors" --device cpu)
theirs=$(/usr/bin/python3 "$loader" "$tmp/mlp.safetensors")
echo "mixtape: $ours"
echo "$theirs"
[ "$(number_after "test accuracy" "$ours")" = "$(number_after "test accuracy" "$theirs")" ] ||
  { echo "FAIL: the mlp's test accuracy differs in PyTorch"; exit 1; }

# A language model trained briefly on Brown: `mixtape eval` and its PyTorch
# twin give one validation loss. Both sum 128k f32 per-token losses in
# different orders, and mixtape prints 4 decimals: agreement to 1e-4 nats.
same_validation_loss() {
  local model="$1"
  "$mixtape" train --model "$model" --precision fp32 --steps 30 --batch 16 --lr 3e-3 --test-limit 100 --no-progress \
    --save "$tmp/$model.safetensors" > /dev/null
  ours=$("$mixtape" eval --checkpoint "$tmp/$model.safetensors" --device cpu --test-limit 2000)
  theirs=$(/usr/bin/python3 "$loader" "$tmp/$model.safetensors" --test-limit 2000)
  echo "mixtape: $ours"
  echo "$theirs"
  a=$(number_after "validation loss" "$ours")
  b=$(number_after "validation loss" "$theirs")
  /usr/bin/python3 -c "import sys; a, b = float('$a'), float('$b'); sys.exit(0 if abs(a - b) < 1e-4 else 1)" ||
    { echo "FAIL: $model's validation loss differs in PyTorch ($a vs $b)"; exit 1; }
}
same_validation_loss gpt-tiny
# A Llama whose MLPs are mixtures of experts: HF's Llama names, Mixtral's
# router name, the stacked experts, and evaluation's capacity-free routing.
same_validation_loss llama-moe-tiny
"$mixtape" train --model bert-tiny --precision fp32 --steps 10 --batch 16 --context 64 --test-limit 100 \
  --no-progress --save "$tmp/bert.safetensors" > /dev/null
ours=$("$mixtape" eval --checkpoint "$tmp/bert.safetensors" --device cpu --test-limit 1000)
theirs=$(/usr/bin/python3 "$loader" "$tmp/bert.safetensors" --test-limit 1000)
echo "mixtape: $ours"
echo "$theirs"
[ "$(number_after "test accuracy" "$ours")" = "$(number_after "test accuracy" "$theirs")" ] ||
  { echo "FAIL: bert-tiny's genre accuracy differs in PyTorch"; exit 1; }
echo "the mlp, gpt-tiny, llama-moe-tiny and bert-tiny checkpoints load strictly into PyTorch and score the same"
