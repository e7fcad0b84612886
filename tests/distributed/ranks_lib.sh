# What the end-to-end data-parallel scripts (train_ranks.sh, train_fsdp.sh)
# share: their arguments (path/to/mixtape mpirun), a scratch folder, the MPI
# environment, a failure count, and comparisons of runs. Sourced first; the
# functions below read the script's `common` flags.
set -u
mixtape="$1"
mpirun="$2"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none  # containers often forbid reading another process's memory

# compare <one.jsonl> <two.jsonl> <loss tolerance> <accuracy tolerance>: per-step losses, scales and the
# evaluation (its accuracy, or a language model's held-out loss).
compare() {
  python3 - "$1" "$2" "$3" "$4" <<'PY'
import json, sys
def read(path):
    steps, evals = [], []
    for line in open(path):
        r = json.loads(line)
        if "eval" in r: evals.append(r["eval"])
        elif "step" in r: steps.append(r)
    return steps, evals
(a, ea), (b, eb) = read(sys.argv[1]), read(sys.argv[2])
tol, accuracy_tol = float(sys.argv[3]), float(sys.argv[4])
assert len(a) == len(b) > 0, f"{len(a)} vs {len(b)} steps"
worst = max(abs(x["loss"] - y["loss"]) for x, y in zip(a, b))
assert worst <= tol, f"losses differ by {worst} (> {tol})"
assert all(x["scale"] == y["scale"] for x, y in zip(a, b)), "loss scales differ"
metric = "accuracy" if "accuracy" in ea[-1] else "loss"  # language models: the held-out loss
# An accuracy is a count over the held-out samples: 0.002 is 2 of 1000, and
# 0.661 - 0.659 is 0.0020000000000000018 in binary floating point.
assert abs(ea[-1][metric] - eb[-1][metric]) <= accuracy_tol + 1e-9, f"{metric} {ea[-1]} vs {eb[-1]}"
print(f"{len(a)} steps, max loss difference {worst:.3g}, {metric} {ea[-1][metric]:.6g} vs {eb[-1][metric]:.6g}")
PY
}

# equivalent <name> <ranks> <loss tolerance> <accuracy tolerance> <one-process flags...> -- <per-rank flags...>
equivalent() {
  local name="$1" ranks="$2" tol="$3" accuracy_tol="$4"
  shift 4
  local one=() two=()
  while [ "$1" != "--" ]; do one+=("$1"); shift; done
  shift
  two=("$@")
  "$mixtape" train "${common[@]}" --epochs 1 "${one[@]}" --log "$tmp/$name.1.jsonl" >"$tmp/$name.1.out" 2>&1 ||
    { fail "$name: 1 process failed"; tail -3 "$tmp/$name.1.out"; return; }
  "$mpirun" -np "$ranks" "$mixtape" train "${common[@]}" --epochs 1 "${two[@]}" --log "$tmp/$name.2.jsonl" \
    >"$tmp/$name.2.out" 2>&1 || { fail "$name: $ranks ranks failed"; tail -5 "$tmp/$name.2.out"; return; }
  grep -q "per rank x $ranks ranks (mpi" "$tmp/$name.2.out" || fail "$name: the run did not say it ran $ranks ranks"
  local report
  report=$(compare "$tmp/$name.1.jsonl" "$tmp/$name.2.jsonl" "$tol" "$accuracy_tol" 2>&1) || fail "$name: $report"
  echo "$name: $report"
}

# ledger_ratio <name> <1-process log> <2-rank log> <category> <ratio>: the
# 2-rank run's ledger at its peak holds <ratio> times the 1-process run's
# bytes of <category>, and matches its theory.
ledger_ratio() {
  python3 - "$2" "$3" "$4" "$5" "$1" <<'PY' || fail "$1: the ledger's $4 is not $5 times one process's"
import json, sys
def ledger(path):
    for line in open(path):
        r = json.loads(line)
        if "summary" in r: return r["summary"]["memory_ledger"]
one, two = ledger(sys.argv[1]), ledger(sys.argv[2])
category, ratio, name = sys.argv[3], float(sys.argv[4]), sys.argv[5]
a, b = one["at_peak"][category], two["at_peak"][category]
theory = two["theory"][category]
assert abs(b - theory) <= 0.01 * theory, f"{category} {b} bytes, theory {theory}"
assert abs(b / a - ratio) < 0.01, f"{category} {a} -> {b} bytes"
print(f"{name}: {category} per rank {a} -> {b} bytes ({b / a:.3f})")
PY
}


# skip_together <name> <flags...>: an inf in one rank's gradients at step 3
# (MT_TEST_NONFINITE_GRADIENT=rank:step) skips that step on both ranks with
# the scale halved, and the run is the same whichever rank saw it: had the
# other rank stepped its shard, or kept its scale, the losses after step 3
# would differ.
skip_together() {
  local name="$1"
  shift
  for rank in 0 1; do
    MT_TEST_NONFINITE_GRADIENT=$rank:3 "$mpirun" -np 2 "$mixtape" train "${common[@]}" --precision fp16 --batch 64 \
      --steps 6 "$@" --log "$tmp/inf$rank.jsonl" >"$tmp/inf$rank.out" 2>&1 ||
      { fail "$name with an inf on rank $rank failed"; tail -5 "$tmp/inf$rank.out"; }
  done
  python3 - "$tmp/inf0.jsonl" "$tmp/inf1.jsonl" "$name" <<'PY' || fail "$name: the ranks did not skip together"
import json, sys
runs = [[r for r in map(json.loads, open(p)) if "skipped" in r] for p in sys.argv[1:3]]
for steps in runs:
    assert [s["skipped"] for s in steps] == [False, False, True, False, False, False], [s["skipped"] for s in steps]
    assert steps[2]["scale"] == steps[1]["scale"] / 2, "the scale did not back off"
assert [s["loss"] for s in runs[0]] == [s["loss"] for s in runs[1]], "the runs differ after the skip"
print(f"{sys.argv[3]}: an inf on either rank skips step 3 on both")
PY
}
