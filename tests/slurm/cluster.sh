#!/usr/bin/env bash
# A real SLURM 22.05 cluster on this one machine, for the test suite (Debian, root).
#
#   eval "$(tests/slurm/cluster.sh start)"   # install if needed, start, print `export SLURM_CONF=...`
#   tests/slurm/cluster.sh status            # exit 0 when every daemon is up
#   tests/slurm/cluster.sh stop              # cancel jobs, end exactly the daemons `start` started
#   tests/slurm/cluster.sh clean             # stop, then delete the state directory
#
# munged, MariaDB, slurmdbd, slurmctld and three slurmd (node1, node2, node3) run from one directory,
# FSDP_ORCH_SLURM_DIR (default /tmp/fsdp-orch-slurm): config, state, logs, pids; ports from
# FSDP_ORCH_SLURM_PORT_BASE (default 16800). State is kept across stop/start (job ids go on,
# sacct keeps its history); `clean` starts over. Partitions:
# debug (default) and urgent (same nodes, higher PriorityTier: it preempts debug jobs by requeue).
# Only the export lines go to stdout; everything else goes to stderr.
set -euo pipefail

DIR=${FSDP_ORCH_SLURM_DIR:-/tmp/fsdp-orch-slurm}
CLUSTER=fsdporch
# Loopback ports BASE+6 (MariaDB), +17 (slurmctld), +19 (slurmdbd), +21.. (slurmd): a second
# cluster with its own directory and base can run beside this one.
PORT_BASE=${FSDP_ORCH_SLURM_PORT_BASE:-16800}
DB_PORT=$((PORT_BASE + 6))
CTLD_PORT=$((PORT_BASE + 17))
DBD_PORT=$((PORT_BASE + 19))
NODES=(node1 node2 node3)  # a 2-node job with a spare node (spare_nodes: 1) fills all three
NODE_PORTS=($((PORT_BASE + 21)) $((PORT_BASE + 22)) $((PORT_BASE + 23)))
PACKAGES=(slurmctld slurmd slurm-client slurmdbd munge mariadb-server)
COMMANDS=(slurmctld slurmd sbatch sacct slurmdbd munged mariadbd mariadb-install-db)
# Daemons in start order; stop goes in reverse.
DAEMONS=(munged mariadbd slurmdbd slurmctld "${NODES[@]/#/slurmd-}")
WAIT_S=${FSDP_ORCH_SLURM_WAIT_S:-60}

# The daemons live in /usr/sbin, which a non-login root shell may not have on PATH.
export PATH=$PATH:/usr/sbin:/sbin
ETC=$DIR/etc
LOG=$DIR/log
PIDS=$DIR/pids
export SLURM_CONF=$ETC/slurm.conf

say() { echo "cluster.sh: $*" >&2; }
die() { say "error: $*"; exit 1; }

# A recorded pid is ours only while the process has the start time we recorded with it. An exited
# daemon stays a zombie until init reaps it (seconds, in some containers): that counts as gone.
start_time() {
  local state rest
  read -r state rest < <(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) || return 0
  [ "$state" = Z ] || cut -d' ' -f19 <<<"$rest"
}

alive() {
  local pid recorded
  [ -r "$PIDS/$1" ] || return 1
  read -r pid recorded <"$PIDS/$1" || return 1
  [ -n "$pid" ] && [ "$(start_time "$pid")" = "$recorded" ]
}

pid_of() { cut -d' ' -f1 "$PIDS/$1"; }

# launch NAME COMMAND...: start a daemon in the foreground of its own session, detached from our
# stdout (so `$(cluster.sh start)` returns), and record its pid.
launch() {
  local name=$1 pid
  shift
  setsid "$@" </dev/null >>"$LOG/$name.out" 2>&1 9>&- &
  pid=$!
  echo "$pid $(start_time "$pid")" >"$PIDS/$name"
}

