#!/usr/bin/env bash
# `mpirun -np 2 mixtape train ...` as the README describes it, checked end to end:
#  * equivalence: N ranks at batch B follow 1 process at batch N B (per-step
#    losses and the final accuracy), in fp32, with --grad-accum, in fp16
#    with the scaler (the same loss scales), with ZeRO-1, and in fp8 (each
#    recipe, 2 and 3 ranks, within a stated tolerance);
#  * only rank 0 writes the checkpoint and the log; one process resumes it;
#  * a rank killed mid-run makes the job exit non-zero quickly, and a rank
#    that stops answering (SIGSTOP) makes the other exit within MT_DIST_TIMEOUT.
# Usage: train_ranks.sh path/to/mixtape mpirun
source "$(dirname "$0")/ranks_lib.sh"  # mixtape=$1, mpirun=$2, a $tmp removed at exit
common=(--model mlp --train-limit 2048 --test-limit 1000 --threads 1 --no-progress)

# Issue 33: the MT_DIST_* settings are parsed when the process group starts, on the main thread: a bad
# MT_DIST_TIMEOUT is an `error:` on each rank, not a throw on MPI's communication thread that terminated both.
for setting in MT_DIST_TIMEOUT=garbage MT_DIST_BACKEND=garbage; do
  out=$(env "$setting" "$mpirun" -np 2 "$mixtape" train "${common[@]}" --steps 1 --shard-optimizer 2>&1)
  status=$?
  [ $status -ne 0 ] && grep -q "^error: ${setting%%=*} must be" <<<"$out" &&
    ! grep -qE "terminate called|on signal|core dumped" <<<"$out" ||
    fail "$setting under mpirun exited $status: $(tail -3 <<<"$out")"
done

equivalent fp32 2 1e-5 0.002 --precision fp32 --batch 128 -- --precision fp32 --batch 64
equivalent fp32-accum 2 1e-5 0.002 --precision fp32 --batch 128 -- --precision fp32 --batch 32 --grad-accum 2
equivalent fp16 2 2e-3 0.002 --precision fp16 --batch 128 -- --precision fp16 --batch 64
equivalent zero-fp32 2 1e-5 0.002 --precision fp32 --batch 128 -- --precision fp32 --batch 64 --shard-optimizer
equivalent zero-fp16-masters 2 2e-3 0.002 --precision fp16 --master-weights --batch 128 -- \
  --precision fp16 --master-weights --batch 64 --shard-optimizer
# ZeRO-1 with BF16 / 8-bit state: the shards' blocks (and rounding bits) are
# not one process's, so close, not equal (seen: 4e-4 and 5e-4 on mlp).
equivalent zero-int8-state 2 5e-3 0.01 --precision fp32 --optimizer-state int8 --batch 128 -- \
  --precision fp32 --optimizer-state int8 --batch 64 --shard-optimizer
equivalent zero-bf16-state 2 5e-3 0.01 --precision fp32 --optimizer-state bf16 --batch 128 -- \
  --precision fp32 --optimizer-state bf16 --batch 64 --shard-optimizer
# FP8, every Linear in FP8 (that delayed scaling's scales agree on every rank is test_fp8.cpp under
# mpirun). Half or third batches round differently in BF16 and FP8 than a whole one; seen 2026-12-04:
# 2 ranks max loss difference 2.9e-3 (block) to 4.6e-3 (current), accuracy within 0.005; ZeRO-1 the
# same as DDP; 3 ranks 1.5e-2 (bf16 alone: 1.4e-2), accuracy 0.008. Tolerances about twice those.
fp8=(--precision fp8 --fp8-history 16 --fp8-keep-bf16 none)
for recipe in current delayed block; do
  equivalent "fp8-$recipe" 2 1e-2 0.01 "${fp8[@]}" --fp8-recipe "$recipe" --batch 128 -- \
    "${fp8[@]}" --fp8-recipe "$recipe" --batch 64
done
equivalent zero-fp8-delayed 2 1e-2 0.01 "${fp8[@]}" --fp8-recipe delayed --batch 128 -- \
  "${fp8[@]}" --fp8-recipe delayed --batch 64 --shard-optimizer
equivalent fp8-delayed-3-ranks 3 3e-2 0.015 "${fp8[@]}" --fp8-recipe delayed --batch 96 -- \
  "${fp8[@]}" --fp8-recipe delayed --batch 32

