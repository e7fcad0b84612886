#!/usr/bin/env bash
# Side by side on one GPU: mixtape vs PyTorch (the GPU machine's own, 2.x)
# training the same GPT or Llama shape (the twins in tools/scripts/load_in_pytorch.py) with
# AdamW at the same batch and context, in bf16 and fp16 autocast (fp16 with a
# GradScaler): PyTorch eager with fused AdamW, and torch.compile for bf16.
# Then `mixtape bench` on bert-base: FP32, AMP, and AMP at the largest batch
# that fits FP32's memory. Prints Markdown tables; tools/scripts/gpu_check.sh runs it.
#
# Usage: bench/gpu_transformers_vs_pytorch.sh path/to/mixtape [steps]
# Environment (for a small smoke run elsewhere): MODEL (gpt2-124m; or llama-125m ...), BATCH (16),
# CONTEXT (1024), DEVICE (cuda), COMPILE (1), BERT (1).
set -uo pipefail
mixtape=$1
steps=${2:-10}
model=${MODEL:-gpt2-124m}
batch=${BATCH:-16}
context=${CONTEXT:-1024}
device=${DEVICE:-cuda}
here="$(cd "$(dirname "$0")" && pwd)"
python=${PYTHON:-python3}

mixtape_rate() {  # precision -> tokens/s (the trainer leaves its first step out)
  local log
  log=$(mktemp)
  "$mixtape" train --model "$model" --dataset synthetic-tokens --device "$device" --batch "$batch" \
    --context "$context" --precision "$1" --steps "$((steps + 1))" --train-limit "$((batch * (steps + 2)))" \
    --test-limit 8 --no-progress --log "$log" > /dev/null 2>&1 || { echo "failed"; rm -f "$log"; return; }
  "$python" -c "import json; s = [json.loads(l) for l in open('$log')][-1]['summary']; \
print(f\"{s['samples_per_s'] * $context:.0f}\")"
  rm -f "$log"
}

torch_rate() {  # precision compile -> tokens/s
  "$python" - "$model" "$batch" "$context" "$1" "$2" "$steps" "$device" "$here/../tools/scripts" <<'PY' 2>/dev/null || echo failed
import sys, time, torch
name, batch, context, precision, compile_it, steps, device, tools = sys.argv[1], int(sys.argv[2]), \
    int(sys.argv[3]), sys.argv[4], sys.argv[5] == "1", int(sys.argv[6]), sys.argv[7], sys.argv[8]
sys.path.insert(0, tools)
import load_in_pytorch as twins
torch.manual_seed(0)
config = {**twins.GPT_CONFIGS, **twins.LLAMA_CONFIGS}[name]
model = (twins.GPT if name in twins.GPT_CONFIGS else twins.Llama)(**config).to(device)
x = torch.randint(0, config["vocab"], (batch, context), device=device)
y = torch.randint(0, config["vocab"], (batch, context), device=device)
fused = {"fused": True} if device == "cuda" else {}
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **fused)
dtype = torch.float16 if precision == "fp16" else torch.bfloat16
scaler = torch.cuda.amp.GradScaler(enabled=precision == "fp16" and device == "cuda")
forward = torch.compile(model) if compile_it else model
def step():
    with torch.autocast(device, dtype=dtype):
        logits = forward(x)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
def sync():
    if device == "cuda":
        torch.cuda.synchronize()
for _ in range(3):
    step()
sync()
start = time.perf_counter()
for _ in range(steps):
    step()
sync()
print(f"{steps * batch * context / (time.perf_counter() - start):.0f}")
PY
}

ratio() { "$python" -c "a, b = '$1', '$2'; print(f'{float(a) / float(b):.2f}x' if a.isdigit() and b.isdigit() else '-')"; }

echo "$model, batch $batch x context $context, AdamW, $steps timed steps ($device):"
echo
echo "| precision | mixtape tokens/s | PyTorch eager tokens/s | ratio | torch.compile tokens/s | ratio |"
echo "|---|---|---|---|---|---|"
for precision in bf16 fp16; do
  ours=$(mixtape_rate "$precision")
  eager=$(torch_rate "$precision" 0)
  compiled="-"
  [ "${COMPILE:-1}" = 1 ] && [ "$precision" = bf16 ] && compiled=$(torch_rate "$precision" 1)
  echo "| $precision | $ours | $eager | $(ratio "$ours" "$eager") | $compiled | $(ratio "$ours" "$compiled") |"
done

if [ "${BERT:-1}" = 1 ]; then
  echo
  echo "bert-base (Brown genre passages of 512 bytes): FP32 vs AMP vs AMP at the batch FP32's memory allows"
  echo '```'
  "$mixtape" bench --model bert-base --dataset brown-genre --device "$device" --batch 32 --steps 10 --warmup-steps 2 \
    --train-limit 2048 --no-progress 2>&1 | tail -12
  echo '```'
fi
