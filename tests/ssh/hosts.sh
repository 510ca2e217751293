#!/usr/bin/env bash
# Real SSH hosts on this one machine, for the test suite (Debian, root): one network namespace
# per host, with its own sshd, on a bridge.
#
#   eval "$(tests/ssh/hosts.sh up 3)"   # install sshd if needed, build 3 hosts, print the exports
#   tests/ssh/hosts.sh status           # exit 0 when the hosts exist and every sshd answers
#   tests/ssh/hosts.sh restart I        # start host I's sshd again (a test killed the host), disk wiped
#   eval "$(tests/ssh/hosts.sh exports)" # the exports of the hosts that are up
#   tests/ssh/hosts.sh down             # end their processes, delete them and the state directory
#
# Host i (1-based) is the namespace fo-h<i>: eth0 = 10.77.0.<i+1>/24, its veth peer fo-v<i> on the
# bridge fo-br0 (10.77.0.1/24, root namespace). Keys, known_hosts, sshd configs and the fsdp-orch
# cluster profiles live in FSDP_ORCH_SSH_DIR (default /tmp/fsdp-orch-ssh). `up` always starts from
# scratch (it runs `down` first). Only the export lines go to stdout; everything else goes to stderr.
#
# Each sshd also runs in a mount namespace of its own, so a host sees this machine's files (like
# hosts on NFS: ssh.yaml, shared_filesystem: true) except for:
#   $DIR/host-disk    the host's own disk: a tmpfs per host, which no other host and not this
#                     machine can see (ssh-own-disks.yaml, shared_filesystem: false, works there);
#   $DIR/submit-host  a folder only this machine sees (an empty tmpfs on the hosts): tests that
#                     keep the submitting side's files there prove that the hosts never read them;
#   ~/.bashrc         a fresh account's, so a login does not run this machine's shell set-up.
set -euo pipefail

DIR=${FSDP_ORCH_SSH_DIR:-/tmp/fsdp-orch-ssh}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PYTHON=${FSDP_ORCH_SSH_PYTHON:-$REPO/.venv/bin/python}
BRIDGE=fo-br0
SUBNET=10.77.0
SSHD=/usr/sbin/sshd
# How long an sshd may take to answer: generous, because a loaded machine (the suite's workers beside
# stress-ng) took over 30 s to start one, and a host that fails to start fails every test after it.
WAIT_S=${FSDP_ORCH_SSH_WAIT_S:-120}
# The file by which `down` knows that it may delete the state directory.
MARKER=made-by-hosts.sh

export PATH=$PATH:/usr/sbin:/sbin

say() { echo "hosts.sh: $*" >&2; }
die() { say "error: $*"; exit 1; }

address() { echo "$SUBNET.$(($1 + 1))"; }

# Our namespaces (fo-h1, fo-h2, ...), whatever their number, in order.
namespaces() {
  ip netns list | awk '{print $1}' | grep -E '^fo-h[0-9]+$' | sort -t h -k 2 -n || true
}

# answers ADDRESS [NAMESPACE]: an sshd there sends its banner.
answers() {
  local ns=() banner
  [ -z "${2:-}" ] || ns=(ip netns exec "$2")
  # shellcheck disable=SC2016 # $1 is the inner bash's argument
  banner=$("${ns[@]}" timeout 3 bash -c 'exec 3<>"/dev/tcp/$1/22" && head -c 4 <&3' _ "$1" 2>/dev/null) || return 1
  [ "$banner" = SSH- ]
}

ssh_as_root() {
  ssh -F /dev/null -i "$DIR/id_ed25519" -o IdentitiesOnly=yes -o BatchMode=yes \
    -o StrictHostKeyChecking=yes -o UserKnownHostsFile="$DIR/known_hosts" \
    -o GlobalKnownHostsFile=/dev/null -o ConnectTimeout=5 -l root "$@"
}

