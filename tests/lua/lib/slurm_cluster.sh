#!/usr/bin/env bash
# slurm_cluster.sh: a private single-node Slurm cluster on loopback, for the
# scale-out tests (tests/lua/test_slurm.lua).
#   slurm_cluster.sh start DIR WATCH_PID   munged + slurmctld + slurmd with a config
#                                          in DIR (non-default ports, SlurmUser = this
#                                          user, proctrack/linuxproc, task/none, no
#                                          cgroups); prints SLURM_CONF=DIR/slurm.conf.
#                                          A watchdog stops the cluster when WATCH_PID
#                                          exits, so nothing outlives the test.
#   slurm_cluster.sh stop DIR              cancels its jobs, stops the daemons, removes DIR
# Exit 77 with the reason on stdout when this machine cannot run it (packages
# missing, daemons refuse to start as a non-root user); 1 on other failures.
set -uo pipefail
cmd=${1:-}; dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop DIR [WATCH_PID]"; exit 2; }

stop() {
  [ -f "$dir/slurm.conf" ] || { rm -rf "$dir"; return 0; }
  export SLURM_CONF=$dir/slurm.conf
  scancel --quiet --full --partition=kh 2>/dev/null
  for i in $(seq 30); do
    [ -z "$(squeue -h -p kh 2>/dev/null)" ] && break
    sleep 0.1
  done
  for f in slurmd.pid slurmctld.pid munge/pid; do
    [ -f "$dir/$f" ] || continue
    local pid; pid=$(cat "$dir/$f" 2>/dev/null)
    [ -n "$pid" ] || continue
    kill "$pid" 2>/dev/null
    for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  done
  rm -rf "$dir"
}

if [ "$cmd" = stop ]; then
  # the watchdog may be waiting for this cluster: it finds DIR gone and leaves
  stop
  exit 0
fi
[ "$cmd" = start ] || { echo "unknown command $cmd"; exit 2; }
watch=${3:-}

for p in munged slurmctld slurmd srun squeue scancel sinfo; do
  command -v "$p" >/dev/null 2>&1 || { echo "$p is not installed (Debian: slurm-wlm munge)"; exit 77; }
done

mkdir -p "$dir/state" "$dir/spool" "$dir/munge" || exit 1
chmod 755 "$dir"
chmod 700 "$dir/munge"
head -c 1024 /dev/urandom > "$dir/munge/key" && chmod 600 "$dir/munge/key" || exit 1
if ! munged --force --key-file="$dir/munge/key" --socket="$dir/munge/sock" \
     --pid-file="$dir/munge/pid" --log-file="$dir/munge/log" --seed-file="$dir/munge/seed" \
     >"$dir/munge/out" 2>&1; then
  why=$(tail -1 "$dir/munge/out")
  stop
  [ "$(id -u)" -ne 0 ] && { echo "munged does not start as a non-root user: $why"; exit 77; }
  echo "munged did not start: $why"; exit 1
fi

user=$(id -un)
host=$(hostname)
port=$((20000 + RANDOM % 20000))
cat > "$dir/slurm.conf" <<C
ClusterName=khlua
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/sock
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
InactiveLimit=0
KillWait=2
NodeName=khnode NodeHostname=$host NodeAddr=127.0.0.1 CPUs=16 RealMemory=1000 State=UNKNOWN
PartitionName=kh Nodes=khnode Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
C
export SLURM_CONF=$dir/slurm.conf
if ! slurmctld -f "$SLURM_CONF" >"$dir/ctld.out" 2>&1 || ! slurmd -f "$SLURM_CONF" -N khnode >"$dir/d.out" 2>&1; then
  why=$(tail -1 "$dir/slurmctld.log" "$dir/slurmd.log" "$dir/ctld.out" "$dir/d.out" 2>/dev/null | grep -v '^$' | tail -1)
  stop
  [ "$(id -u)" -ne 0 ] && { echo "Slurm daemons do not start as a non-root user: $why"; exit 77; }
  echo "Slurm daemons did not start: $why"; exit 1
fi
if [ -n "$watch" ]; then
  # stop the cluster when the test process goes, however it goes
  setsid bash -c 'while kill -0 '"$watch"' 2>/dev/null && [ -d "'"$dir"'" ]; do sleep 1; done; "'"$0"'" stop "'"$dir"'"' \
    </dev/null >/dev/null 2>&1 &
fi
for i in $(seq 100); do
  sinfo -h -o %T 2>/dev/null | grep -q idle && { echo "SLURM_CONF=$SLURM_CONF"; exit 0; }
  sleep 0.1
done
why=$(tail -2 "$dir/slurmctld.log" "$dir/slurmd.log" 2>/dev/null | grep -v '^$' | tail -2 | tr '\n' ' ')
stop
echo "the Slurm node did not come up within 10 s: $why"
exit 1
