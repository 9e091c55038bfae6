#!/usr/bin/env bash
# Re-score every committed answer file of a study (results/<study>/runs/*/eval/*.jsonl.gz) with
# `lab score`, rebuilding each run's world from its config.toml, and check that it gives the
# committed summary byte for byte; sampled answers (*.samples.jsonl.gz) are scored as sets. Prints one line per mismatch and a count; exit 1 on any.
#
#   scripts/rescore.sh results/repro-cpu
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: scripts/rescore.sh RESULTS_DIR" >&2; exit 2; }
dir=$1
if [ -z "${LAB:-}" ]; then
  (cd "$(dirname "$0")/.." && cargo build --release --quiet)
  LAB="$(cd "$(dirname "$0")/.." && pwd)/target/release/lab"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
bad=0
for run in "$dir"/runs/*/; do
  # The world of this run: reused when it is the last one's, rebuilt otherwise.
  if ! "$LAB" data --config "$run/config.toml" --out "$tmp/data" >/dev/null 2>&1; then
    "$LAB" data --config "$run/config.toml" --out "$tmp/data" --force >/dev/null
  fi
  for answers in "$run"/eval/epoch-*.jsonl.gz; do
    [ -e "$answers" ] || continue
    stem=$(basename "$answers" .jsonl.gz)
    sets=()
    case $stem in *.samples) sets=(--sets) ;; esac
    "$LAB" score --data "$tmp/data" --answers "$answers" "${sets[@]}" --out "$tmp/s.jsonl" >/dev/null
    n=$((n + 1))
    if ! cmp -s "$tmp/s.summary.json" "$run/eval/$stem.summary.json"; then
      echo "MISMATCH $run/eval/$stem.summary.json"
      bad=$((bad + 1))
    fi
  done
done
echo "$n answer files re-scored, $bad mismatches"
[ "$bad" -eq 0 ]
