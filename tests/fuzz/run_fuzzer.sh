#!/usr/bin/env bash
# Runs one libFuzzer target over its committed inputs:
#   run_fuzzer.sh replay  <fuzzer> <corpus dir> <regressions dir>   each input once
#   run_fuzzer.sh <secs>  <fuzzer> <corpus dir> <regressions dir>   fuzz for <secs> seconds
# New inputs go to a temporary folder (the committed corpus is never
# written). A crash, a sanitizer report, a leak, an input slower than 10 s
# or a run over 2.5 GB fails, and the input that did it is printed in hex
# (save it under regressions/<target>/ with the fix).
set -euo pipefail
mode=$1
fuzzer=$2
corpus=$3
regressions=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/new" "$work/artifacts"
inputs=("$corpus")
[ -d "$regressions" ] && inputs+=("$regressions")
common=(-timeout=10 -rss_limit_mb=2560 -max_len=16384 -artifact_prefix="$work/artifacts/" -print_final_stats=1)
export ASAN_OPTIONS=${ASAN_OPTIONS:-allocator_may_return_null=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
if [ "$mode" = replay ]; then
  "$fuzzer" "${common[@]}" -runs=0 "${inputs[@]}" > "$work/log" 2>&1 || status=$?
else
  "$fuzzer" "${common[@]}" -max_total_time="$mode" -seed=1 "$work/new" "${inputs[@]}" > "$work/log" 2>&1 || status=$?
fi
grep -E "^(INFO: |#[0-9]+ +(INITED|DONE))|stat::number_of_executed_units|stat::peak_rss" "$work/log" | tail -6 || true
if [ "$status" -ne 0 ]; then
  tail -60 "$work/log"
  for artifact in "$work"/artifacts/*; do
    [ -f "$artifact" ] || continue
    echo "run_fuzzer: the failing input ($(basename "$artifact"), $(stat -c %s "$artifact") bytes):"
    od -A x -t x1z -v "$artifact" | head -64
  done
  exit "$status"
fi