# wait_for WHAT COMMAND...: until COMMAND succeeds; fail early when a daemon we started exited.
wait_for() {
  local what=$1 deadline=$((SECONDS + WAIT_S)) f
  shift
  until "$@" >/dev/null 2>&1; do
    for f in "$PIDS"/*; do
      alive "${f##*/}" || fail "${f##*/} exited while waiting for $what"
    done
    if [ "$SECONDS" -ge "$deadline" ]; then
      fail "$what did not come up within ${WAIT_S}s"
    fi
    sleep 0.5
  done
}

# A daemon's own log, or what it printed before it had one (a bad config, a port in use).
show_logs() {
  local d f
  for d in "${DAEMONS[@]}"; do
    f=$LOG/$d.log
    [ -s "$f" ] || f=$LOG/$d.out
    [ -s "$f" ] || continue
    echo "----- last lines of $f" >&2
    tail -n 15 "$f" >&2
  done
}

fail() {
  say "error: $*"
  show_logs
  stop_daemons
  exit 1
}

install_packages() {
  local missing=() c
  for c in "${COMMANDS[@]}"; do
    command -v "$c" >/dev/null 2>&1 || missing+=("$c")
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  command -v apt-get >/dev/null 2>&1 || die "missing ${missing[*]} and no apt-get to install ${PACKAGES[*]}"
  say "installing ${PACKAGES[*]} (missing: ${missing[*]}); apt's output goes to $LOG/apt.log"
  export DEBIAN_FRONTEND=noninteractive
  # Package lists may be absent (fresh container) or stale: update only when the install fails.
  {
    apt-get install -y -q "${PACKAGES[@]}" \
      || { apt-get update -q && apt-get install -y -q "${PACKAGES[@]}"; }
  } >"$LOG/apt.log" 2>&1 || { tail -n 30 "$LOG/apt.log" >&2; die "apt-get install ${PACKAGES[*]} failed"; }
}

write_configs() {
  local host i
  host=$(hostname -s)
  cat >"$ETC/slurm.conf" <<EOF
# Written by tests/slurm/cluster.sh start; rewritten on every start.
ClusterName=$CLUSTER
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# cred_expire is also how long a requeued job waits before it may start again (default 120 s).
AuthInfo=socket=$DIR/munge/munge.socket,cred_expire=10
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
# No cgroups in a container: track processes by parent pid, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# Both nodes describe the same machine: trust this file, not the hardware slurmd detects.
SlurmdParameters=config_overrides
ReturnToService=2
JobRequeue=1
KillWait=5
OverTimeLimit=0
InactiveLimit=0
# Long enough for squeue to show finished jobs for a while, short enough to recycle records.
MinJobAge=300
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=5
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
# Clients reach slurmdbd through the munged named here, not through AuthInfo's.
AccountingStoragePass=$DIR/munge/munge.socket
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
EOF
  for i in "${!NODES[@]}"; do
    echo "NodeName=${NODES[$i]} NodeHostname=$host NodeAddr=127.0.0.1 Port=${NODE_PORTS[$i]} CPUs=2 RealMemory=4000 State=UNKNOWN" >>"$ETC/slurm.conf"
  done
  local nodelist
  nodelist=$(IFS=,; echo "${NODES[*]}")
  cat >>"$ETC/slurm.conf" <<EOF
PartitionName=debug Nodes=$nodelist Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=urgent Nodes=$nodelist MaxTime=INFINITE State=UP PriorityTier=2
EOF
  # slurmdbd has no config-file flag in 22.05: it reads slurmdbd.conf beside SLURM_CONF (mode 600).
  (
    umask 077
    cat >"$ETC/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
PidFile=$DIR/run/slurmdbd.pid
LogFile=$LOG/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$(cat "$DIR/mysql/slurm.password")
StorageLoc=slurm_acct_db
EOF
  )
}

munge_works() {
  munge -n -S "$DIR/munge/munge.socket" | unmunge -S "$DIR/munge/munge.socket"
}

