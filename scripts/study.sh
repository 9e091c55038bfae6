#!/usr/bin/env bash
# Run or continue a study: train every run of its sweep specs that is not yet exported to the
# specs' results directory, committing each finished run as it lands (anything uncommitted is
# lost when the machine goes), then collect the exported runs and write the figures and
# findings.json beside them. Safe to stop at any point and start again on a fresh clone.
#
#   scripts/study.sh sweeps/repro-cpu-depth.toml sweeps/repro-cpu-width.toml
#
# The specs run side by side, one run at a time each with an equal share of the cores; each
# spec's results directory (one shared, or one each) is committed, collected and reported.
# STUDY_JOBS (default 1) runs that many runs of each spec at once, the cores shared equally
# (small models use one core better than two: STUDY_JOBS=2 with one spec on 2 cores).
# STUDY_THREADS sets the threads of each run (default: the cores shared equally), so that a
# study can leave a core free. STUDY_COMMIT=0 leaves git alone; STUDY_EVERY (seconds, default
# 120) is the commit interval.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: scripts/study.sh SPEC..." >&2; exit 2; }
specs=()
for s in "$@"; do specs+=("$(realpath "$s")"); done
set -- "${specs[@]}"
cd "$(dirname "$0")/.."
built=1
cargo build --release --quiet || built=0
# Each spec's results directory (specs may share one, as the depth and width sweeps do).
results_of() {
  local r
  r=$(sed -n 's/^results *= *"\(.*\)"/\1/p' "$1")
  [ -n "$r" ] || { echo "$1: results: not set" >&2; exit 2; }
  realpath -m --relative-to=. "$(dirname "$1")/$r"
}
dirs=()
for spec in "$@"; do
  r=$(results_of "$spec")
  case " ${dirs[*]} " in *" $r "*) ;; *) dirs+=("$r") ;; esac
done
# A copy of its own, so that rebuilding the lab while the study runs cannot change its runs.
bin=target/study/$(echo "${dirs[0]}" | tr / _)
# A tree that does not build (mid-edit) leaves the study on the copy it already has.
if [ $built = 1 ] || [ ! -x "$bin/lab" ]; then
  mkdir -p "$bin" && cp target/release/lab "$bin/lab.new" && mv "$bin/lab.new" "$bin/lab"
else
  echo "the lab does not build; the study continues with $bin/lab" >&2
fi
lab=$bin/lab
cores=$(nproc)
jobs=${STUDY_JOBS:-1}
threads=${STUDY_THREADS:-$(( cores / ($# * jobs) > 0 ? cores / ($# * jobs) : 1 ))}

commit() {
  [ "${STUDY_COMMIT:-1}" = 1 ] || return 0
  local results n
  for results in "${dirs[@]}"; do
    git add -- "$results" 2>/dev/null || continue
    if ! git diff --cached --quiet -- "$results"; then
      n=$(ls "$results/runs" 2>/dev/null | wc -l)
      git commit --quiet -m "study $(basename "$results"): $n runs exported" -- "$results" && \
        echo "committed $(basename "$results"): $n runs"
    fi
  done
}

pids=()
for spec in "$@"; do
  log="checkpoints/study-$(basename "$spec" .toml).log"
  mkdir -p checkpoints
  echo "running $spec ($jobs at a time, $threads threads each); log: $log"
  "$lab" sweep run "$spec" --backend local --jobs "$jobs" --threads "$threads" >>"$log" 2>&1 &
  pids+=($!)
done
while :; do
  alive=0
  for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
  commit
  [ $alive = 1 ] || break
  sleep "${STUDY_EVERY:-120}"
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
for results in "${dirs[@]}"; do
  "$lab" sweep collect "$results"
  "$lab" report "$results" --out "$results"
done
commit
exit $status
