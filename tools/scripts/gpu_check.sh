#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU, run every test (the CUDA
# ones included, the kernels once more under compute-sanitizer), the GEMM
# ladder against cuBLASLt, the bandwidth benchmarks, and fp16 training runs
# of cnn and resnet on Fashion-MNIST; write one markdown report and the logs.
# No network, no package manager: only the driver and what travels.
#
#   tools/scripts/gpu_check.sh [pack-or-build-dir] [out-dir]
#
# The first stage checks every own kernel family on the GPU (`mixtape info
# --verify`, a table at the top of the report); the later stages use the
# own kernels only where they passed.
# The first argument is a pack made by tools/scripts/gpu_pack.sh (executables built
# here + the dataset) or a build directory. Without either, it builds one
# (needs Eigen/fmt/spdlog/CLI11/Boost headers on that machine).
# Time: about 6 minutes on one H200: training to accuracy (bounded by
# GPU_CHECK_TRAIN_S) runs alongside the tests, then a sweep of short runs over
# precisions, back ends and batch sizes, then the benchmarks. Stages can be
# left out: GPU_CHECK_TESTS=0, GPU_CHECK_ACCURACY=0, GPU_CHECK_SWEEP=0,
# GPU_CHECK_BENCH=0; GPU_CHECK_QUICK=1 leaves out all training (accuracy and
# sweep). GPU_CHECK_SWEEP_BATCHES lists batch:steps pairs (default 128:400),
# GPU_CHECK_SWEEP_PRECISIONS the precisions, GPU_CHECK_SWEEP_BACKENDS=0 leaves
# out the own-kernel rows; GPU_CHECK_ACCURACY_RUNS picks accuracy runs by name;
# GPU_CHECK_PROFILE=0 leaves out the profiled runs that follow the sweep;
# GPU_CHECK_GRAPH=0 leaves out the eager-vs-CUDA-graph steps/s table
# (GPU_CHECK_GRAPH_RUNS lists model:batch:steps triples); GPU_CHECK_DDP=0 the
# plain-vs-DDP-over-NCCL table (GPU_CHECK_DDP_RUNS likewise).
# GPU_CHECK_TRANSFORMERS=0 leaves out the transformer comparison with
# PyTorch (gpt2-124m, bert-base; up to 4 minutes of the bench stage) and
# GPU_CHECK_LLAMA=0 the same for llama-125m (up to 150 s),
# GPU_CHECK_ATTENTION=0 the attention ladder (up to 3 minutes); none has
# run on a GPU yet, so their share of the 8-minute budget is unmeasured.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
source_dir=${1:-build-gpu}
out=${2:-bench/results}
mkdir -p "$out"
out=$(cd "$out" && pwd)
report="$out/gpu_check.md"
train_seconds=${GPU_CHECK_TRAIN_S:-240}
cnn_epochs=${GPU_CHECK_CNN_EPOCHS:-10}
resnet_epochs=${GPU_CHECK_RESNET_EPOCHS:-15}
start=$(date +%s)
quick=${GPU_CHECK_QUICK:-0}
run_tests=${GPU_CHECK_TESTS:-1}
run_accuracy=$([ "$quick" = 1 ] && echo 0 || echo "${GPU_CHECK_ACCURACY:-1}")
run_sweep=$([ "$quick" = 1 ] && echo 0 || echo "${GPU_CHECK_SWEEP:-1}")
run_bench=${GPU_CHECK_BENCH:-1}
run_graph=$([ "$quick" = 1 ] && echo 0 || echo "${GPU_CHECK_GRAPH:-1}")

# cuDNN/cuBLAS may live in a Python environment's nvidia/* packages.
find_library() {
  find / -xdev \( -path /proc -o -path /sys -o -path '*/.debug' \) -prune -o \
    -name "$1" \( -type f -o -type l \) -print 2>/dev/null | head -1
}
for lib in libcudnn.so.9 libcublasLt.so.13; do
  found=$(find_library "$lib")
  [ -n "$found" ] && export LD_LIBRARY_PATH="$(dirname "$found"):${LD_LIBRARY_PATH:-}"
done

# NCCL (DDP on CUDA tensors): PyTorch's libnccl serves when the machine has no other.
if [ -z "${MT_NCCL_LIBRARY:-}" ]; then
  nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null || true)
  [ -n "$nccl" ] && [ -f "$nccl" ] && export MT_NCCL_LIBRARY="$nccl"
fi

