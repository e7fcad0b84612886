#!/usr/bin/env bash
# The HTML report (issue 13) renders in headless Chromium without console
# errors or network requests, holds its plots, and shows the run's final
# numbers as the --log summary records them (tests/tools/cli/browser_check.py
# compares them). Covers `train --report`, `report` on the same log and on a
# log cut off mid-line, and `compare`. Exits 77 (skipped) without Chromium:
# `tools/scripts/setup.sh --browser` installs it, and `make test` runs that.
# Usage: report_in_browser.sh path/to/mixtape
set -euo pipefail
mixtape="$1"
check="/usr/bin/python3 $(dirname "$0")/browser_check.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chromium="${MT_CHROMIUM:-/usr/bin/chromium}"
if [ ! -x "$chromium" ]; then
  echo "browser test skipped: chromium is not installed (tools/scripts/setup.sh --browser installs it)"
  exit 77
fi
plots=(--require-plot plot-loss --require-plot plot-scale --require-plot plot-grad-norm --require-plot plot-lr
       --require-plot plot-throughput --require-plot plot-memory --require-plot plot-ledger)

echo "== train --report (mlp, fp16 with the GradScaler)"
"$mixtape" train --model mlp --dataset synthetic --precision fp16 --steps 12 --batch 64 --train-limit 1024 \
  --test-limit 128 --no-progress --dtype-report --log "$tmp/m.jsonl" --report "$tmp/train.html" > "$tmp/train.txt"
grep -q "report written to" "$tmp/train.txt" 2>/dev/null || test -s "$tmp/train.html"
$check "$tmp/train.html" --summary "$tmp/m.jsonl" "${plots[@]}"
grep -q 'class="dtypes"' "$tmp/train.html" || { echo "FAIL: no autocast dtype table in the page"; exit 1; }

echo "== report from the same log"
"$mixtape" report "$tmp/m.jsonl" --out "$tmp/report.html"
$check "$tmp/report.html" --summary "$tmp/m.jsonl" "${plots[@]}"

echo "== report from a log cut off mid-line: the valid part is drawn and the page says where it stopped"
head -c "$(( $(stat -c %s "$tmp/m.jsonl") - 40 ))" "$tmp/m.jsonl" > "$tmp/cut.jsonl"
"$mixtape" report "$tmp/cut.jsonl" --out "$tmp/cut.html" 2> "$tmp/cut.err"
grep -q "cut off mid-line" "$tmp/cut.err" || { echo "FAIL: no word of the cut line"; cat "$tmp/cut.err"; exit 1; }
grep -q 'class="problem"' "$tmp/cut.html" || { echo "FAIL: the page does not say where reading stopped"; exit 1; }
$check "$tmp/cut.html" --require-plot plot-loss

echo "== compare (fp32, fp16, bf16 on one page)"
mkdir "$tmp/logs"
"$mixtape" compare --model mlp --dataset synthetic --steps 6 --batch 64 --train-limit 512 --test-limit 128 \
  --no-progress --out "$tmp/compare.html" --log-dir "$tmp/logs" > "$tmp/compare.txt"
for p in fp32 fp16 bf16; do
  $check "$tmp/compare.html" --summary "$tmp/logs/compare-$p.jsonl" --require-plot plot-loss --require-plot plot-ledger
done
echo "browser checks passed"
