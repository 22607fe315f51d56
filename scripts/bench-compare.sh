#!/usr/bin/env bash
# Before/after figures of a change: the control-plane benchmark (tests/bench,
# BenchmarkControlPlaneMix) and the continuous-batching sampling benchmark (`tuft-bench
# sampling`) of two commits, run interleaved (OLD, NEW, OLD, NEW, …) on this machine so
# its drifting load hits both alike, then one table: each figure's median per side and
# the median over rounds of the paired NEW/OLD ratio. See docs/performance.md,
# "Before/after".
#
#   scripts/bench-compare.sh OLD NEW OUTDIR
#
# OLD and NEW are any commits (a branch name, a hash; the same commit twice measures the
# noise). Both are checked out in temporary worktrees; the control-plane benchmark file
# of this checkout is copied into both, so the same client code measures both servers
# (it uses only package client, config and server.Start, which is what lets it compile
# on an older commit). OUTDIR receives the binaries' raw outputs and table.txt.
#
# Settings (environment):
#   ROUNDS         A/B pairs (default 3)
#   CP_STEPS       steps per session of the control-plane mix (default 20; -benchtime=Nx)
#   TUFT_BENCH_TENANTS, TUFT_BENCH_SESSIONS, TUFT_BENCH_STORE  the mix (default 4, 2, embedded)
#   SAMPLING_ARGS  arguments of `tuft-bench sampling` (default: --preset smollm2-135m-shape
#                  --requests 16 --rounds 1 --torch off); --json is added
#   SKIP           "cp" or "sampling" to leave one benchmark out
set -euo pipefail
if [ $# -ne 3 ]; then
  echo "usage: $0 OLD NEW OUTDIR" >&2
  exit 2
fi
old_rev=$1 new_rev=$2 out=$3
root="$(cd "$(dirname "$0")/.." && pwd)"
bench_file="$root/tests/bench/controlplane_test.go"
[ -f "$bench_file" ] || { echo "missing $bench_file" >&2; exit 1; }
rounds=${ROUNDS:-3}
cp_steps=${CP_STEPS:-20}
sampling_args=${SAMPLING_ARGS:---preset smollm2-135m-shape --requests 16 --rounds 1 --torch off}
skip=${SKIP:-}

mkdir -p "$out/bin"
out="$(cd "$out" && pwd)"
tmp="$(mktemp -d)"
cleanup() {
  for side in old new; do
    [ -d "$tmp/$side" ] && git -C "$root" worktree remove --force "$tmp/$side" >/dev/null 2>&1 || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT

# build SIDE REV: a detached worktree of REV with this checkout's benchmark file, and
# its tuft-bench and control-plane test binaries under $out/bin.
build() {
  local side=$1 rev=$2 wt="$tmp/$1"
  git -C "$root" worktree add --detach --quiet "$wt" "$rev"
  mkdir -p "$wt/tests/bench"
  cp "$bench_file" "$wt/tests/bench/controlplane_test.go"
  git -C "$wt" rev-parse HEAD >"$out/$side.commit"
  echo "== build $side ($rev = $(cut -c1-12 "$out/$side.commit"))"
  (cd "$wt" && go build -o "$out/bin/tuft-bench-$side" ./cmd/tuft-bench &&
    go test -c -o "$out/bin/controlplane-$side.test" ./tests/bench/)
}
build old "$old_rev"
build new "$new_rev"

for r in $(seq 1 "$rounds"); do
  for side in old new; do
    if [ "$skip" != cp ]; then
      echo "== round $r/$rounds: control plane, $side"
      # The test binary runs in its package's directory, as go test would.
      (cd "$tmp/$side/tests/bench" && "$out/bin/controlplane-$side.test" -test.run '^$' \
        -test.bench '^BenchmarkControlPlaneMix$' -test.benchtime "${cp_steps}x" -test.count 1) \
        >"$out/cp-$side-$r.txt"
    fi
    if [ "$skip" != sampling ]; then
      echo "== round $r/$rounds: sampling, $side"
      # shellcheck disable=SC2086 # SAMPLING_ARGS is a list of arguments
      (cd "$tmp/$side" && "$out/bin/tuft-bench-$side" sampling $sampling_args --json) \
        >"$out/sampling-$side-$r.json" 2>"$out/sampling-$side-$r.log"
    fi
  done
done

python3 - "$out" "$rounds" >"$out/table.txt" <<'EOF'
import json, os, statistics, sys

out, rounds = sys.argv[1], int(sys.argv[2])

def cp_metrics(path):
    """The metrics of the last BenchmarkControlPlaneMix line (value, unit pairs)."""
    line = None
    for l in open(path):
        if l.startswith("BenchmarkControlPlaneMix"):
            line = l
    if line is None:
        return {}
    f = line.split()[2:]  # name, N, then value unit pairs
    return {"cp " + f[i + 1]: float(f[i]) for i in range(0, len(f) - 1, 2) if f[i + 1] != "ns/op"}

def sampling_metrics(path):
    r = json.load(open(path))
    m = {}
    for phase in ("single_request", "concurrent"):
        for k in ("tokens_per_s", "ttft_p50_ms", "ttft_p99_ms"):
            v = r.get(phase, {}).get(k)
            if v:
                m[f"sampling {phase} {k}"] = v
    for k in ("concurrent_over_single",):
        if r.get(k):
            m["sampling " + k] = r[k]
    t = r.get("concurrent", {}).get("tenant_max_min_ratio")
    if t:
        m["sampling tenant_max_min_ratio"] = t
    return m

runs = {"old": [], "new": []}
for side in runs:
    for i in range(1, rounds + 1):
        m = {}
        p = os.path.join(out, f"cp-{side}-{i}.txt")
        if os.path.exists(p):
            m.update(cp_metrics(p))
        p = os.path.join(out, f"sampling-{side}-{i}.json")
        if os.path.exists(p):
            m.update(sampling_metrics(p))
        runs[side].append(m)

names = sorted({k for m in runs["old"] + runs["new"] for k in m})
commit = {s: open(os.path.join(out, s + ".commit")).read().strip()[:12] for s in runs}
print(f"OLD {commit['old']}  NEW {commit['new']}  ({rounds} interleaved rounds)")
print("OLD, NEW: each side's median over the rounds; NEW/OLD: their ratio; paired: the median of the")
print("rounds' own NEW/OLD (each round ran both back to back); spread: the larger side's max/min over")
print("its rounds: a NEW/OLD inside the spread cannot be told from noise.")
print(f"{'figure':44} {'OLD':>10} {'NEW':>10} {'NEW/OLD':>8} {'paired':>7} {'spread':>7}  better")
for n in names:
    o = [m[n] for m in runs["old"] if n in m]
    w = [m[n] for m in runs["new"] if n in m]
    if not o or not w:
        continue
    paired = [b / a for a, b in zip([m.get(n) for m in runs["old"]], [m.get(n) for m in runs["new"]]) if a and b]
    better = "lower" if n.endswith("-ms") or n.endswith("_ms") or n.endswith("max_min_ratio") else "higher"
    pr = statistics.median(paired) if paired else float("nan")
    spread = max(max(v) / min(v) if min(v) > 0 else float("nan") for v in (o, w))
    mo, mw = statistics.median(o), statistics.median(w)
    ratio = mw / mo if mo else float("nan")
    print(f"{n:44} {mo:10.3f} {mw:10.3f} {ratio:8.3f} {pr:7.3f} {spread:7.2f}  {better}")
EOF
cat "$out/table.txt"
