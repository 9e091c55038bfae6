#!/usr/bin/env bash
# Start a real one-node Slurm cluster on this Debian machine, without systemd (see
# docs/SLURM.md for the facts behind each step). Idempotent: a second start while the
# cluster is up does nothing. Installs slurmctld, slurmd, slurm-client and munge if missing.
#
# usage: scripts/slurm-up.sh [--gpus N]    (as root)
#   --gpus N   advertise N fake GPUs, so that --gres=gpu:1 job scripts run unchanged
# Stop it with scripts/slurm-down.sh, which ends only the processes started here.
set -euo pipefail
gpus=0
while [ $# -gt 0 ]; do
  case "$1" in
    --gpus) gpus=$2; shift 2 ;;
    *) echo "usage: $0 [--gpus N]" >&2; exit 2 ;;
  esac
done
state=/var/lib/lab-slurm
mkdir -p "$state"

# A pid is ours and alive: the process exists, is not a zombie, and runs the right program.
alive() { # pidfile comm
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -r "/proc/$pid/stat" ] || return 1
  [ "$(cut -d' ' -f3 < "/proc/$pid/stat")" != Z ] || return 1
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ]
}

if alive "$state/munged.pid" munged && alive "$state/slurmctld.pid" slurmctld && alive "$state/slurmd.pid" slurmd \
  && [ "$(cat "$state/gpus" 2>/dev/null)" = "$gpus" ] && sinfo -h -o %T 2>/dev/null | grep -qE 'idle|mix|alloc'; then
  echo "slurm: already up"
  exit 0
fi

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null \
  || ! command -v munged >/dev/null; then
  echo "slurm: installing packages"
  # Package scripts try to start services; forbid that for the install, if nothing else does.
  own_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    own_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null
  [ "$own_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
fi

# Stop a half-started cluster of ours before a cold start.
"$(dirname "$0")/slurm-down.sh" --quiet || true

# Cold start: leftover job step daemons of an earlier cluster make "Job credential revoked".
for p in /proc/[0-9]*; do
  if [ "$(cat "$p/comm" 2>/dev/null)" = slurmstepd ]; then kill -9 "${p#/proc/}" 2>/dev/null || true; fi
done
rm -rf /var/spool/slurmd/* /var/spool/slurmctld/*

mkdir -p /etc/munge /run/munge /var/log/munge /var/lib/munge /var/spool/slurmd /var/spool/slurmctld /var/log/slurm /etc/slurm
if [ ! -s /etc/munge/munge.key ]; then
  head -c 128 /dev/urandom > /etc/munge/munge.key
fi
chown -R munge:munge /etc/munge /run/munge /var/log/munge /var/lib/munge
chmod 400 /etc/munge/munge.key
chmod 700 /etc/munge

cpus=$(nproc)
mem=$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
mem=$((mem * 95 / 100))
gres_node="" gres_types=""
rm -f /etc/slurm/gres.conf
if [ "$gpus" -gt 0 ]; then
  for i in $(seq 0 $((gpus - 1))); do
    [ -e "/dev/fakegpu$i" ] || mknod "/dev/fakegpu$i" c 1 3
  done
  gres_types="GresTypes=gpu"
  gres_node="Gres=gpu:$gpus"
  echo "Name=gpu File=/dev/fakegpu[0-$((gpus - 1))]" > /etc/slurm/gres.conf
fi
cat > /etc/slurm/slurm.conf <<CONF
# Written by lab's scripts/slurm-up.sh: a one-node cluster without systemd or cgroups.
ClusterName=lab
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerParameters=batch_sched_delay=0,sched_interval=1,bf_interval=1
DependencyParameters=kill_invalid_depend
AccountingStorageType=accounting_storage/none
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
$gres_types
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem $gres_node State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF

runuser -u munge -- munged
cp /run/munge/munged.pid "$state/munged.pid"
slurmctld -c
for _ in $(seq 50); do [ -s /run/slurmctld.pid ] && break; sleep 0.1; done
cp /run/slurmctld.pid "$state/slurmctld.pid"
slurmd -N localhost
for _ in $(seq 50); do [ -s /run/slurmd.pid ] && break; sleep 0.1; done
cp /run/slurmd.pid "$state/slurmd.pid"
echo "$gpus" > "$state/gpus"

for _ in $(seq 300); do
  if sinfo -h -o %T 2>/dev/null | grep -q idle; then break; fi
  sleep 0.1
done
if ! sinfo -h -o %T | grep -q idle; then
  echo "slurm: the node did not come up; see /var/log/slurm/" >&2
  exit 1
fi
srun -t 1 hostname >/dev/null
echo "slurm: up ($cpus CPUs, ${mem} MB, $gpus fake GPUs)"
