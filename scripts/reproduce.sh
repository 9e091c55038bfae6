#!/usr/bin/env bash
# Does today's lab reproduce committed runs? Each run under RESULTS/runs (those whose name
# starts with a PREFIX, when given) is trained again from its committed config for its first
# REPRODUCE_STEPS steps (default 210) in a scratch directory, and every committed training line
# up to there (train/loss, train/grad_norm, train/lr) is compared with the new one, bit for bit.
# One line a run: the commit that trained it, the steps compared, and "same" or the first step
# that differs. The exit status is the number of runs that differ or could not be compared (2
# for bad arguments). A cheap check before mixing runs that sessions at different commits
# trained, as a long study's are (a run's first 210 steps of a 1M model take about 30 s).
#
#   scripts/reproduce.sh results/grid-1m [PREFIX...]
#
# LAB names the binary (default: target/release/lab, built first).
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: scripts/reproduce.sh RESULTS [PREFIX...]" >&2; exit 2; }
results=$1
shift
if [ ! -d "$results/runs" ]; then
  echo "reproduce: $results/runs: no such directory (give a study's results directory)" >&2
  exit 2
fi
steps=${REPRODUCE_STEPS:-210}
case $steps in
  '' | *[!0-9]* | 0) echo "reproduce: REPRODUCE_STEPS: '$steps' is not a positive integer" >&2; exit 2 ;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "${LAB:-}" ]; then
  (cd "$root" && cargo build --release --quiet) || exit 2
  LAB=$root/target/release/lab
fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
bad=0
for run in "$results"/runs/*/; do
  name=$(basename "$run")
  if [ $# -gt 0 ]; then
    keep=0
    for p in "$@"; do case $name in "$p"*) keep=1 ;; esac; done
    [ $keep = 1 ] || continue
  fi
  if ! "$LAB" train --config "$run/config.toml" --out "$scratch/$name" --max-steps "$steps" \
    >"$scratch/$name.log" 2>&1; then
    echo "$name: did not train: $(tail -n 1 "$scratch/$name.log")"
    bad=$((bad + 1))
    continue
  fi
  python3 - "$run" "$scratch/$name" "$steps" <<'EOF' || bad=$((bad + 1))
import json, os, sys

run, again, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
keys = ("train/loss", "train/grad_norm", "train/lr")

def lines(d):
    return {m["step"]: m for m in map(json.loads, open(os.path.join(d, "metrics.jsonl")))
            if "train/loss" in m and m["step"] <= steps}

try:
    commit = json.load(open(os.path.join(run, "run.meta.json")))["code"]["commit"][:7]
except (OSError, KeyError, ValueError):
    commit = "?"
name = os.path.basename(os.path.normpath(run))
committed, new = lines(run), lines(again)
if not committed:
    print(f"{name} (trained at {commit}): no training line committed up to step {steps}")
    sys.exit(1)
for s in sorted(committed):
    diff = [k for k in keys if k in committed[s] and committed[s][k] != new.get(s, {}).get(k)]
    if diff:
        k = diff[0]
        print(f"{name} (trained at {commit}): differs at step {s}: {k} {committed[s][k]!r} "
              f"committed, {new.get(s, {}).get(k)!r} now")
        sys.exit(1)
print(f"{name} (trained at {commit}): same at steps {' '.join(map(str, sorted(committed)))}")
EOF
done
exit "$bad"
