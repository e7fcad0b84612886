#!/usr/bin/env bash
# Verified-only defaults from the command line, on `sim` standing for a GPU
# (MT_SIM_GPU_IDENTITY) with an empty results cache:
#   1. a training process that skips the checks (MT_KERNEL_CHECKS=off) runs
#      no own GEMM rung: the v1 rung stands in for cuBLASLt, with a warning;
#   2. a training process runs the missing checks first (child processes),
#      then `auto` uses the own rungs;
#   3. the next one finds them cached and checks nothing;
#   4. `mixtape info --verify` prints the table.
# Usage: kernel_checks.sh path/to/mixtape
set -u
mixtape="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export MT_CACHE_DIR="$tmp/cache" MT_SIM_GPU_IDENTITY="NVIDIA H200;9.0;13000" MT_PROFILE=1
failures=0
fail() {
  echo "FAIL: $1"
  echo "$2" | tail -15
  failures=$((failures + 1))
}
train() { "$mixtape" train --device sim --model mlp --steps 2 --batch 32 --train-limit 256 --test-limit 64 --no-progress 2>&1; }
own_rungs='^(gemm_v[2357]_kernel|attention_v[23]_)'

out=$(MT_KERNEL_CHECKS=off train)
grep -q "gemm.v7 .*has not passed its check on sim = NVIDIA H200" <<<"$out" || fail "no warning for the unverified v7" "$out"
grep -qE "$own_rungs" <<<"$out" && fail "an unverified own rung ran" "$out"
grep -q "^gemm_v1_kernel" <<<"$out" || fail "the v1 stand-in did not run" "$out"

out=$(train)
grep -q "kernel check gemm.v7: verified" <<<"$out" || fail "the training process did not check v7" "$out"
grep -q "^gemm_v7_kernel" <<<"$out" || fail "v7 did not run once verified" "$out"
grep -q "^gemm_v1_kernel" <<<"$out" && fail "the stand-in ran although v7 is verified" "$out"
[ -s "$tmp/cache/kernel_checks.json" ] || fail "no results file" "$(ls -la "$tmp/cache")"

out=$(train)
grep -q "kernel check" <<<"$out" && fail "checks ran again although cached" "$out"
grep -q "^gemm_v7_kernel" <<<"$out" || fail "v7 did not run from the cache" "$out"

out=$("$mixtape" info --verify --device sim 2>&1)
[ "$(grep -cE "^  [a-z0-9.]+ +verified " <<<"$out")" = 10 ] || fail "info --verify: not 10 verified rows" "$out"

[ $failures -eq 0 ] && echo "kernel checks: all passed"
exit $((failures > 0))
