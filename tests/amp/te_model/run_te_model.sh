#!/usr/bin/env bash
# CTest's fp8_delayed_scaling_matches_numpy_model: mixtape's delayed scaling
# (CPU and sim) step by step against a NumPy model of Transformer Engine's
# rule. Exit 77 (skip) when /usr/bin/python3 has no NumPy.
#   tests/amp/te_model/run_te_model.sh <fp8_delayed_dump> <work dir>
set -euo pipefail
dump="$1"
work="$2"
here="$(cd "$(dirname "$0")" && pwd)"
if ! /usr/bin/python3 -c "import numpy" 2>/dev/null; then
  echo "fp8_delayed_scaling_matches_numpy_model: SKIPPED, /usr/bin/python3 cannot import numpy (python3-numpy)"
  exit 77
fi
mkdir -p "$work"
"$dump" "$work/delayed_scaling.jsonl"
exec /usr/bin/python3 "$here/te_delayed_scaling.py" "$work/delayed_scaling.jsonl"
