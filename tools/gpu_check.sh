#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU, build (or reuse a build
# directory made elsewhere for its architecture), run every test (the CUDA
# ones included), the GEMM ladder against cuBLASLt and the bandwidth
# benchmarks, and write one markdown report. No network, no package manager:
# only the CUDA Toolkit and what the repository brings.
#
#   tools/gpu_check.sh [build-dir] [report.md]
#
# Must finish within 8 minutes on one H100/H200-class GPU. A GPU machine
# without Eigen/fmt/Boost headers cannot build mixtape, so build here first
# and carry the build directory (third-party code is header-only or static):
#   cmake -S . -B build-gpu -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90a \
#         -DMT_CPU_ARCH=x86-64-v3 -DMT_STATIC_RUNTIME=ON && cmake --build build-gpu
#   (then, there)  tools/gpu_check.sh build-gpu
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
report=${2:-bench/results/gpu_check_$(date -u +%Y%m%d_%H%M).md}
mkdir -p "$(dirname "$report")"
start=$(date +%s)

# cuDNN/cuBLAS may live in a Python environment's nvidia/* packages.
for lib in libcudnn.so.9 libcublasLt.so.13 libcublasLt.so.12; do
  found=$(find / -xdev -name "$lib" 2>/dev/null | head -1)
  [ -n "$found" ] && export LD_LIBRARY_PATH="$(dirname "$found"):${LD_LIBRARY_PATH:-}"
done

if [ ! -x "$build/mixtape" ]; then
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
  [ "$arch" = "90" ] && arch=90a
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${arch:-90a}" \
    -DMT_CPU_ARCH=x86-64-v3 > "$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
  cmake --build "$build" -j "$(nproc)" || exit 1
fi

section() { printf '\n## %s\n\n' "$1" >> "$report"; }
{
  echo "# mixtape GPU check"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "- GPU: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1)"
  echo "- driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)"
  echo "- CUDA: $(nvcc --version 2>/dev/null | tail -1)"
  echo "- host: $(nproc) cores"
} > "$report"

section "Tests (ctest)"
log="$PWD/$report.ctest.log"
# The CPU accuracy run (minutes on a CPU) is left to CI; everything else runs.
(cd "$build" && timeout 240 ctest --output-on-failure -j 8 -E "mlp reaches 87" > "$log" 2>&1)
echo '```' >> "$report"
grep -E "tests passed|tests failed|\(Failed\)|\(SEGFAULT\)|\(Timeout\)|Skipped|Total Test time" "$log" >> "$report"
echo '```' >> "$report"

section "GEMM ladder vs cuBLASLt (4096^3)"
echo '```' >> "$report"
timeout 120 "$build/bench/gemm_bench" --size 4096 >> "$report" 2>&1
echo '```' >> "$report"

section "Memory-bound kernels vs device-to-device copy"
timeout 90 "$build/bench/bandwidth_bench" --mb 256 >> "$report" 2>&1

section "Training (mixtape train, Fashion-MNIST, cnn, fp16)"
echo '```' >> "$report"
timeout 120 "$build/mixtape" train --model cnn --precision fp16 --device cuda --epochs 1 --no-progress >> "$report" 2>&1
echo '```' >> "$report"

echo >> "$report"
echo "Total time: $(( $(date +%s) - start )) s" >> "$report"
rm -f "$log"
echo "report: $report"
