# What the end-to-end data-parallel scripts (train_ranks.sh, train_fsdp.sh)
# share: the MPI environment, a failure count, and comparisons of runs.
# Sourced after setting mixtape, mpirun, tmp and common.
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
assert abs(ea[-1][metric] - eb[-1][metric]) <= accuracy_tol, f"{metric} {ea[-1]} vs {eb[-1]}"
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

