#!/usr/bin/env bash
# Kill tests: `mixtape train --save` killed with SIGKILL at random moments
# (its epochs train, evaluate and save in a loop) and while it writes its
# checkpoint (as soon as its temporary file appears, at a random point of
# the write).
# After every kill the checkpoint on disk must be a whole one (the old or the
# new: `mixtape eval` loads it), temporary files of killed runs must not pile
# up (the next save removes them), and at least a few kills must really have
# landed mid-write (a temporary file was left), or the test proved nothing.
# Usage: kill_during_save.sh path/to/mixtape
set -u
mixtape="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ck="$tmp/ck.safetensors"
failures=0 hits=0 kills=12
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
# Tiny epochs, so a checkpoint is written every few tens of milliseconds.
run=(train --model cnn --epochs 100000 --train-limit 64 --test-limit 16 --batch 64 --threads 1 --no-progress
  --save "$ck")
for i in $(seq 1 $kills); do
  "$mixtape" "${run[@]}" >"$tmp/run.out" 2>&1 &
  pid=$!
  if [ $((i % 2)) -eq 1 ]; then
    deadline=$((SECONDS + ${KILL_TEST_WAIT:-60}))  # a save that never shows a temporary file: give up
    while [ ! -e "$ck.tmp.$pid" ] && [ $SECONDS -lt $deadline ] && kill -0 $pid 2>/dev/null; do :; done
  else
    sleep "$((RANDOM % 2)).$((RANDOM % 10))"  # a random moment: loading, training, evaluating or saving
  fi
  kill -KILL $pid 2>/dev/null
  wait $pid 2>/dev/null
  [ -e "$ck.tmp.$pid" ] && hits=$((hits + 1))
  if [ -e "$ck" ]; then
    "$mixtape" eval --checkpoint "$ck" --test-limit 16 >"$tmp/eval.out" 2>&1 ||
      { fail "after kill $i the checkpoint does not load:"; tail -3 "$tmp/eval.out"; }
  fi
  left=$(find "$tmp" -name 'ck.safetensors.tmp.*' | wc -l)
  [ "$left" -le 1 ] || fail "$left temporary files after kill $i: those of earlier killed runs were not removed"
done
[ $hits -ge 3 ] || fail "only $hits of $kills kills landed during a checkpoint write"
# A run that finishes removes what the killed ones left.
"$mixtape" train --model cnn --epochs 1 --train-limit 64 --test-limit 16 --batch 64 --threads 1 --no-progress \
  --save "$ck" >"$tmp/run.out" 2>&1 || { fail "the last run failed:"; tail -3 "$tmp/run.out"; }
left=$(find "$tmp" -name 'ck.safetensors.tmp.*' | wc -l)
[ "$left" -eq 0 ] || fail "$left temporary files left after a complete run"
echo "kill_during_save: $kills kills, $hits during a checkpoint write, $failures failures"
exit $failures
