#!/usr/bin/env bash
# The fair depth study (issue 22), start to finish, in the order that answers the first
# question first: the 100k bucket's lr tuning, its fair baseline (3 seeds at each depth's
# selected lr), the one-factor variants at 100k (total parameters fixed, L x E fixed, heads
# swept), then the 1M bucket's tuning and baseline (about 10x a 100k run each, so last: a
# study cut short still has every 100k verdict). Each stage is scripts/study.sh, which
# commits every run as it lands and skips runs already exported to results/fair-cpu, so this
# one command continues the study from wherever it stopped, on any clone:
#
#   nohup scripts/fair-study.sh > checkpoints/fair-study.out 2>&1 &
#
# Two runs at a time, one thread each (STUDY_JOBS=2): small models use one core better than
# two. A stage whose selection needs an unfinished tuning sweep cannot start before it, so the
# stages run one after the other.
set -euo pipefail
cd "$(dirname "$0")/.."
export STUDY_JOBS=${STUDY_JOBS:-2}
for stage in tune-100k seeds-100k total-100k lxe-100k heads-100k tune-1m seeds-1m; do
  echo "== $(date -u +%FT%TZ) fair-cpu-$stage"
  scripts/study.sh "sweeps/fair-cpu-$stage.toml"
done
echo "== $(date -u +%FT%TZ) the fair study is complete"