install_sshd() {
  [ -x "$SSHD" ] && return 0
  command -v apt-get >/dev/null 2>&1 || die "no $SSHD and no apt-get to install openssh-server"
  say "installing openssh-server; apt's output goes to $DIR/apt.log"
  export DEBIAN_FRONTEND=noninteractive
  # The package's postinst would start a system sshd on port 22 of this namespace; invoke-rc.d
  # asks policy-rc.d first, and 101 means "not allowed".
  local policy=/usr/sbin/policy-rc.d ours=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    ours=1
  fi
  # Recommends would pull in systemd (libpam-systemd). Package lists may be absent or stale:
  # update only when the install fails.
  local install=(apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=300 openssh-server)
  local ok=1
  { "${install[@]}" || { apt-get update -q && "${install[@]}"; }; } >"$DIR/apt.log" 2>&1 || ok=0
  [ "$ours" = 0 ] || rm -f "$policy"
  [ "$ok" = 1 ] || { tail -n 30 "$DIR/apt.log" >&2; die "apt-get install openssh-server failed"; }
}

# With br_netfilter loaded, bridged frames pass iptables' FORWARD chain, where a DROP policy
# (Docker sets one) would cut the hosts off from each other.
allow_bridged_traffic() {
  [ "$(cat /proc/sys/net/bridge/bridge-nf-call-iptables 2>/dev/null)" = 1 ] || return 0
  command -v iptables >/dev/null 2>&1 || return 0
  iptables -I FORWARD -i "$BRIDGE" -o "$BRIDGE" -m comment --comment fsdp-orch-ssh -j ACCEPT
}

make_network() {
  local n=$1 i ns
  ip link add "$BRIDGE" type bridge
  ip addr add "$SUBNET.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  allow_bridged_traffic
  for ((i = 1; i <= n; i++)); do
    ns=fo-h$i
    ip netns add "$ns"
    ip link add "fo-v$i" type veth peer name eth0 netns "$ns"
    ip link set "fo-v$i" master "$BRIDGE" up
    ip -n "$ns" addr add "$(address "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
  done
}

make_keys() {
  local n=$1 i
  ssh-keygen -q -t ed25519 -N '' -C fsdp-orch-ssh-tests -f "$DIR/id_ed25519"
  cp "$DIR/id_ed25519.pub" "$DIR/authorized_keys"
  : >"$DIR/known_hosts"
  for ((i = 1; i <= n; i++)); do
    ssh-keygen -q -t ed25519 -N '' -C "fo-h$i" -f "$DIR/h$i/ssh_host_ed25519_key"
    echo "$(address "$i") $(cut -d' ' -f1,2 "$DIR/h$i/ssh_host_ed25519_key.pub")" >>"$DIR/known_hosts"
  done
}

write_sshd_config() {
  local i=$1
  cat >"$DIR/h$i/sshd_config" <<EOF
# Written by tests/ssh/hosts.sh up for fo-h$i.
ListenAddress $(address "$i")
Port 22
HostKey $DIR/h$i/ssh_host_ed25519_key
PidFile $DIR/sshd-h$i.pid
AuthorizedKeysFile $DIR/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
# The state directory is under /tmp, which is world-writable.
StrictModes no
# fabric's put and get use SFTP.
Subsystem sftp internal-sftp
EOF
}

# wait_for COMMAND...: until COMMAND succeeds, for at most WAIT_S seconds.
wait_for() {
  local deadline=$((SECONDS + WAIT_S))
  until "$@"; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.2
  done
}

fail() {
  local log
  for log in "$DIR"/h*/sshd.log; do
    [ -s "$log" ] || continue
    echo "----- last lines of $log" >&2
    tail -n 15 "$log" >&2
  done
  # Last, so that a caller keeping only the tail of stderr keeps the reason.
  say "error: $*"
  # A half-built set of hosts goes; a failed restart of one host leaves the others to their tests.
  [ "${cmd:-}" = restart ] || down
  exit 1
}

# Run by `unshare --mount` in a host's namespace: its own disk, the hidden folder, a plain ~/.bashrc,
# then sshd (which keeps the mount namespace alive).
# shellcheck disable=SC2016 # expanded by the inner bash
HOST_MOUNTS='set -e
mount -t tmpfs -o mode=0755,size=2g "$0-disk" "$1"
mount -t tmpfs -o mode=0700,size=1m "$0-hidden" "$2"
if [ -f "$HOME/.bashrc" ]; then mount --bind "$3" "$HOME/.bashrc"; fi
exec "$4" -f "$5" -E "$6"'

