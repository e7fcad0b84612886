#!/usr/bin/env bash
# `mpirun -np N mixtape train --shard grads|params` (fully sharded data
# parallel) as the README describes it, checked end to end:
#  * equivalence: N ranks at batch B follow 1 process at batch N B (per-step
#    losses, loss scales, the final accuracy) for ZeRO-2 and ZeRO-3, in fp32,
#    fp16 with the scaler and bf16, at 2 and 3 ranks, with --grad-accum and
#    --clip, on the simulator, on mlp and on gpt-tiny with activation
#    checkpointing; --param-dtype bf16 within a stated tolerance;
#  * the ledger per rank: half the optimizer state of one process at 2
#    ranks, and parameters and gradients at their peaks, as the theory says;
#    8-bit state under ZeRO-1 and ZeRO-3 with f32 embeddings as its theory;
#  * an inf on either rank skips the step on both, with equal scales;
#  * a sharded run's checkpoint is one process's: it resumes sharded, resumes
#    unsharded (DDP), resumes at another world size where the epoch stood,
#    and evaluates in one process; --save-sharded writes one
#    file per rank and an index, which resume sharded and are refused (with a
#    clear error) by eval, an unsharded run, another save's shard and a NaN.
# Usage: train_fsdp.sh path/to/mixtape mpirun
source "$(dirname "$0")/ranks_lib.sh"  # mixtape=$1, mpirun=$2, a $tmp removed at exit
common=(--model mlp --train-limit 2048 --test-limit 1000 --threads 1 --no-progress)

# mlp's units are its two Linears (and an empty root).
equivalent fsdp-params-fp32 2 1e-5 0.002 --precision fp32 --batch 128 -- --precision fp32 --batch 64 --shard params
equivalent fsdp-grads-fp32 2 1e-5 0.002 --precision fp32 --batch 128 -- --precision fp32 --batch 64 --shard grads
equivalent fsdp-params-fp16 2 2e-3 0.002 --precision fp16 --batch 128 -- --precision fp16 --batch 64 --shard params
equivalent fsdp-params-bf16 2 2e-3 0.005 --precision bf16 --batch 128 -- --precision bf16 --batch 64 --shard params
equivalent fsdp-params-accum 2 1e-5 0.002 --precision fp32 --batch 128 -- \
  --precision fp32 --batch 32 --grad-accum 2 --shard params
common=(--model mlp --train-limit 1920 --test-limit 1000 --threads 1 --no-progress)  # 20 batches of 96: no padding
equivalent fsdp-params-3-ranks 3 1e-5 0.002 --precision fp32 --batch 96 -- --precision fp32 --batch 32 --shard params
common=(--model mlp --train-limit 2048 --test-limit 1000 --threads 1 --no-progress)
# Parameters gathered and computed in bf16 (f32 masters, f32 reduce-scatter) against one
# process under bf16 autocast: mlp's Linears cast their weights to bf16 under autocast
# anyway (seen: the same losses as --shard params alone); models with norms differ more.
equivalent fsdp-param-dtype-bf16 2 2e-2 0.01 --precision bf16 --batch 128 -- \
  --precision bf16 --batch 64 --shard params --param-dtype bf16

# Clipping by the global norm: each rank's shard's squared norm summed over the ranks (a
# clip small enough to act on every step).
equivalent fsdp-params-clip 2 1e-5 0.002 --precision fp32 --batch 128 --clip 0.05 -- \
  --precision fp32 --batch 64 --clip 0.05 --shard params
# The CUDA path's code (on the simulator), fp16 with the scaler.
common=(--model mlp --train-limit 512 --test-limit 200 --threads 1 --no-progress --device sim)
equivalent fsdp-params-sim-fp16 2 2e-3 0.005 --precision fp16 --batch 128 -- --precision fp16 --batch 64 --shard params

# A transformer: each block a unit, the embeddings and the final norm the root; each block
# recomputed in backward (the recomputation gathers it again).
common=(--model gpt-tiny --dataset synthetic-tokens --train-limit 256 --test-limit 32 --threads 1 --no-progress)
equivalent fsdp-gpt-checkpointed 2 1e-4 1e-4 --precision fp32 --batch 16 --checkpoint-activations -- \
  --precision fp32 --batch 8 --checkpoint-activations --shard params
