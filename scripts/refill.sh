#!/usr/bin/env bash
# Fill the figures committed runs lack (issue 52: `tune/creativity`, logged only by later code)
# by training each again from its committed config into checkpoints/refill/<run>/ (resumed where
# a checkpoint is left), then `lab sweep refill`, which writes the new figures into the committed
# metrics.jsonl only if every committed figure and kept answer equals the retrained run's; each
# refilled run is committed at once. At the end results.csv and the report are regenerated.
# Safe to stop and start again: refilled runs are skipped.
#
#   scripts/refill.sh results/fair-cpu fair-cpu-tune-          (runs whose name starts so)
#
# REFILL_FIGURE (default tune/creativity) is the figure whose absence marks a run to refill;
# REFILL_THREADS (default 1) the threads of each training. REFILL_TRAIN_AT="COMMIT..." trains
# with the lab built at those commits instead (each in a worktree under target/refill/, its own
# build): the code that trained runs whose bits later code moved. A study restarted across
# sessions trained its runs with more than one commit, so each run is tried at the commit that
# matched last, then at the others in order, until `lab sweep refill` finds one that trained it
# (the others' runs stay under checkpoints/refill/<commit>/). That code logs no tuning-split C,
# so today's `lab eval --split tune` then scores each evaluated epoch's checkpoint, and the
# refill takes the `tune/` figures from those summaries.
#
#   REFILL_TRAIN_AT="2662bcb e6cab38" scripts/refill.sh results/fair-cpu fair-cpu-tune-100k-
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: scripts/refill.sh RESULTS PREFIX..." >&2; exit 2; }
results=$1; shift
cd "$(dirname "$0")/.."
cargo build --release --quiet
bin=target/refill && mkdir -p "$bin" && cp target/release/lab "$bin/lab.new" && mv "$bin/lab.new" "$bin/lab"
lab=$bin/lab
# The trainers: "" is today's lab; otherwise each commit's own build, made when a run first
# needs it (a prefix whose runs are all filled builds nothing).
ats=("")
if [ -n "${REFILL_TRAIN_AT:-}" ]; then
  ats=()
  for c in $REFILL_TRAIN_AT; do ats+=("$(git rev-parse --short "$c")"); done
fi
# same_val_loss NEW COMMITTED: exit 0 when every epoch whose validation loss both metrics files
# hold has the same one, 1 when one differs, 2 when they share none yet.
same_val_loss() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
def losses(path):
    out = {}
    for line in open(path):
        try:
            m = json.loads(line)
        except ValueError:
            continue  # a line being written
        if "val/loss" in m:
            out[m["epoch"]] = m["val/loss"]
    return out
new, kept = losses(sys.argv[1]), losses(sys.argv[2])
both = [e for e in new if e in kept]
sys.exit(2 if not both else 0 if all(new[e] == kept[e] for e in both) else 1)
EOF
}
trainer_of() {
  if [ -z "$1" ]; then echo "$lab"; return; fi
  local tree=$PWD/target/refill/tree-$1
  [ -d "$tree" ] || git worktree add --detach "$tree" "$1" >/dev/null
  (cd "$tree" && CARGO_TARGET_DIR=$PWD/../target-$1 cargo build --release --quiet) >&2
  echo "$PWD/target/refill/target-$1/release/lab"
}
figure=${REFILL_FIGURE:-tune/creativity}
last=${ats[0]}
for prefix in "$@"; do
  for dir in "$results"/runs/"$prefix"*/; do
    [ -d "$dir" ] || continue
    run=$(basename "$dir")
    if grep -q "\"$figure\"" "$dir/metrics.jsonl"; then continue; fi
    # The commit that matched last first, then the others in order.
    order=("$last")
    for a in "${ats[@]}"; do [ "$a" = "$last" ] || order+=("$a"); done
    ok=0
    for at in "${order[@]}"; do
      trainer=$(trainer_of "$at")
      # Each trainer its own directory: a run trained by other code is not this one.
      out=checkpoints/refill${at:+/$at}/$run
      if [ ! -e "$out/DONE" ]; then
        resume=""
        [ -e "$out/latest" ] && resume=--resume
        echo "train $run ${at:+at $at }$resume"
        mkdir -p "$(dirname "$out")"
        RAYON_NUM_THREADS=${REFILL_THREADS:-1} "$trainer" train --device cpu --config "$dir/config.toml" \
          --out "$out" $resume > "$out.log" 2>&1 &
        pid=$!
        # Other code shows at the first validation loss the committed run also kept: it is
        # stopped there (a quarter of the run, at 4 evaluations) instead of at the end.
        other=0
        while kill -0 "$pid" 2>/dev/null; do
          same=2
          [ -f "$out/metrics.jsonl" ] && { same_val_loss "$out/metrics.jsonl" "$dir/metrics.jsonl" && same=0 || same=$?; }
          [ $same = 0 ] && break
          [ $same = 1 ] && { kill "$pid"; wait "$pid" 2>/dev/null || true; other=1; break; }
          sleep 15
        done
        if [ $other = 1 ]; then
          echo "$run: not trained by ${at:-the current code} (its first kept validation loss differs)" >&2
          continue
        fi
        wait "$pid" || { echo "FAILED $run (see $out.log)" >&2; exit 1; }
      fi
      if [ -n "$at" ]; then
        for epoch in $(grep '"val/loss"' "$out/metrics.jsonl" | sed -n 's/.*"epoch":\([0-9]*\).*/\1/p'); do
          [ -e "$out/eval/epoch-$(printf %02d "$epoch").tune.summary.json" ] && continue
          RAYON_NUM_THREADS=${REFILL_THREADS:-1} "$lab" eval --device cpu --run "$out" --epoch "$epoch" \
            --split tune > /dev/null 2>> "$out.log" || { echo "FAILED tuning split of $run (see $out.log)" >&2; exit 1; }
        done
      fi
      if "$lab" sweep refill "$dir" "$out"; then
        ok=1 done_at=$at
        break
      fi
      echo "$run: not trained by ${at:-the current code}" >&2
    done
    if [ $ok = 0 ]; then
      echo "FAILED $run: none of ${REFILL_TRAIN_AT:-the current code} trained the committed run" >&2
      exit 1
    fi
    last=$done_at
    if [ "${REFILL_COMMIT:-1}" = 1 ]; then
      git add -- "$dir/metrics.jsonl" && git commit --quiet -m "refill $run: $figure from the same run trained again${done_at:+ (at $done_at)}" -- "$dir/metrics.jsonl" || true
    fi
  done
done
"$lab" sweep collect "$results"
"$lab" report "$results" --out "$results" > /dev/null
rm -f "$results"/*.png
if [ "${REFILL_COMMIT:-1}" = 1 ]; then
  git add -- "$results" && git commit --quiet -m "$(basename "$results"): results.csv and report after refilling $figure" -- "$results" || true
fi
