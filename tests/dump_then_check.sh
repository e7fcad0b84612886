#!/usr/bin/env bash
# The tests where mixtape writes records and Python checks them
# (parity_with_pytorch, fp8_delayed_scaling_matches_numpy_model): run the
# dump program into the work folder, then the checker on what it wrote.
# Exit 77 (CTest: skipped) when /usr/bin/python3 cannot import the module
# the checker needs.
#   tests/dump_then_check.sh <test name> <python module> <dump program> <work dir> <records file> <checker.py>
set -euo pipefail
name="$1"
module="$2"
dump="$3"
work="$4"
records="$5"
checker="$6"
if ! /usr/bin/python3 -c "import $module" 2>/dev/null; then
  echo "$name: SKIPPED, /usr/bin/python3 cannot import $module (tools/scripts/setup.sh installs it)"
  exit 77
fi
mkdir -p "$work"
"$dump" "$work/$records"
exec /usr/bin/python3 "$checker" "$work/$records"
