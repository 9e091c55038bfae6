#!/usr/bin/env bash
# Issue 52's long CPU work, continued by one command in a new session: the 1M depth × lr grid
# (sweeps/grid-1m.toml, one thread, nice 10) and the refill of the fair study's tuning runs
# (its 100k runs at the commits that trained them, 2662bcb (L = 4, 8) and e6cab38, then its 1M
# runs at 9e61d45, whose code reproduced them bit for bit on 2026-12-04; nice 5). Each job
# commits its results as they land and logs to checkpoints/*.nohup; one already running is left
# alone.
#
#   scripts/background.sh [start]    start whichever job is not running
#   scripts/background.sh pause      SIGSTOP their trainers (before a benchmark or a CI run)
#   scripts/background.sh resume     SIGCONT them
#   scripts/background.sh status     what runs, and each log's last line
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p checkpoints
grid="scripts/study.sh sweeps/grid-1m.toml"
refill="scripts/refill.sh results/fair-cpu"
running() { pgrep -f "$1" >/dev/null; }
# The trainers of both jobs: the grid's (its own copy of lab) and the refill's (each commit's).
trainers() { pgrep -f ' train --' | while read -r p; do
  case $(tr '\0' ' ' </proc/"$p"/cmdline 2>/dev/null) in
    *grid-1m*|*target-*/release/lab*|*checkpoints/refill/*) echo "$p" ;;
  esac
done; }

case ${1:-start} in
  start)
    if running "$grid"; then echo "grid: running"; else
      STUDY_THREADS=1 nohup nice -n 10 bash $grid >>checkpoints/grid-1m.nohup 2>&1 &
      echo "grid: started (checkpoints/grid-1m.nohup, checkpoints/study-grid-1m.log)"
    fi
    if running "$refill"; then echo "refill: running"; else
      nohup nice -n 5 bash -c "REFILL_TRAIN_AT='2662bcb e6cab38' bash $refill fair-cpu-tune-100k- ;
        REFILL_TRAIN_AT='9e61d45 e6cab38' bash $refill fair-cpu-tune-1m-" \
        >>checkpoints/refill.nohup 2>&1 &
      echo "refill: started (checkpoints/refill.nohup)"
    fi
    ;;
  pause|resume)
    sig=$([ "$1" = pause ] && echo STOP || echo CONT)
    pids=$(trainers | tr '\n' ' ')
    [ -n "$pids" ] && kill -"$sig" $pids
    echo "$1: ${pids:-no trainers}"
    ;;
  status)
    for j in grid refill; do
      if running "${!j}"; then echo "$j: running"; else echo "$j: not running"; fi
    done
    echo "grid: $(ls results/grid-1m/runs | wc -l) of 100 runs exported"
    echo "refill: $(grep -l '"tune/creativity"' results/fair-cpu/runs/fair-cpu-tune-*/metrics.jsonl | wc -l) of 40 tuning runs carry tune/creativity"
    tail -n 1 checkpoints/study-grid-1m.log checkpoints/refill.nohup 2>/dev/null || true
    ;;
  *) echo "usage: scripts/background.sh [start|pause|resume|status]" >&2; exit 2 ;;
esac
