#!/usr/bin/env bash
# CTest's parity_with_pytorch: dump every op's records with mixtape, then
# recompute them in PyTorch (Debian's python3-torch). Exit 77 (skip) when
# PyTorch is not importable.
#   tests/parity/run_parity.sh <parity_dump> <work dir>
set -euo pipefail
dump="$1"
work="$2"
here="$(cd "$(dirname "$0")" && pwd)"
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "parity_with_pytorch: SKIPPED, /usr/bin/python3 cannot import torch (tools/scripts/setup.sh installs python3-torch)"
  exit 77
fi
mkdir -p "$work"
"$dump" "$work/parity_records.jsonl"
exec /usr/bin/python3 "$here/check_parity.py" "$work/parity_records.jsonl"
