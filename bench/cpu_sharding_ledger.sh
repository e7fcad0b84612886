#!/usr/bin/env bash
# What each rank keeps of a model's training state, by optimizer state dtype
# and sharding level (issue 37): `mixtape train --memory --log` under
# `mpirun -np N`, rank 0's memory ledger against its theory: each
# category's own peak over the run (parameters with FSDP's f32 shards and
# gathered units, gradients with the reduce buffers, optimizer state), and
# their sum in bytes per model parameter (the categories need not peak
# together, so the sum bounds what they hold at once). Sharding levels:
# none (DDP where N > 1), ZeRO-1 (--shard-optimizer), ZeRO-2 (--shard
# grads), ZeRO-3 (--shard params), ZeRO-3 with --param-dtype bf16.
# Short runs (2 steps): the figures are memory, not speed.
# Usage: bench/cpu_sharding_ledger.sh [build-dir] [model] [ranks...]   (default: build gpt-small 1 2 3)
set -euo pipefail
build=${1:-build}
model=${2:-gpt-small}
shift $(($# > 2 ? 2 : $#))
ranks_list=("${@:-1 2 3}")
[ ${#ranks_list[@]} -eq 1 ] && read -r -a ranks_list <<<"${ranks_list[0]}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "\`mixtape train --model $model --steps 2 --batch 4 --memory\`, $(date -u +%Y-%m-%d), $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
echo
echo "| ranks | sharding | state | parameters MiB (theory) | gradients MiB (theory) | optimizer state MiB (theory) | sum, bytes per parameter |"
echo "|---|---|---|---|---|---|---|"
for ranks in "${ranks_list[@]}"; do
  for sharding in none ZeRO-1 ZeRO-2 ZeRO-3 "ZeRO-3 bf16"; do
    case $sharding in
      none) flags=() ;;
      ZeRO-1) flags=(--shard-optimizer) ;;
      ZeRO-2) flags=(--shard grads) ;;
      ZeRO-3) flags=(--shard params) ;;
      "ZeRO-3 bf16") flags=(--shard params --param-dtype bf16) ;;
    esac
    for state in f32 bf16 int8; do
      log="$tmp/$ranks-${sharding// /-}-$state.jsonl"
      mpirun -np "$ranks" "$build/mixtape" train --model "$model" --steps 2 --batch 4 --threads 1 --no-progress \
        --test-limit 8 --optimizer-state "$state" "${flags[@]}" --log "$log" >"$log.out" 2>&1 ||
        { echo "| $ranks | $sharding | $state | failed: $(tail -1 "$log.out") | | | |"; continue; }
      python3 - "$log" "$ranks" "$sharding" "$state" <<'PY'
import json, sys
summary = [json.loads(l)["summary"] for l in open(sys.argv[1]) if '"summary"' in l][0]
ledger, parameters = summary["memory_ledger"], summary["parameters"]
mib = lambda b: b / (1 << 20)
cell = lambda c: f"{mib(ledger['peak'][c]):.2f} ({mib(ledger['theory'][c]):.2f})"
state_bytes = sum(ledger["peak"][c] for c in ("parameters", "gradients", "master_weights", "optimizer_state"))
print(f"| {sys.argv[2]} | {sys.argv[3]} | {sys.argv[4]} | {cell('parameters')} | {cell('gradients')} | "
      f"{cell('optimizer_state')} | {state_bytes / parameters:.2f} |")
PY
    done
  done
done
