#!/usr/bin/env bash
# Side by side on this machine's CPU: mixtape vs PyTorch (Debian's
# python3-torch) training gpt-small, llama-small and bert-tiny, the same model shapes (the
# twins in tools/scripts/load_in_pytorch.py), AdamW, the same batch and sequence
# length, in fp32 and in bf16 autocast, both on 2 threads. Prints training
# tokens/s of each and the ratio, as a Markdown table. Run it on an idle
# machine: anything else running skews both sides.
# The sides alternate ROUNDS times (default 3) and the table compares medians
# (bench/side_by_side.sh).
# Usage: [PRECISIONS="fp32 bf16"] [MODELS="gpt-small llama-small bert-tiny"] [ROUNDS=3] \
#        bench/cpu_transformers_vs_pytorch.sh [build-dir] [steps]
# (PRECISIONS=fp32 skips PyTorch 1.13's CPU bf16, which takes minutes per config.)
set -euo pipefail
build=${1:-build}
steps=${2:-10}
here="$(cd "$(dirname "$0")" && pwd)"
export OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive
source "$here/side_by_side.sh"

# model  dataset  batch  context
configs=("gpt-small synthetic-tokens 8 256" "llama-small synthetic-tokens 8 256" "bert-tiny brown-genre 32 128")
models=" ${MODELS:-gpt-small llama-small bert-tiny} "

mixtape_rate() {  # model dataset batch context precision -> tokens/s
  local log
  log=$(mktemp)
  # The first step is left out of the trainer's throughput (one-time set-up).
  # --threads 2 as PyTorch's set_num_threads(2): the default (0) would spend
  # trial steps of this short run on 1 thread (the ThreadTuner).
  "$build/mixtape" train --model "$1" --dataset "$2" --batch "$3" --context "$4" --precision "$5" --threads 2 \
    --steps "$((steps + 1))" --train-limit "$(($3 * (steps + 2)))" --test-limit 8 --no-progress --log "$log" > /dev/null
  /usr/bin/python3 -c "import json, sys; s = [json.loads(l) for l in open('$log')][-1]['summary']; \
print(f\"{s['samples_per_s'] * $4:.0f}\")"
  rm -f "$log"
}

torch_rate() {  # model batch context precision -> tokens/s
  /usr/bin/python3 - "$@" "$steps" "$here/../tools/scripts" <<'PY'
import sys, time, torch
model_name, batch, context, precision, steps, tools = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
    sys.argv[4], int(sys.argv[5]), sys.argv[6]
sys.path.insert(0, tools)
import load_in_pytorch as twins
torch.set_num_threads(2)
torch.manual_seed(0)
if model_name.startswith("gpt") or model_name.startswith("llama"):
    gpt = model_name.startswith("gpt")
    config = (twins.GPT_CONFIGS if gpt else twins.LLAMA_CONFIGS)[model_name]
    model = (twins.GPT if gpt else twins.Llama)(**config)
    x = torch.randint(0, config["vocab"], (batch, context))
    y = torch.randint(0, config["vocab"], (batch, context))
    loss_of = lambda logits: torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
else:
    model = twins.Bert(15, **twins.BERT_CONFIGS[model_name])
    x = torch.randint(0, 256, (batch, context))
    x[:, 0] = twins.CLS
    y = torch.randint(0, 15, (batch,))
    loss_of = lambda logits: torch.nn.functional.cross_entropy(logits, y)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
def step():
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
        loss = loss_of(model(x))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
step()
start = time.perf_counter()
for _ in range(steps):
    step()
print(f"{steps * batch * context / (time.perf_counter() - start):.0f}")
PY
}

echo "| model | batch x context | precision | mixtape tokens/s | PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)') tokens/s | ratio | rounds: mixtape / PyTorch |"
echo "|---|---|---|---|---|---|---|"
for config in "${configs[@]}"; do
  read -r model dataset batch context <<<"$config"
  [[ "$models" == *" $model "* ]] || continue
  for precision in ${PRECISIONS:-fp32 bf16}; do
    echo "| $model | $batch x $context | $precision | $(side_by_side "mixtape_rate $model $dataset $batch $context $precision" \
      "torch_rate $model $batch $context $precision") |"
  done
done