# Where the executables are: an unpacked pack, or a build directory.
bin=""
if [ -f "$source_dir/bin.tar.xz" ]; then
  bin=$(mktemp -d)
  tar -C "$bin" -xJf "$source_dir/bin.tar.xz" && bin="$bin/bin"
  [ -d "$source_dir/fashion-mnist" ] && export MT_FASHION_MNIST="$(cd "$source_dir/fashion-mnist" && pwd)"
  if [ -f "$source_dir/brown.tar.xz" ]; then
    brown_root=$(mktemp -d)
    tar -C "$brown_root" -xJf "$source_dir/brown.tar.xz" && export MT_BROWN_DIR="$brown_root/$(ls "$brown_root")"
  fi
  for lib in libz.so.1 libgomp.so.1; do  # only where that machine lacks them
    ldconfig -p | grep -q "$lib" || export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:$(cd "$source_dir/lib" && pwd)"
  done
else
  if [ ! -x "$source_dir/mixtape" ]; then
    arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
    [ "$arch" = "90" ] && arch=90a
    cmake -S . -B "$source_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${arch:-90a}" \
      -DMT_CPU_ARCH=x86-64-v3 > "$out/configure.log" 2>&1 || { tail -20 "$out/configure.log"; exit 1; }
    cmake --build "$source_dir" -j "$(nproc)" || exit 1
  fi
  bin=$(mktemp -d)
  for program in mixtape quickstart gemm_bench bandwidth_bench attention_bench test_runtime test_core test_autograd test_amp test_nn test_tools \
    test_kernels test_sim test_sim_examples test_sim_examples_gpu; do
    found=$(find "$source_dir" -name "$program" -type f -perm -u+x ! -path "*CMakeFiles*" | head -1)
    [ -n "$found" ] && ln -s "$(cd "$(dirname "$found")" && pwd)/$program" "$bin/$program"
  done
fi

section() { printf '\n## %s\n\n' "$1" >> "$report"; }
elapsed() { echo "$(( $(date +%s) - start )) s"; }
{
  echo "# mixtape GPU check"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  # The pack records the commit its executables were built from (a device's copy of .git may be stale).
  if [ -f "$source_dir/commit" ]; then
    echo "- commit: $(tr '\n' ' ' < "$source_dir/commit")"
  else
    echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  fi
  echo "- GPU: $(nvidia-smi --query-gpu=name,memory.total,compute_cap --format=csv,noheader 2>/dev/null | head -1)"
  echo "- driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)"
  echo "- cuDNN: $(readlink -f "$(find_library libcudnn.so.9)")"
  echo "- cuBLASLt: $(readlink -f "$(find_library libcublasLt.so.13)")"
  echo "- host: $(nproc) cores"
  echo
  echo '```'
  "$bin/mixtape" info 2>&1
  echo '```'
} > "$report"

# ---- kernel verification first (the least known): every own kernel family's
# known-answer check on this GPU, each in a child process with a time limit
# (kernels/verify/trust.h). The results go to a cache of this run's own, which
# every later stage reads: `auto` runs an own family only where it passed.
export MT_CACHE_DIR="$out/kernel_cache" MT_KERNEL_CHECK_TIMEOUT_S=${MT_KERNEL_CHECK_TIMEOUT_S:-60}
section "Kernel verification"
{
  echo '```'
  timeout 600 "$bin/mixtape" info --verify --device cuda 2>&1 | tail -40
  echo '```'
  echo "verification done at $(elapsed)"
} >> "$report"

# ---- training to accuracy: cnn in fp16 AMP, fp32 and bf16, resnet in fp16
# AMP, all at once, started first so they run while the tests do (the
# accuracies do not depend on it; the samples/s they report are those of a
# shared GPU and CPU). Each run's output is train_<name>.out; its JSON-lines
# metrics stay on that machine (the report counts them).
train_names=(cnn_fp16 cnn_fp32 cnn_bf16 resnet_fp16)
train_args=(
  "--model cnn --precision fp16 --epochs $cnn_epochs"
  "--model cnn --precision fp32 --epochs $cnn_epochs"
  "--model cnn --precision bf16 --epochs $cnn_epochs"
  "--model resnet --precision fp16 --epochs $resnet_epochs --augment --lr 2e-3 --weight-decay 0.05"
)
# GPU_CHECK_ACCURACY_RUNS keeps a subset, e.g. "cnn_fp16 resnet_fp16".
if [ -n "${GPU_CHECK_ACCURACY_RUNS:-}" ]; then
  kept_names=() kept_args=()
  for i in "${!train_names[@]}"; do
    if [[ " $GPU_CHECK_ACCURACY_RUNS " == *" ${train_names[$i]} "* ]]; then
      kept_names+=("${train_names[$i]}")
      kept_args+=("${train_args[$i]}")
    fi
  done
  train_names=("${kept_names[@]}") train_args=("${kept_args[@]}")