# ZeRO-1's ledger: half of AdamW's state per rank (2 ranks), as its theory says.
ledger_ratio ZeRO-1 "$tmp/zero-fp32.1.jsonl" "$tmp/zero-fp32.2.jsonl" optimizer_state 0.5

# --ddp in a world of one (how the GPU check runs DDP over NCCL on one GPU):
# the same losses, bit for bit, as the plain run.
"$mixtape" train "${common[@]}" --epochs 1 --precision fp16 --batch 128 --ddp --log "$tmp/ddp1.jsonl" \
  >"$tmp/ddp1.out" 2>&1 || { fail "--ddp in a world of one failed"; tail -3 "$tmp/ddp1.out"; }
grep -q "x 1 rank (local, DDP)" "$tmp/ddp1.out" || fail "--ddp did not say it trains through DDP"
report=$(compare "$tmp/fp16.1.jsonl" "$tmp/ddp1.jsonl" 0 0 2>&1) || fail "--ddp in a world of one: $report"
echo "--ddp, world of one: $report"

# In a world of one too, DDP's buckets (with f16 gradients beside them under
# --master-weights) and ZeRO-1's flat buffer and shard are in the ledger's
# theory. Each run is its own reference: ratio 1, theory checked.
for flags in "--ddp --precision fp16 --master-weights" "--shard-optimizer --precision fp32"; do
  log="$tmp/ledger-${flags%% *}.jsonl"
  "$mixtape" train "${common[@]}" --steps 3 --batch 128 $flags --log "$log" >"$log.out" 2>&1 ||
    { fail "$flags in a world of one failed"; tail -3 "$log.out"; continue; }
  ledger_ratio "$flags, world of one" "$log" "$log" gradients 1
done

# DDP's gradients are views of its f32 buckets: per rank, the same gradient
# bytes as one process (not twice them), as the theory says.
ledger_ratio DDP "$tmp/fp32.1.jsonl" "$tmp/fp32.2.jsonl" gradients 1

# --drop-uneven: 2049 samples over 2 ranks leave 1024 each (16 batches of
# 64) instead of 1025 padded (17 batches).
for flag in "" --drop-uneven; do
  "$mpirun" -np 2 "$mixtape" train --model mlp --train-limit 2049 --test-limit 100 --threads 1 --no-progress \
    --epochs 1 --batch 64 $flag --log "$tmp/uneven$flag.jsonl" >"$tmp/uneven$flag.out" 2>&1 ||
    { fail "2 ranks ${flag:-padding} failed"; tail -5 "$tmp/uneven$flag.out"; continue; }
  steps=$(grep '"step"' "$tmp/uneven$flag.jsonl" | grep -vc '"eval"')
  want=$([ -n "$flag" ] && echo 16 || echo 17)
  [ "$steps" = "$want" ] || fail "2 ranks ${flag:-padding}: $steps steps, expected $want"
  echo "2049 samples on 2 ranks ${flag:-padded}: $steps steps"
done

# ZeRO-1 checkpoints hold the whole optimizer (consolidated), and resume.
"$mpirun" -np 2 "$mixtape" train "${common[@]}" --epochs 2 --batch 64 --steps 8 --shard-optimizer \
  --save "$tmp/zero.safetensors" >"$tmp/zero-save.out" 2>&1 || { fail "ZeRO-1 --save failed"; tail -5 "$tmp/zero-save.out"; }
"$mpirun" -np 2 "$mixtape" train "${common[@]}" --epochs 2 --batch 64 --shard-optimizer --resume "$tmp/zero.safetensors" \
  >"$tmp/zero-resume.out" 2>&1 || { fail "ZeRO-1 resume failed"; tail -5 "$tmp/zero-resume.out"; }
"$mpirun" -np 2 "$mixtape" train "${common[@]}" --epochs 2 --batch 64 --resume "$tmp/zero.safetensors" \
  >"$tmp/zero-to-ddp.out" 2>&1 || { fail "a ZeRO-1 checkpoint did not resume without sharding"; tail -5 "$tmp/zero-to-ddp.out"; }

# 8-bit state: a ZeRO-1 checkpoint (f32 values) resumes unsharded in 8 bits, and an unsharded
# 8-bit checkpoint (codes and absmax) resumes under ZeRO-1.
"$mpirun" -np 2 "$mixtape" train "${common[@]}" --epochs 2 --batch 64 --steps 8 --shard-optimizer --optimizer-state int8 \
  --save "$tmp/zero8.safetensors" >"$tmp/zero8-save.out" 2>&1 || { fail "ZeRO-1 int8 --save failed"; tail -5 "$tmp/zero8-save.out"; }