grep -q "sharded over 3 units" "$tmp/fsdp-gpt-checkpointed.2.out" || fail "gpt-tiny: not its two blocks and the root"

# The ledger at 2 ranks: half the optimizer state of one process, as the theory says; the
# parameters and gradients within the theory's bound.
common=(--model mlp --train-limit 2048 --test-limit 1000 --threads 1 --no-progress)
ledger_ratio "FSDP (params)" "$tmp/fsdp-params-fp32.1.jsonl" "$tmp/fsdp-params-fp32.2.jsonl" optimizer_state 0.5
# Parameters (the f32 shards, the root and two gathered units) and gradients (the shards and
# three units' buffers) at their own peaks equal their theory too, under ZeRO-3 and ZeRO-2.
for run in fsdp-params-fp32 fsdp-grads-fp32; do
  python3 - "$tmp/$run.2.jsonl" "$run" <<'PY' || fail "$run: the ledger is not its theory"
import json, sys
ledger = [json.loads(l)["summary"]["memory_ledger"] for l in open(sys.argv[1]) if "summary" in l][0]
for category in ("parameters", "gradients"):
    peak, theory = ledger["peak"][category], ledger["theory"][category]
    assert abs(peak - theory) <= 0.01 * theory, f"{category}: {peak} bytes at the peak, theory {theory}"
    print(f"{sys.argv[2]}: {category} {peak} bytes at the peak, theory {theory}")
PY
done

# 8-bit state under ZeRO-1 and ZeRO-3 on a model with embeddings (kept f32, and under ZeRO-1
# all on rank 0's first half of the flat layout): the optimizer state at its peak equals the
# theory counted over this rank's own parts, each stored as its whole parameter would be.
gpt=(--model gpt-tiny --dataset synthetic-tokens --train-limit 64 --test-limit 8 --threads 1 --no-progress)
for sharding in "--shard-optimizer" "--shard params"; do
  # shellcheck disable=SC2086
  "$mpirun" -np 2 "$mixtape" train "${gpt[@]}" --batch 8 --steps 2 --optimizer-state int8 $sharding \
    --log "$tmp/state.jsonl" >"$tmp/state.out" 2>&1 || { fail "int8 state with $sharding failed"; continue; }
  python3 - "$tmp/state.jsonl" "$sharding" <<'PY' || fail "int8 state with $sharding: the ledger is not its theory"
import json, sys
ledger = [json.loads(l)["summary"]["memory_ledger"] for l in open(sys.argv[1]) if "summary" in l][0]
peak, theory = ledger["peak"]["optimizer_state"], ledger["theory"]["optimizer_state"]
assert peak == theory, f"{peak} bytes at the peak, theory {theory}"
print(f"int8 state, {sys.argv[2]}: {peak} bytes of optimizer state per rank, as the theory says")
PY
done

# Skip together on the CLI's path: an inf in one rank's shard (ranks_lib.sh).
skip_together FSDP --shard params

# resumes <how> <checkpoint> <train flags...>: resumed for the rest of epoch 1, the per-step
# losses are those of the run that never stopped ($tmp/whole.jsonl).
resumes() {
  local how="$1" checkpoint="$2"
  shift 2
  "$mpirun" -np 2 "$mixtape" train "${common[@]}" --epochs 1 --batch 64 "$@" --resume "$checkpoint" \
    --log "$tmp/resumed.jsonl" >"$tmp/resume.out" 2>&1 ||
    { fail "$how did not resume"; tail -5 "$tmp/resume.out"; return; }
  python3 - "$tmp/whole.jsonl" "$tmp/resumed.jsonl" <<'PY' || fail "$how resumed differs from the uninterrupted run"
import json, sys
whole = [r["loss"] for r in map(json.loads, open(sys.argv[1])) if "skipped" in r][8:]
resumed = [r["loss"] for r in map(json.loads, open(sys.argv[2])) if "skipped" in r]
assert len(whole) == len(resumed) > 0 and max(abs(a - b) for a, b in zip(whole, resumed)) <= 1e-6, (whole, resumed)
PY
  echo "$how: resumed, steps 9-16 as the run that never stopped"
}