start_sshd() {
  local i=$1 addr
  addr=$(address "$i")
  ip netns exec "fo-h$i" unshare --mount --propagation private -- bash -c "$HOST_MOUNTS" "fo-h$i" \
    "$DIR/host-disk" "$DIR/submit-host" "$DIR/bashrc" "$SSHD" "$DIR/h$i/sshd_config" "$DIR/h$i/sshd.log" \
    || fail "sshd in fo-h$i did not start"
  wait_for answers "$addr" || fail "sshd on $addr did not answer within ${WAIT_S}s"
}

# write_profile N FILE SHARED: the cluster profile of the N hosts, with shared_filesystem: SHARED.
write_profile() {
  local n=$1 file=$2 shared=$3 i
  {
    echo "# Written by tests/ssh/hosts.sh up: the hosts in network namespaces fo-h1..fo-h$n."
    echo "kind: ssh"
    echo "device: cpu"
    echo "hosts:"
    for ((i = 1; i <= n; i++)); do
      echo "  - {address: $(address "$i"), port: 22, user: root, identity_file: $(yaml "$DIR/id_ed25519")}"
    done
    echo "python: $(yaml "$PYTHON")"
    echo "known_hosts: $(yaml "$DIR/known_hosts")"
    echo "host_key_policy: strict"
    echo "shared_filesystem: $shared"
    [ "$shared" = true ] || echo "remote_workdir: $(yaml "$DIR/host-disk/fsdp-orch")"
    echo "connect_timeout: 5"
    # The namespaces share one hostname: gloo must not find its address through it.
    echo 'env: {GLOO_SOCKET_IFNAME: eth0, OMP_NUM_THREADS: "1"}'
  } >"$DIR/$file"
}

# A YAML single-quoted scalar.
yaml() { printf "'%s'" "${1//\'/\'\'}"; }

