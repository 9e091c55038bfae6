#!/usr/bin/env bash
# The wave's studies, start to finish, in the order that answers the first questions first:
# the fair depth study's 100k bucket (issue 22: lr tuning, the fair baseline, then the
# one-factor variants: total parameters fixed, L x E fixed, heads swept), the objectives study's
# 100k bucket (issue 24: NTP against teacherless first, then both hash-conditioned, at the
# fair baseline's selected lrs; then NTP with prefixes drawn once per sequence, the other
# reading of hash-conditioning, 6 runs), then the fair study's 1M tuning and baseline (3-5x the
# tokens/s cost of a 100k run by the study-shapes bench, so late: a study cut short still has
# every 100k verdict), the fair study's second reading of selection at 1M (the lr with the best
# tuning-split creativity, at the depths where it differs from the tuning loss's), the
# objectives study's 1M bucket at the fair baseline's best depth (L = 4, at the 1M tuning's lr
# for it), and last the fair study's L x E variant at 1M (the variant that moved the 100k
# verdict most; 12 runs, about 7.5 core-hours, longer than a session's wall clock, so it goes
# after the objectives bucket, whose question 1 fits in one), then that arm under the second
# reading of selection (9 runs: its L = 1 stalls at the first reading's lr). Each stage is
# scripts/study.sh, which commits every run as it lands and skips runs already exported, so
# this one command continues the studies from wherever they stopped, on any clone:
#
#   setsid nohup scripts/studies.sh >> checkpoints/studies.out 2>&1 < /dev/null &
#
# STUDIES_FROM=NAME starts at that stage (the earlier ones are complete). Two runs at a time,
# one thread each (STUDY_JOBS=2): small models use one core better than two. A stage whose
# selection needs an unfinished tuning sweep cannot start before it, so the stages run one
# after the other.
set -euo pipefail
cd "$(dirname "$0")/.."
export STUDY_JOBS=${STUDY_JOBS:-2}
stages=(fair-cpu-tune-100k fair-cpu-seeds-100k fair-cpu-total-100k fair-cpu-lxe-100k
  fair-cpu-heads-100k objectives-100k objectives-100k-hash objectives-100k-hash-once
  fair-cpu-tune-1m fair-cpu-seeds-1m fair-cpu-tunec-1m objectives-1m objectives-1m-hash
  fair-cpu-lxe-1m fair-cpu-lxe-tunec-1m)
from=${STUDIES_FROM:-${stages[0]}}
started=0
for stage in "${stages[@]}"; do
  [ "$stage" = "$from" ] && started=1
  [ $started = 1 ] || continue
  echo "== $(date -u +%FT%TZ) $stage"
  scripts/study.sh "sweeps/$stage.toml"
done
[ $started = 1 ] || { echo "STUDIES_FROM=$from: no such stage (${stages[*]})" >&2; exit 2; }
echo "== $(date -u +%FT%TZ) every stage is complete"