# Checkpoints: the whole model and the consolidated optimizer, so a sharded run resumes
# sharded or not, and the file evaluates in one process. Resumed for the rest of epoch 1,
# the per-step losses are those of the run that never stopped.
"$mpirun" -np 2 "$mixtape" train "${common[@]}" --epochs 1 --batch 64 --shard params --log "$tmp/whole.jsonl" \
  >"$tmp/whole.out" 2>&1 || { fail "FSDP: the uninterrupted run failed"; tail -5 "$tmp/whole.out"; }
"$mpirun" -np 2 "$mixtape" train "${common[@]}" --epochs 1 --batch 64 --steps 8 --shard params \
  --save "$tmp/fsdp.safetensors" >"$tmp/fsdp-save.out" 2>&1 || { fail "FSDP --save failed"; tail -5 "$tmp/fsdp-save.out"; }
resumes "an FSDP checkpoint under --shard params" "$tmp/fsdp.safetensors" --shard params
resumes "an FSDP checkpoint under --shard grads" "$tmp/fsdp.safetensors" --shard grads
resumes "an FSDP checkpoint under DDP" "$tmp/fsdp.safetensors"
"$mixtape" eval --checkpoint "$tmp/fsdp.safetensors" --test-limit 1000 >"$tmp/eval.out" 2>&1 ||
  { fail "an FSDP checkpoint did not evaluate in one process"; tail -3 "$tmp/eval.out"; }

# A whole checkpoint resumes at any world size: its position counts the epoch's samples.
# Saved by 2 ranks x 48 after 4 steps (384 samples), resumed by 3 ranks x 32 under
# --shard params and by 1 process x 96: 96 samples a step as before, so steps 5-8 are
# those of one process at 96 that never stopped (DDP's fp32 tolerance).
"$mixtape" train "${common[@]}" --precision fp32 --epochs 1 --batch 96 --steps 8 --log "$tmp/whole96.jsonl" >"$tmp/whole96.out" 2>&1 ||
  { fail "the 1-process run at 96 failed"; tail -3 "$tmp/whole96.out"; }
"$mpirun" -np 2 "$mixtape" train "${common[@]}" --precision fp32 --epochs 1 --batch 48 --steps 4 --shard params \
  --save "$tmp/world2.safetensors" >"$tmp/world2.out" 2>&1 || { fail "FSDP --save at 2 x 48 failed"; tail -5 "$tmp/world2.out"; }
for ranks in 3 1; do
  how="a 2-rank checkpoint resumed by $ranks"
  launch=("$mpirun" -np "$ranks") flags=(--shard params)
  [ "$ranks" = 1 ] && launch=() flags=()
  "${launch[@]}" "$mixtape" train "${common[@]}" --precision fp32 --epochs 1 --batch $((96 / ranks)) --steps 8 \
    "${flags[@]}" \
    --resume "$tmp/world2.safetensors" --log "$tmp/world$ranks.jsonl" >"$tmp/world$ranks.out" 2>&1 ||
    { fail "$how failed"; tail -5 "$tmp/world$ranks.out"; continue; }
  grep -q "written by 2 rank(s), this run has $ranks: epoch 1 continues at sample 384 of 2048" "$tmp/world$ranks.out" ||
    fail "$how: no line saying where the epoch continues"
  report=$(python3 - "$tmp/whole96.jsonl" "$tmp/world$ranks.jsonl" 2>&1 <<'PY'
import json, sys
whole, resumed = ({r["step"]: r["loss"] for r in map(json.loads, open(p)) if "skipped" in r} for p in sys.argv[1:3])
assert sorted(resumed) == [5, 6, 7, 8], sorted(resumed)
worst = max(abs(whole[s] - resumed[s]) for s in resumed)
assert worst <= 1e-5, (whole, resumed)
print(f"steps 5-8 within {worst:.2g} of one process at 96 that never stopped")
PY
  ) || { fail "$how differs from the run that never stopped: $report"; continue; }
  echo "$how: $report"