up() {
  local n=$1 i addrs=()
  if ! [[ "$n" =~ ^[0-9]+$ ]] || [ "$n" -lt 1 ] || [ "$n" -gt 250 ]; then
    die "up takes a host count from 1 to 250, not '$n'"
  fi
  [ "$(id -u)" = 0 ] || die "must run as root (it installs packages, makes namespaces, runs sshd)"
  [[ "$PYTHON" = /* ]] || die "FSDP_ORCH_SSH_PYTHON must be an absolute path, not '$PYTHON'"
  if [ -e "$DIR" ] && [ ! -e "$DIR/$MARKER" ]; then
    die "$DIR exists and was not made by hosts.sh (no $MARKER in it); set FSDP_ORCH_SSH_DIR to a new path"
  fi
  down
  install -d -m 700 "$DIR"
  touch "$DIR/$MARKER"
  for ((i = 1; i <= n; i++)); do install -d -m 700 "$DIR/h$i"; done
  install -d -m 755 "$DIR/host-disk"
  install -d -m 700 "$DIR/submit-host"
  cat >"$DIR/bashrc" <<'RC'
# ~/.bashrc of the test hosts: a fresh account's, which returns at once when not interactive.
[ -z "${PS1:-}" ] && return
RC
  install_sshd
  mkdir -p /run/sshd
  make_network "$n"
  make_keys "$n"
  for ((i = 1; i <= n; i++)); do
    write_sshd_config "$i"
    start_sshd "$i"
    addrs+=("$(address "$i")")
  done
  for ((i = 2; i <= n; i++)); do
    answers "$(address "$i")" fo-h1 || fail "fo-h1 cannot reach $(address "$i") over the bridge"
  done
  for ((i = 1; i <= n; i++)); do
    ssh_as_root "$(address "$i")" true </dev/null \
      || fail "ssh root@$(address "$i") with $DIR/id_ed25519 failed"
  done
  write_profile "$n" ssh.yaml true
  write_profile "$n" ssh-own-disks.yaml false
  say "$n hosts up in $DIR (${SECONDS}s)"
  exports "${addrs[@]}"
}

# exports [ADDRESS...]: the lines `up` prints; with no address, those of the hosts that exist.
exports() {
  local ns addrs=("$@")
  if [ "${#addrs[@]}" -eq 0 ]; then
    for ns in $(namespaces); do addrs+=("$(address "${ns#fo-h}")"); done
    [ "${#addrs[@]}" -gt 0 ] || die "no hosts are up (run: $0 up N)"
  fi
  printf 'export FSDP_ORCH_SSH_DIR=%q\n' "$DIR"
  printf 'export FSDP_ORCH_SSH_HOSTS=%q\n' "${addrs[*]}"
  printf 'export FSDP_ORCH_SSH_PROFILE=%q\n' "$DIR/ssh.yaml"
  printf 'export FSDP_ORCH_SSH_OWN_DISKS_PROFILE=%q\n' "$DIR/ssh-own-disks.yaml"
  printf 'export FSDP_ORCH_SSH_SUBMIT_HOST_DIR=%q\n' "$DIR/submit-host"
  printf 'export FSDP_ORCH_SSH_KEY=%q\n' "$DIR/id_ed25519"
  printf 'export FSDP_ORCH_SSH_KNOWN_HOSTS=%q\n' "$DIR/known_hosts"
}

# kill_all SIGNAL PID...: ignoring those already gone.
kill_all() {
  local signal=$1
  shift
  [ "$#" -eq 0 ] || kill "-$signal" "$@" 2>/dev/null || true
}

down() {
  local ns pids deadline pidfile pid link
  for ns in $(namespaces); do
    mapfile -t pids < <(ip netns pids "$ns")
    kill_all TERM "${pids[@]}"
    deadline=$((SECONDS + 5))
    while [ -n "$(ip netns pids "$ns")" ] && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
    mapfile -t pids < <(ip netns pids "$ns")
    kill_all KILL "${pids[@]}"
    ip netns del "$ns"
  done
  # An sshd whose namespace someone deleted by hand still runs; its pid file names it.
  for pidfile in "$DIR"/sshd-h*.pid; do
    [ -r "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "-f $DIR/"; then
      kill_all KILL "$pid"
    fi
  done
  # Deleting a namespace deletes its veth end, and with it the peer; a half-built one may be left.
  for link in $(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E '^fo-v[0-9]+$'); do
    ip link del "$link" 2>/dev/null || true
  done
  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link del "$BRIDGE"
  fi
  if command -v iptables >/dev/null 2>&1; then
    while iptables -D FORWARD -i "$BRIDGE" -o "$BRIDGE" -m comment --comment fsdp-orch-ssh -j ACCEPT 2>/dev/null; do :; done
  fi
  # Only a directory that `up` made: FSDP_ORCH_SSH_DIR=/tmp must not delete /tmp.
  if [ -e "$DIR/$MARKER" ]; then
    rm -rf "$DIR"
  fi
}

status() {
  local ns all=() up=0
  mapfile -t all < <(namespaces)
  for ns in "${all[@]}"; do
    if answers "$(address "${ns#fo-h}")" "$ns"; then
      echo "$ns: sshd answers on $(address "${ns#fo-h}")"
      up=$((up + 1))
    else
      echo "$ns: no sshd on $(address "${ns#fo-h}")"
    fi
  done
  [ "${#all[@]}" -gt 0 ] && [ "$up" -eq "${#all[@]}" ]
}

main() {
  local cmd=${1:-}
  case $cmd in
    up) [ "$#" -eq 2 ] || die "usage: $0 up N" ;;
    restart) if [ "$#" -ne 2 ] || ! namespaces | grep -qx "fo-h$2"; then die "usage: $0 restart I (a host that is up)"; fi ;;
    down | status | exports) ;;
    *) echo "usage: $0 up N|down|status|exports|restart I  (state in \$FSDP_ORCH_SSH_DIR, default /tmp/fsdp-orch-ssh)" >&2; exit 2 ;;
  esac
  # ssh and sshd split UserKnownHostsFile and such on blanks.
  [[ "$DIR" = /* && "$DIR" != *[[:space:]]* ]] || die "FSDP_ORCH_SSH_DIR must be an absolute path without blanks, not '$DIR'"
  if [ "$cmd" = restart ]; then
    start_sshd "$2"
    return
  fi
  if [ "$cmd" = status ] || [ "$cmd" = exports ]; then
    "$cmd"
    return
  fi
  # The names (fo-h*, fo-br0) are machine-wide, so the lock is too: this script file, which
  # `down` never deletes.
  exec 9<"${BASH_SOURCE[0]}"
  flock 9
  case $cmd in
    up) up "$2" ;;
    down) down ;;
  esac
}

main "$@"