"$mpirun" -np 2 "$mixtape" train "${common[@]}" --epochs 2 --batch 64 --optimizer-state int8 --steps 12 \
  --resume "$tmp/zero8.safetensors" --save "$tmp/plain8.safetensors" >"$tmp/zero8-to-ddp.out" 2>&1 ||
  { fail "a ZeRO-1 int8 checkpoint did not resume without sharding"; tail -5 "$tmp/zero8-to-ddp.out"; }
grep -q "saved as f32, loaded as int8" "$tmp/zero8-to-ddp.out" || fail "the int8 resume did not say it requantized"
"$mpirun" -np 2 "$mixtape" train "${common[@]}" --epochs 2 --batch 64 --optimizer-state int8 --shard-optimizer \
  --resume "$tmp/plain8.safetensors" >"$tmp/plain8-to-zero.out" 2>&1 ||
  { fail "an unsharded int8 checkpoint did not resume under ZeRO-1"; tail -5 "$tmp/plain8-to-zero.out"; }

# --sync-bn: cnn's BatchNorms normalise over both ranks' samples, so 2 ranks at batch 32 follow
# one process at 64 (seen: 3.6e-7 in f32; without --sync-bn 2.9e-2), in fp32 and fp16 with the scaler.
for precision in fp32 fp16; do
  cnn=(--model cnn --train-limit 512 --test-limit 200 --threads 1 --no-progress --epochs 1 --precision "$precision")
  "$mixtape" train "${cnn[@]}" --batch 64 --log "$tmp/bn-$precision.1.jsonl" >"$tmp/bn-$precision.1.out" 2>&1 ||
    { fail "cnn $precision: 1 process failed"; tail -3 "$tmp/bn-$precision.1.out"; }
  "$mpirun" -np 2 "$mixtape" train "${cnn[@]}" --batch 32 --sync-bn --log "$tmp/bn-$precision.2.jsonl" \
    >"$tmp/bn-$precision.2.out" 2>&1 || { fail "cnn $precision --sync-bn: 2 ranks failed"; tail -5 "$tmp/bn-$precision.2.out"; }
  tol=$([ "$precision" = fp32 ] && echo 1e-5 || echo 2e-3)
  report=$(compare "$tmp/bn-$precision.1.jsonl" "$tmp/bn-$precision.2.jsonl" "$tol" 0.01 2>&1) ||
    fail "cnn $precision --sync-bn: $report"
  echo "cnn $precision --sync-bn: $report"
done

# Delayed FP8 scaling over 2 ranks reduces each amax over the ranks: after one step, rank 0's
# saved scales are one process's at the whole batch (inputs and weights: seen equal; gradients,
# which each rank's mean loss makes 2x larger: ratio 2 within 2.2e-2). Without the reduction the
# input scales were 27% off and the gradient ratios 23% (tried by hand). The per-step losses
# (the equivalence above) do not show it. It also found the ranks packing their amaxes in
# address order, which differs between processes: the max mixed different Linears' amaxes
# in most runs (up to 86% off), until they were packed in the order the Linears first ran.
fp8_one=(--model gpt-tiny --dataset synthetic-tokens --precision fp8 --fp8-recipe delayed --fp8-keep-bf16 none
  --train-limit 64 --test-limit 8 --threads 1 --no-progress --steps 1)
"$mixtape" train "${fp8_one[@]}" --batch 8 --save "$tmp/fp8-one.safetensors" >"$tmp/fp8-one.out" 2>&1 ||
  { fail "fp8 amax: 1 process failed"; tail -3 "$tmp/fp8-one.out"; }
"$mpirun" -np 2 "$mixtape" train "${fp8_one[@]}" --batch 4 --save "$tmp/fp8-two.safetensors" >"$tmp/fp8-two.out" 2>&1 ||
  { fail "fp8 amax: 2 ranks failed"; tail -5 "$tmp/fp8-two.out"; }