done

# --save-sharded: each rank writes its own shards beside an index, nothing gathered. Resumed
# under --shard params and --shard grads (the same units) for the rest of epoch 1, the losses
# are the uninterrupted run's; refused where a whole checkpoint is needed, and when a rank's
# file is another save's or holds a NaN.
sharded=(--epochs 1 --batch 64 --shard params --save-sharded)
"$mpirun" -np 2 "$mixtape" train "${common[@]}" "${sharded[@]}" --steps 8 --save "$tmp/sharded.safetensors" \
  >"$tmp/sharded-save.out" 2>&1 || { fail "--save-sharded failed"; tail -5 "$tmp/sharded-save.out"; }
for file in sharded.safetensors sharded.rank0-of-2.safetensors sharded.rank1-of-2.safetensors; do
  [ -f "$tmp/$file" ] || fail "--save-sharded wrote no $file"
done
resumes "a sharded checkpoint under --shard params" "$tmp/sharded.safetensors" --shard params
resumes "a sharded checkpoint under --shard grads" "$tmp/sharded.safetensors" --shard grads
refused() {  # refused <what> <pattern> <command...>: a non-zero exit with an error: line matching <pattern>
  local what="$1" pattern="$2"
  shift 2
  out=$("$@" 2>&1) && { fail "$what was not refused"; return; }
  grep -qE "^error( \(rank [0-9]+ of [0-9]+\))?: .*$pattern" <<<"$out" || fail "$what: no clear error: $(head -3 <<<"$out")"
}
refused "eval of a sharded checkpoint" "is sharded" "$mixtape" eval --checkpoint "$tmp/sharded.safetensors"
refused "an unsharded resume of a sharded checkpoint" "is sharded" "$mpirun" -np 2 "$mixtape" train "${common[@]}" \
  --epochs 1 --batch 64 --resume "$tmp/sharded.safetensors"
refused "a sharded checkpoint at another world size" "sharded over 2 rank\(s\), this run has 3" "$mpirun" -np 3 \
  "$mixtape" train "${common[@]}" --epochs 1 --batch 64 --shard params --resume "$tmp/sharded.safetensors"
"$mpirun" -np 2 "$mixtape" train "${common[@]}" "${sharded[@]}" --steps 4 --save "$tmp/other.safetensors" \
  >"$tmp/other-save.out" 2>&1 || fail "a second --save-sharded failed"
cp "$tmp/sharded.rank1-of-2.safetensors" "$tmp/kept.safetensors"
cp "$tmp/other.rank1-of-2.safetensors" "$tmp/sharded.rank1-of-2.safetensors"
refused "another save's shard" "not rank 1's shard" "$mpirun" -np 2 "$mixtape" train "${common[@]}" "${sharded[@]}" \
  --resume "$tmp/sharded.safetensors" --save "$tmp/again.safetensors"
cp "$tmp/kept.safetensors" "$tmp/sharded.rank1-of-2.safetensors"
refused "--save-sharded writing over --resume" "would destroy the input" "$mpirun" -np 2 "$mixtape" train \
  "${common[@]}" "${sharded[@]}" --resume "$tmp/sharded.rank0-of-2.safetensors" --save "$tmp/sharded.safetensors"
python3 - "$tmp/sharded.rank0-of-2.safetensors" <<'PY'
import json, struct, sys
b = bytearray(open(sys.argv[1], "rb").read()); n = struct.unpack("<Q", b[:8])[0]
start = 8 + n + json.loads(b[8:8 + n])["master"]["data_offsets"][0]
b[start:start + 4] = struct.pack("<f", float("nan")); open(sys.argv[1], "wb").write(b)
PY
refused "a shard holding a NaN" "non-finite" "$mpirun" -np 2 "$mixtape" train "${common[@]}" "${sharded[@]}" \
  --resume "$tmp/sharded.safetensors" --save "$tmp/again.safetensors"

[ $failures -eq 0 ] && echo "train_fsdp: all checks passed"
exit $failures
