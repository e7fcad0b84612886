"""Transformer Engine's delayed scaling rule, in NumPy, against mixtape.

TE (transformer_engine/pytorch/fp8.py) keeps for each FP8 tensor an amax
history of `amax_history_len` float32 values and a float32 scale:
  - the cast records max |x| into amax_history[0] (a running max within
    the step);
  - after the step, _default_get_amax_and_update_history takes
    amax = max(history) ("max") or history[0] ("most_recent"), then rolls
    the history by -1 (torch.roll) and zeroes slot 0;
  - _default_sf_compute sets scale = (fp8_max / amax) / 2**margin, keeping
    the old scale where amax is 0 or not finite.
This file writes that rule again with np.roll in float32 and checks every
step of fp8_delayed_dump's records bit for bit: the scale, 1 / scale and
the whole history.

  te_delayed_scaling.py <records.jsonl>
"""
import json
import sys
from collections import defaultdict

import numpy as np

FP8_MAX = {"e4m3": np.float32(448.0), "e5m2": np.float32(57344.0)}


def f32(bits):
    return np.array([bits], dtype=np.uint32).view(np.float32)[0]


def bits_of(x):
    return int(np.array([x], dtype=np.float32).view(np.uint32)[0])


def model(config, amaxes):
    """(scale, scale_inv, history) after each step's update, as TE computes them."""
    history = np.zeros(config["history_len"], dtype=np.float32)
    scale = np.float32(1.0)
    out = []
    for amax in amaxes:
        history[0] = np.maximum(history[0], amax)
        chosen = history.max() if config["algo"] == "max" else history[0]  # max propagates NaN, as torch.max
        history = np.roll(history, -1)
        history[0] = np.float32(0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            candidate = (FP8_MAX[config["format"]] / chosen) / np.float32(2.0 ** config["margin"])
        if chosen > 0 and np.isfinite(chosen):
            scale = np.float32(candidate)
        out.append((scale, np.float32(np.float32(1.0) / scale), history.copy()))
    return out


def main(path):
    runs = defaultdict(list)
    with open(path) as f:
        for line in f:
            record = json.loads(line)
            key = tuple(record[k] for k in ("device", "format", "history_len", "algo", "margin"))
            runs[key].append(record)
    if not runs:
        print(f"error: {path} holds no records")
        return 1
    failures = 0
    for key, records in sorted(runs.items()):
        records.sort(key=lambda r: r["step"])
        config = dict(zip(("device", "format", "history_len", "algo", "margin"), key))
        expected = model(config, [f32(r["amax"]) for r in records])
        for record, (scale, scale_inv, history) in zip(records, expected):
            got_history = [r for r in record["history"]]
            want_history = [bits_of(h) for h in history]
            if (record["scale"], record["scale_inv"], got_history) != (bits_of(scale), bits_of(scale_inv), want_history):
                failures += 1
                if failures <= 5:
                    print(f"MISMATCH {config} step {record['step']} (amax {f32(record['amax'])}): "
                          f"scale {f32(record['scale'])} want {scale}, scale_inv {f32(record['scale_inv'])} "
                          f"want {scale_inv}, history {[float(f32(b)) for b in got_history]} "
                          f"want {history.tolist()}")
                break
    steps = sum(len(r) for r in runs.values())
    print(f"te_delayed_scaling: {len(runs)} configurations, {steps} steps; {failures} configurations differ "
          "from the NumPy model of Transformer Engine's rule")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