fi
metrics=$(mktemp -d)
train_pids=()
if [ "$run_accuracy" = 1 ]; then
  for i in "${!train_names[@]}"; do
    # shellcheck disable=SC2086  # the argument lists split on purpose
    OMP_NUM_THREADS=3 timeout "$train_seconds" "$bin/mixtape" train ${train_args[$i]} --device cuda --no-progress \
      --log "$metrics/${train_names[$i]}.jsonl" > "$out/train_${train_names[$i]}.out" 2>&1 &
    train_pids+=($!)
  done
fi

# ---- tests: every suite in parallel (they share the GPU); the CPU accuracy
# run (minutes) is left to CI.
if [ "$run_tests" = 1 ]; then
  section "Tests"
  tests_log="$out/tests.log"
  : > "$tests_log"
  pids=()
  run_suite() {  # run_suite seconds name command...
    local seconds=$1 name=$2
    shift 2
    (timeout "$seconds" "$@" > "$out/.suite_$name.log" 2>&1; echo "exit $?" >> "$out/.suite_$name.log") &
    pids+=($!)
  }
  export OMP_NUM_THREADS=2
  for suite in test_runtime test_core test_autograd test_amp test_nn test_kernels test_sim test_sim_examples; do
    run_suite 150 "$suite" "$bin/$suite"
  done
  run_suite 150 test_tools "$bin/test_tools" '~mlp reaches 87*'
  MT_CONV=own run_suite 150 test_kernels_own_conv "$bin/test_kernels" '[conv]'
  # The own GEMMs on this chip (v7 on Hopper): every nn test with cuBLASLt out
  # of the way (MT_GEMM=auto would quietly prefer cuBLASLt where own disagrees),
  # and the ladder's rungs 4-8 against cuBLASLt in each layout at a ragged size.
  MT_GEMM=own run_suite 150 test_nn_own_gemm "$bin/test_nn"
  run_suite 90 gemm_rungs_layouts bash -c 'for layout in NN NT TN; do
    "$1" --mnk 1000 1032 520 --layout "$layout" --dtypes f16,bf16 --rungs 4-8 --min-ms 1 || exit 1; done' _ "$bin/gemm_bench"
  run_suite 150 test_sim_examples_gpu "$bin/test_sim_examples_gpu"
  # NCCL at world size 1 and DDP over it.
  [ -x "$bin/test_distributed" ] && run_suite 150 test_distributed_nccl "$bin/test_distributed" "[.gpu]"
  run_suite 150 quickstart "$bin/quickstart"
  run_suite 150 cli_contract "$root/tests/tools/cli/cli_errors.sh" "$bin/mixtape"
  if command -v compute-sanitizer > /dev/null; then
    run_suite 120 memcheck_test_kernels compute-sanitizer --tool memcheck --print-limit 20 "$bin/test_kernels"
  fi
  wait "${pids[@]}"
  echo '| suite | exit | summary |' >> "$report"
  echo '| --- | --- | --- |' >> "$report"
  for log in "$out"/.suite_*.log; do
    name=$(basename "$log" .log)
    name=${name#.suite_}
    status=$(tail -1 "$log" | awk '{print $2}')
    summary=$(grep -E "All tests passed|test cases:|ERROR SUMMARY|passed|failed" "$log" | tail -1 | tr '|' '/')
    echo "| $name | $status | $summary |" >> "$report"
    { echo "=================== $name (exit $status)"; cat "$log"; } >> "$tests_log"
    rm -f "$log"
  done
  echo >> "$report"
  echo "tests done at $(elapsed)" >> "$report"
fi

# ---- the training runs' results
if [ ${#train_pids[@]} -gt 0 ]; then
  section "Training to accuracy (Fashion-MNIST; the runs side by side, during the tests)"
  for i in "${!train_names[@]}"; do
    wait "${train_pids[$i]}"
    status=$?
    echo '```' >> "$report"
    echo "mixtape train ${train_args[$i]} --device cuda: exit $status," \
      "$(wc -l < "$metrics/${train_names[$i]}.jsonl" 2>/dev/null || echo 0) metrics lines" >> "$report"
    grep -iE "^training|test accuracy|error|nan" "$out/train_${train_names[$i]}.out" | tail -20 >> "$report"
    echo '```' >> "$report"
  done
  echo "training done at $(elapsed)" >> "$report"
fi

# ---- what each precision, back end and batch size buys: short runs, one at a
# time (throughput and peak memory; the accuracy of a few hundred steps means
# little). The back-end rows run at the first batch size only.
if [ "$run_sweep" = 1 ]; then
  batches=(${GPU_CHECK_SWEEP_BATCHES:-128:400})
  section "Precision, back-end and batch sweep (alone on the GPU)"
  echo '| model | batch | steps | precision | MT_CONV | MT_GEMM | samples/s | peak memory | test acc. |' >> "$report"
  echo '| --- | ---: | ---: | --- | --- | --- | ---: | ---: | ---: |' >> "$report"
  sweep() {  # sweep model batch steps precision conv gemm
    local line rate peak acc
    line=$(MT_CONV=$5 MT_GEMM=$6 OMP_NUM_THREADS=8 timeout 90 "$bin/mixtape" train --model "$1" --batch "$2" \
      --steps "$3" --precision "$4" --device cuda --no-progress 2>&1 | grep "samples/s, peak memory" | tail -1)
    rate=$(sed -E 's/.* ([0-9.]+) samples\/s.*/\1/' <<<"$line")
    peak=$(sed -E 's/.*peak memory ([0-9.]+ [A-Za-z]+).*/\1/' <<<"$line")
    acc=$(sed -E 's/^test accuracy ([0-9.]+%).*/\1/' <<<"$line")
    [ -n "$line" ] || rate="failed" peak="" acc=""
    echo "| $1 | $2 | $3 | $4 | $5 | $6 | $rate | $peak | $acc |" >> "$report"
  }
  for model in cnn resnet; do
    for i in "${!batches[@]}"; do
      batch=${batches[$i]%%:*} steps=${batches[$i]##*:}
      for precision in ${GPU_CHECK_SWEEP_PRECISIONS:-fp32 fp16 bf16}; do
        sweep "$model" "$batch" "$steps" "$precision" auto auto
      done
      if [ "$i" = 0 ] && [ "${GPU_CHECK_SWEEP_BACKENDS:-1}" = 1 ]; then
        sweep "$model" "$batch" "$steps" fp16 own auto
        sweep "$model" "$batch" "$steps" fp16 auto own
      fi
    done
  done
  echo >> "$report"
  echo "sweep done at $(elapsed)" >> "$report"
fi

# ---- what capturing the step in a CUDA graph buys: fp16 steps/s of the same
# short run eager and with --cuda-graph, and the host syncs per steady step
# (from the --log summary; 0 means the host never waited).
if [ "$run_graph" = 1 ]; then
  section "Eager step vs CUDA graph (fp16, alone on the GPU)"
  echo '| model | batch | steps | mode | steps/s | samples/s | host syncs/step | final loss |' >> "$report"
  echo '| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |' >> "$report"
  for run in ${GPU_CHECK_GRAPH_RUNS:-mlp:128:600 cnn:128:400 resnet:128:300 cnn:2048:60 resnet:2048:40}; do
    IFS=: read -r model batch steps <<<"$run"
    for mode in eager graph; do
      flag=$([ "$mode" = graph ] && echo --cuda-graph || echo)
      log="$metrics/graph_${model}_${batch}_${mode}.jsonl"
      OMP_NUM_THREADS=8 timeout 120 "$bin/mixtape" train --model "$model" --batch "$batch" --steps "$steps" \
        --epochs 100 --precision fp16 --device cuda --no-progress $flag --log "$log" \
        > "$out/graph_${model}_${batch}_${mode}.out" 2>&1
      row=$(python3 - "$log" "$batch" <<'PY' 2>/dev/null
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
s = [l["summary"] for l in lines if "summary" in l][-1]
rate = s["samples_per_s"]
last = [l["loss"] for l in lines if "loss" in l][-1]
print(f"{rate / int(sys.argv[2]):.1f} | {rate:.0f} | {s['host_syncs_per_step']:.2f} | {last:.4f}")
PY
)
      echo "| $model | $batch | $steps | $mode | ${row:-failed (see graph_${model}_${batch}_${mode}.out)} |" >> "$report"
    done
  done
  echo >> "$report"
  echo "graph table done at $(elapsed)" >> "$report"
fi

# ---- data parallel on this one GPU: the same fp16 run plain and through DDP
# over NCCL at world size 1 (mixtape train --ddp, MT_DIST_BACKEND=nccl). The
# losses must agree exactly (a world of one averages over one rank); the
# rates show what DDP's hooks, buckets and NCCL calls cost per step, and the
# host syncs that they add none.
if [ "$run_graph" = 1 ] && [ "${GPU_CHECK_DDP:-1}" = 1 ]; then
  section "DDP over NCCL at world size 1 (fp16, alone on the GPU; MT_NCCL_LIBRARY=${MT_NCCL_LIBRARY:-libnccl.so.2})"
  echo '| model | batch | steps | mode | samples/s | host syncs/step | final loss | max loss difference vs plain |' >> "$report"
  echo '| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |' >> "$report"
  for run in ${GPU_CHECK_DDP_RUNS:-mlp:128:400 cnn:128:300}; do
    IFS=: read -r model batch steps <<<"$run"
    for mode in plain ddp; do
      log="$metrics/ddp_${model}_${batch}_${mode}.jsonl"
      flag=$([ "$mode" = ddp ] && echo --ddp || echo)
      MT_DIST_BACKEND=$([ "$mode" = ddp ] && echo nccl || echo local) OMP_NUM_THREADS=8 timeout 60 \
        "$bin/mixtape" train --model "$model" --batch "$batch" --steps "$steps" --epochs 100 --precision fp16 \
        --device cuda --no-progress $flag --log "$log" > "$out/ddp_${model}_${batch}_${mode}.out" 2>&1
      row=$(python3 - "$log" "$metrics/ddp_${model}_${batch}_plain.jsonl" <<'PY' 2>/dev/null
import json, sys
def read(path):
    lines = [json.loads(l) for l in open(path)]
    return lines, [l["loss"] for l in lines if "loss" in l and "eval" not in l]
lines, losses = read(sys.argv[1])
_, plain = read(sys.argv[2])
s = [l["summary"] for l in lines if "summary" in l][-1]
diff = max(abs(a - b) for a, b in zip(losses, plain))
print(f"{s['samples_per_s']:.0f} | {s['host_syncs_per_step']:.2f} | {losses[-1]:.4f} | {diff:.3g}")
PY
)
      echo "| $model | $batch | $steps | $mode | ${row:-failed (see ddp_${model}_${batch}_${mode}.out)} |" >> "$report"
    done
  done
  echo >> "$report"
  echo "DDP table done at $(elapsed)" >> "$report"
fi

# ---- where a training step's GPU time goes: short profiled runs (MT_PROFILE;
# each launch waits for its kernel, so only the table's times mean anything).
# The GB/s and TFLOP/s columns are shares of the ceilings measured on this
# H200 on 2026-11-29 (bench/results/gpu_check_20261129_2204.md: 3870 GB/s
# device-to-device copy, 679 TFLOP/s cuBLASLt f16 at 4096^3); set
# MT_PROFILE_CEILINGS=<GB/s>,<TFLOP/s> to measure against others.
if [ "$run_sweep" = 1 ] && [ "${GPU_CHECK_PROFILE:-1}" = 1 ]; then
  export MT_PROFILE_CEILINGS=${MT_PROFILE_CEILINGS:-3870,679}
  for model in cnn resnet; do
    section "Kernel profile: $model fp16, batch 512, 40 steps (MT_PROFILE=1)"
    echo '```' >> "$report"
    MT_PROFILE=1 OMP_NUM_THREADS=8 timeout 90 "$bin/mixtape" train --model "$model" --precision fp16 --batch 512 \
      --steps 40 --device cuda --no-progress 2>&1 | sed -n '/kernel profile/,$p' | head -30 >> "$report"
    echo '```' >> "$report"
  done
  if [ "${GPU_CHECK_TRANSFORMERS:-1}" = 1 ]; then
    section "Kernel profile: gpt2-124m bf16, batch 8 x 1024, 3 steps (MT_PROFILE=1)"
    echo '```' >> "$report"
    MT_PROFILE=1 OMP_NUM_THREADS=8 timeout 120 "$bin/mixtape" train --model gpt2-124m --dataset synthetic-tokens \
      --precision bf16 --batch 8 --context 1024 --steps 3 --train-limit 40 --test-limit 8 --device cuda \
      --no-progress 2>&1 | sed -n '/kernel profile/,$p' | head -40 >> "$report"
    echo '```' >> "$report"
  fi
  echo "profiles done at $(elapsed)" >> "$report"
fi

# ---- benchmarks (alone on the GPU)
if [ "$run_bench" = 1 ]; then
  section "GEMM ladder vs cuBLASLt (4096^3)"
  echo '```' >> "$report"
  timeout 90 "$bin/gemm_bench" --size 4096 >> "$report" 2>&1
  echo '```' >> "$report"
  section "GEMM ladder, Hopper rungs vs cuBLASLt (8192^3, f16 and bf16)"
  echo '```' >> "$report"
  timeout 60 "$bin/gemm_bench" --size 8192 --dtypes f16,bf16 --rungs 5-8 --min-ms 200 >> "$report" 2>&1
  echo '```' >> "$report"
  section "FP8 vs BF16 GEMMs: cuBLASLt FP8, ladder v10 and cuBLASLt BF16 (4096^3, 8192^3)"
  echo '```' >> "$report"
  for size in 4096 8192; do
    timeout 60 "$bin/gemm_bench" --size "$size" --dtypes bf16,fp8 --rungs 7-7 --min-ms 200 >> "$report" 2>&1
  done
  echo '```' >> "$report"
  section "INT8 GEMMs: cuBLASLt INT8 alone, the INT8 vendor path and ladder v9 (4096^3, 8192^3; TOPS)"
  echo '```' >> "$report"
  for size in 4096 8192; do
    timeout 60 "$bin/gemm_bench" --size "$size" --dtypes int8 --min-ms 200 >> "$report" 2>&1
  done
  echo '```' >> "$report"
  section "gpt2-124m training, BF16 vs FP8 (batch 8 x 1024, 20 steps each; the last lines of each run)"
  echo '```' >> "$report"
  for precision in bf16 fp8; do
    echo "--precision $precision" >> "$report"
    OMP_NUM_THREADS=8 timeout 150 "$bin/mixtape" train --model gpt2-124m --dataset synthetic-tokens \
      --precision "$precision" --batch 8 --context 1024 --steps 20 --train-limit 200 --test-limit 8 --device cuda \
      --no-progress 2>&1 | grep -E "tokens/s|error|warn|kernel check" | tail -6 >> "$report"
  done
  # The FP8 kernels' achieved GB/s (set beside bandwidth_bench's copy figure below), 3 profiled steps.
  echo "--precision fp8, MT_PROFILE=1, 3 steps: the FP8 kernels" >> "$report"
  MT_PROFILE=1 OMP_NUM_THREADS=8 timeout 120 "$bin/mixtape" train --model gpt2-124m --dataset synthetic-tokens \
    --precision fp8 --batch 8 --context 1024 --steps 3 --train-limit 40 --test-limit 8 --device cuda \
    --no-progress 2>&1 | grep -E "^kernel +calls|fp8_|cublasLtMatmul" | head -16 >> "$report"
  echo '```' >> "$report"
  section "Memory-bound kernels vs device-to-device copy"
  timeout 60 "$bin/bandwidth_bench" --mb 256 >> "$report" 2>&1
  if [ "${GPU_CHECK_TRANSFORMERS:-1}" = 1 ]; then
    section "Transformers: mixtape vs PyTorch on the same GPU (gpt2-124m, bert-base)"
    timeout 240 "$root/bench/gpu_transformers_vs_pytorch.sh" "$bin/mixtape" >> "$report" 2>&1
  fi
  if [ "${GPU_CHECK_LLAMA:-1}" = 1 ]; then
    section "Llama: mixtape vs PyTorch on the same GPU (llama-125m: fused RMSNorm, RoPE, SwiGLU, GQA attention)"
    MODEL=llama-125m BERT=0 timeout 150 "$root/bench/gpu_transformers_vs_pytorch.sh" "$bin/mixtape" >> "$report" 2>&1
  fi
  if [ "${GPU_CHECK_ATTENTION:-1}" = 1 ]; then
    section "Attention ladder (v1 unfused, v2 fused scalar, v3 fused mma.sync)"
    for shape in "--dim 64" "--dim 64 --causal" "--dim 128 --heads 8"; do
      echo '```' >> "$report"
      # shellcheck disable=SC2086
      timeout 60 "$bin/attention_bench" --batch 8 --heads 16 --seq 1024 $shape --min-ms 100 >> "$report" 2>&1
      echo '```' >> "$report"
    done
  fi
  echo "benchmarks done at $(elapsed)" >> "$report"
fi

echo >> "$report"
echo "Total time: $(elapsed)" >> "$report"
echo "report: $report"