python3 - "$tmp/fp8-one.safetensors" "$tmp/fp8-two.safetensors" 2 <<'PY' || fail "fp8: the amaxes were not reduced over the ranks"
import json, struct, sys
def load(p):
    b=open(p,'rb').read(); n=struct.unpack('<Q',b[:8])[0]; h=json.loads(b[8:8+n]); base=8+n
    out={}
    for k,v in h.items():
        if k=="__metadata__" or v["dtype"]!="F32": continue
        s,e=v["data_offsets"]
        out[k]=list(struct.unpack("<%df"%((e-s)//4), b[base+s:base+e]))
    return out
one, ranks = load(sys.argv[1]), load(sys.argv[2]); world = float(sys.argv[3])
worst_in, worst_grad = 0.0, 0.0
for k in sorted(one):
    if not k.startswith("fp8.") or not k.endswith(".scale"): continue
    a, b = one[k][0], ranks[k][0]
    if ".grad_output." in k: worst_grad = max(worst_grad, abs(a / b - world) / world)
    else: worst_in = max(worst_in, abs(b / a - 1))
print(f"inputs/weights: worst relative scale difference {worst_in:.2e}; gradients: worst distance of the ratio from {world:g}: {worst_grad:.2e}")
assert worst_in <= 1e-2 and worst_grad <= 5e-2, "rank 0's FP8 scales are not the whole batch's"
PY

# Skip together under ZeRO-1, on the CLI's path (ranks_lib.sh).
skip_together ZeRO-1 --shard-optimizer

# Rank 0 alone writes the checkpoint; one process resumes it too (the position counts samples:
# train_fsdp.sh checks the losses of such a resume).
"$mpirun" -np 2 "$mixtape" train "${common[@]}" --epochs 2 --precision bf16 --batch 64 --steps 8 --save "$tmp/ck.safetensors" \
  >"$tmp/save.out" 2>&1 || { fail "2-rank run with --save failed"; tail -5 "$tmp/save.out"; }
[ -f "$tmp/ck.safetensors" ] || fail "no checkpoint written"
ls "$tmp" | grep -q "tmp\." && fail "a temporary checkpoint file was left behind"
"$mpirun" -np 2 "$mixtape" train "${common[@]}" --precision bf16 --batch 64 --epochs 2 --resume "$tmp/ck.safetensors" \
  >"$tmp/resume.out" 2>&1 || { fail "2-rank resume failed"; tail -5 "$tmp/resume.out"; }
out=$("$mixtape" train "${common[@]}" --precision bf16 --batch 128 --epochs 2 --resume "$tmp/ck.safetensors" 2>&1)
[ $? -eq 0 ] && grep -q "written by 2 rank(s), this run has 1: epoch 1 continues at sample 1024" <<<"$out" ||
  fail "a 1-process resume of a 2-rank checkpoint did not continue at its sample: $(tail -3 <<<"$out")"

# A rank killed mid-run: mpirun stops the job, non-zero, in seconds.
# The run must still be going when the kill lands 3 s in: 1000 epochs of 32
# steps take about 45 s on a fast core (50 epochs once took 4 s, then 2.3 s
# as the CPU kernels got faster, and the job ended before the kill).
long=(--model mlp --epochs 1000 --train-limit 2048 --test-limit 100 --threads 1 --no-progress --batch 64)
start=$(date +%s)
"$mpirun" -np 2 sh -c 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then (sleep 3; kill -KILL $$) & fi; exec "$0" "$@"' \
  "$mixtape" train "${long[@]}" >"$tmp/kill.out" 2>&1
status=$? elapsed=$(($(date +%s) - start))
[ $status -ne 0 ] || fail "a killed rank left the job exiting 0"
[ $elapsed -le 60 ] || fail "a killed rank took ${elapsed}s to end the job"
echo "killed rank: exit $status after ${elapsed}s"

# A rank that stops answering: the other gives up after MT_DIST_TIMEOUT and names why.
start=$(date +%s)
MT_DIST_TIMEOUT=5 "$mpirun" -np 2 -x MT_DIST_TIMEOUT \
  sh -c 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then (sleep 3; kill -STOP $$) & fi; exec "$0" "$@"' \
  "$mixtape" train "${long[@]}" >"$tmp/stop.out" 2>&1
status=$? elapsed=$(($(date +%s) - start))
[ $status -ne 0 ] || fail "a stopped rank left the job exiting 0"
[ $elapsed -le 60 ] || fail "a stopped rank took ${elapsed}s to end the job"
grep -q "did not complete within 5 s" "$tmp/stop.out" || { fail "no timeout message"; tail -5 "$tmp/stop.out"; }
echo "stopped rank: exit $status after ${elapsed}s"

[ $failures -eq 0 ] && echo "train_ranks: all checks passed"
exit $failures