start_munged() {
  if [ ! -r /etc/munge/munge.key ]; then
    mungekey -c -k /etc/munge/munge.key
    chown munge:munge /etc/munge/munge.key
    chmod 600 /etc/munge/munge.key
  fi
  install -d -o munge -g munge -m 755 "$DIR/munge"
  launch munged setpriv --reuid=munge --regid=munge --init-groups -- \
    munged --foreground --socket="$DIR/munge/munge.socket" --key-file=/etc/munge/munge.key \
    --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/munge/munged.log" \
    --seed-file="$DIR/munge/munged.seed"
  wait_for munged munge_works
}

sql() { mariadb --no-defaults --socket="$DIR/mysql/mysql.sock" -u root -e "$1"; }

start_mariadb() {
  local fresh=0
  if [ ! -d "$DIR/mysql/data/mysql" ]; then
    fresh=1
    rm -rf "$DIR/mysql"
    install -d -o mysql -g mysql -m 750 "$DIR/mysql" "$DIR/mysql/data"
    mariadb-install-db --no-defaults --datadir="$DIR/mysql/data" --user=mysql \
      --auth-root-authentication-method=socket --skip-test-db >"$LOG/mariadb-install.out" 2>&1 \
      || { cat "$LOG/mariadb-install.out" >&2; fail "mariadb-install-db failed"; }
    (umask 077; head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$DIR/mysql/slurm.password")
  fi
  touch "$LOG/mariadbd.log" && chown mysql:mysql "$LOG/mariadbd.log"
  launch mariadbd mariadbd --no-defaults --user=mysql --datadir="$DIR/mysql/data" \
    --socket="$DIR/mysql/mysql.sock" --pid-file="$DIR/mysql/mysqld.pid" \
    --port="$DB_PORT" --bind-address=127.0.0.1 --log-error="$LOG/mariadbd.log" \
    --innodb-buffer-pool-size=128M --innodb-lock-wait-timeout=900
  wait_for mariadb sql 'SELECT 1'
  if [ "$fresh" = 1 ]; then
    local pw
    pw=$(cat "$DIR/mysql/slurm.password")
    sql "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
      CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$pw';
      CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$pw';
      GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
      GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
  fi
}

cluster_registered() { sacctmgr -n -P list cluster format=Cluster | grep -qx "$CLUSTER"; }

nodes_idle() {
  local states
  states=$(sinfo -h -N -p debug -o '%N %T' | sort -u)
  [ "$(grep -c ' idle$' <<<"$states")" -eq "${#NODES[@]}" ]
}

start() {
  local all=1 d
  for d in "${DAEMONS[@]}"; do alive "$d" || all=0; done
  if [ "$all" = 1 ] && nodes_idle_or_busy; then
    say "already running in $DIR"
    print_exports
    return 0
  fi
  # Whatever is left of an earlier run (a crashed daemon, a half start) goes first.
  stop_daemons
  [ "$(id -u)" = 0 ] || die "must run as root (it installs packages and runs munged, slurmd, MariaDB)"
  install -d -m 755 "$DIR" "$ETC" "$LOG" "$PIDS" "$DIR/run" "$DIR/state" "$DIR/spool"
  install_packages
  for d in "${NODES[@]}"; do install -d -m 755 "$DIR/spool/$d"; done

  start_munged
  start_mariadb
  write_configs
  launch slurmdbd slurmdbd -D
  wait_for slurmdbd sacctmgr -n -P list cluster
  if ! cluster_registered; then
    sacctmgr -i add cluster "$CLUSTER" >&2 || fail "sacctmgr add cluster $CLUSTER failed"
  fi
  launch slurmctld slurmctld -D -i
  wait_for slurmctld scontrol ping
  # Jobs saved in the state of a run that ended without `stop` (their processes are gone).
  cancel_jobs 0
  for d in "${NODES[@]}"; do launch "slurmd-$d" slurmd -D -N "$d"; done
  wait_for "nodes ${NODES[*]} (idle in sinfo)" nodes_idle
  say "running in $DIR (${SECONDS}s)"
  print_exports
}

# On an `already running` check, nodes may be busy with jobs: any responsive state counts.
nodes_idle_or_busy() {
  local n
  n=$(sinfo -h -N -p debug -o '%N %T' 2>/dev/null | sort -u | grep -cE ' (idle|mixed|allocated|completing)$') || true
  [ "$n" -eq "${#NODES[@]}" ]
}

print_exports() {
  printf 'export SLURM_CONF=%q\n' "$SLURM_CONF"
  printf 'export FSDP_ORCH_SLURM_DIR=%q\n' "$DIR"
}

# slurmstepd and job processes outlive slurmd. Ours carry our SLURM_CONF in their environment: a
# slurmstepd inherits it from our slurmd, a job from the shell that submitted it (with SLURM_JOB_ID).
our_job_processes() {
  local p env
  for p in /proc/[0-9]*; do
    [ "${p#/proc/}" != "$$" ] || continue
    env=$(tr '\0' '\n' 2>/dev/null <"$p/environ") || continue
    grep -qxF "SLURM_CONF=$SLURM_CONF" <<<"$env" || continue
    if [ "$(cat "$p/comm" 2>/dev/null)" = slurmstepd ] || grep -q '^SLURM_JOB_ID=' <<<"$env"; then
      echo "${p#/proc/}"
    fi
  done
  return 0
}

# cancel_jobs [SECONDS]: cancel every queued or running job, wait until they are gone.
cancel_jobs() {
  local ids deadline=$((SECONDS + ${1:-20}))
  ids=$(squeue -h -o %A 2>/dev/null) || return 0
  [ -n "$ids" ] || return 0
  # shellcheck disable=SC2086 # one job id per word
  scancel $ids 2>/dev/null || true
  while [ -n "$(squeue -h -o %A 2>/dev/null)" ] && [ "$SECONDS" -lt "$deadline" ]; do
    sleep 0.5
  done
}

stop_daemons() {
  local i d pid deadline leftovers
  [ -d "$PIDS" ] || return 0
  if alive slurmctld; then cancel_jobs; fi
  leftovers=$(our_job_processes)
  # shellcheck disable=SC2086 # one pid per word
  [ -z "$leftovers" ] || kill -KILL $leftovers 2>/dev/null || true
  for ((i = ${#DAEMONS[@]} - 1; i >= 0; i--)); do
    d=${DAEMONS[$i]}
    if alive "$d"; then
      pid=$(pid_of "$d")
      kill -TERM "$pid" 2>/dev/null || true
      deadline=$((SECONDS + 20))
      while alive "$d" && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
      if alive "$d"; then
        say "$d (pid $pid) ignored SIGTERM; killing it"
        kill -KILL "$pid" 2>/dev/null || true
      fi
    fi
    rm -f "$PIDS/$d"
  done
}

status() {
  local d up=0
  for d in "${DAEMONS[@]}"; do
    if alive "$d"; then
      echo "$d: running (pid $(pid_of "$d"))"
      up=$((up + 1))
    else
      echo "$d: stopped"
    fi
  done
  if [ "$up" -gt 0 ]; then
    sinfo -N -o '%N %P %T' 2>&1 || true
  fi
  [ "$up" -eq "${#DAEMONS[@]}" ]
}

main() {
  local cmd=${1:-}
  case $cmd in
    start | stop | status | clean) ;;
    *) echo "usage: $0 start|stop|status|clean  (state in \$FSDP_ORCH_SLURM_DIR, default /tmp/fsdp-orch-slurm)" >&2; exit 2 ;;
  esac
  if [ "$cmd" = status ]; then
    status
    return
  fi
  if [ "$cmd" != start ] && [ ! -d "$DIR" ]; then
    return 0
  fi
  # One start/stop at a time per state directory (two test sessions at once).
  mkdir -p "$DIR"
  exec 9>"$DIR/lock"
  flock 9
  case $cmd in
    start) start ;;
    stop) stop_daemons ;;
    clean) stop_daemons; rm -rf "$DIR" ;;
  esac
}

main "$@"
