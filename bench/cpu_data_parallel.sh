#!/usr/bin/env bash
# Data parallel on this machine's CPU (issue 15), two tables:
#  1. training throughput (`mixtape train`, Fashion-MNIST, AdamW, fp32 and
#     bf16; the median of three runs): one process with 1 thread at batch B,
#     one process with 2 threads at batch 2B, and `mpirun -np 2` ranks of 1
#     thread each at batch B per rank (the same 2B per step);
#  2. bench/ddp_bench under mpirun -np 2: backward with and without DDP's
#     communication (gradients as bucket views, as `mixtape train` has them,
#     and as copies), the buckets all-reduced alone, the share of that
#     communication hidden behind backward, and the all-reduce bandwidth of
#     mixtape's group against MPI_Allreduce called directly on the same bytes.
# Run it on an idle machine (nothing building).
# Usage: bench/cpu_data_parallel.sh [build-dir] [steps]   (THROUGHPUT=0 leaves out table 1)
set -euo pipefail
build=${1:-build}
steps=${2:-200}
unset OMP_WAIT_POLICY OMP_NUM_THREADS MT_NUM_THREADS
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

rate() {  # launcher... -- train flags: the median samples/s of three runs
  local launch=()
  while [ "$1" != "--" ]; do launch+=("$1"); shift; done
  shift
  for _ in 1 2 3; do
    "${launch[@]}" "$build/mixtape" train --steps "$steps" --test-limit 500 --no-progress "$@" |
      sed -n 's/.* \([0-9.]*\) samples\/s.*/\1/p' | tail -1
  done | sort -n | sed -n 2p
}

if [ "${THROUGHPUT:-1}" = 1 ]; then  # THROUGHPUT=0: the second table only
  echo "| model | precision | B | 1 process, 1 thread, batch B | 1 process, 2 threads, batch 2B | 2 ranks x 1 thread, batch B each | 2 ranks vs 1 thread | 2 ranks vs 2 threads |"
  echo "|---|---|---|---|---|---|---|---|"
  for model in mlp cnn; do
    batch=64
    for precision in fp32 bf16; do
      one=$(rate env -- --model "$model" --precision "$precision" --threads 1 --batch "$batch")
      two_threads=$(rate env -- --model "$model" --precision "$precision" --threads 2 --batch $((2 * batch)))
      ranks=$(rate mpirun -np 2 -- --model "$model" --precision "$precision" --threads 1 --batch "$batch")
      awk -v m="$model" -v p="$precision" -v b="$batch" -v a="$one" -v t="$two_threads" -v r="$ranks" \
        'BEGIN { printf "| %s | %s | %d | %.0f | %.0f | %.0f | %.2fx | %.2fx |\n", m, p, b, a, t, r, r / a, r / t }'
    done
  done
fi
echo
echo "| model | precision | gradients | ranks | batch per rank | buckets | MiB reduced | MiB reduced during backward | slowest backward, no_sync (ms) | slowest backward with DDP (ms) | added by DDP (ms, mean +- 2 s.e.) | hidden (range) | buckets alone (ms) | MPI_Allreduce (ms) | mixtape MB/s | MPI MB/s |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for model in mlp cnn; do
  for precision in fp32 bf16; do
    for views in 1 0; do
      MT_NUM_THREADS=1 mpirun -np 2 -x MT_NUM_THREADS "$build/bench/ddp_bench" --model "$model" \
        --precision "$precision" --batch 64 --steps 80 --grad-views "$views" | grep '^|'
    done
  done
done
# The cnn with 1 MiB buckets: fc1's gradient then has a bucket of its own,
# ready early in backward, so most bytes can be reduced while the convolutions'
# backward still runs.
MT_NUM_THREADS=1 mpirun -np 2 -x MT_NUM_THREADS "$build/bench/ddp_bench" --model cnn --precision fp32 --batch 64 \
  --steps 80 --bucket-mb 1 | grep '^|'
