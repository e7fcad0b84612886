#!/usr/bin/env bash
# `mixtape train --tensorboard` writes event files an independent reader
# (tensorboard_events.py) decodes to the same numbers as --log.
# Usage: tensorboard_roundtrip.sh path/to/mixtape
set -euo pipefail
mixtape="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$mixtape" train --model mlp --precision fp16 --steps 8 --train-limit 1024 --test-limit 100 --no-progress \
  --log "$tmp/m.jsonl" --tensorboard "$tmp/tb" > "$tmp/out.txt"
/usr/bin/python3 "$(dirname "$0")/tensorboard_events.py" "$tmp/tb" "$tmp/m.jsonl"
