#!/usr/bin/env bash
# Stop the one-node Slurm cluster started by scripts/slurm-up.sh: cancel its jobs, then end
# slurmd, slurmctld and munged by the pids recorded at start (never by name).
# usage: scripts/slurm-down.sh [--quiet]    (as root)
set -uo pipefail
quiet=0
[ "${1:-}" = --quiet ] && quiet=1
state=/var/lib/lab-slurm
say() { [ "$quiet" = 1 ] || echo "$@"; }

alive_pid() { # pid comm
  [ -r "/proc/$1/stat" ] && [ "$(cut -d' ' -f3 < "/proc/$1/stat")" != Z ] \
    && [ "$(cat "/proc/$1/comm" 2>/dev/null)" = "$2" ]
}

stop() { # name
  local f="$state/$1.pid" pid
  pid=$(cat "$f" 2>/dev/null) || return 0
  if alive_pid "$pid" "$1"; then
    kill "$pid" 2>/dev/null
    for _ in $(seq 100); do alive_pid "$pid" "$1" || break; sleep 0.1; done
    alive_pid "$pid" "$1" && kill -9 "$pid" 2>/dev/null
    say "slurm: stopped $1 ($pid)"
  fi
  rm -f "$f"
}

if [ -e "$state/slurmctld.pid" ] && command -v squeue >/dev/null; then
  jobs=$(squeue -h -o %i 2>/dev/null | tr '\n' ' ')
  if [ -n "${jobs// }" ]; then
    scancel $jobs 2>/dev/null
    say "slurm: cancelled $jobs"
    sleep 1
  fi
fi
stop slurmd
stop slurmctld
stop munged
exit 0
