#!/usr/bin/env bash
# RangeStream transport benchmark on loopback (docs/benchmarks.md "Streaming"):
#
#   scripts/bench-stream.sh [SIZE ...]        (default: 1GiB; e.g. 1GiB 8GiB)
#   RUNS=3 (runs per mode, medians reported)  COLD=1 (drop the page cache before each run)
#   BENCH_DIR=/tmp (needs ~3x SIZE free)  CLEAVE_BIN=target/release/cleave
#   MIN_FREE_PERCENT=0 (the receiver's --min-free-percent: 0 so a big disk mostly in use still runs)
#
# For each size: generates one sstable (`cleave gen --random`, incompressible, 16 KiB
# chunks), then RUNS rounds; each round runs every mode once, one after the other, on the
# same files (side by side, so load changes hit every mode alike):
#   raw TCP    `cat` of every component into a socket (bash /dev/tcp) — the same bytes,
#              no protocol, no checks — read by a Python receiver that writes and fsyncs;
#   copy       the same, but `dd bs=1M` per file: a read-and-write copy of the same bytes
#              into a socket, the sender-CPU baseline of the issue;
#   plaintext  cleave stream send → cleave stream serve --insecure-plaintext (token):
#              Data.db by sendfile;
#   TLS        the same over rustls (a throwaway CA made with openssl), Data.db read+encrypted;
#   verify     `cleave verify` of the received child (the full check the receiver runs at
#              commit), cold: the receiver's verification CPU on its own.
# Per mode: median wall s, MiB/s, the sender's user+sys CPU s and per GiB, the receiver's
# CPU per GiB, wall vs raw TCP, sender CPU vs the copy's. The load average is printed with
# every round (other work on the machine shows there).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${CLEAVE_BIN:-$ROOT/target/release/cleave}"
[ -x "$BIN" ] || (cd "$ROOT" && cargo build --release)
SIZES=("${@:-1GiB}")
RUNS="${RUNS:-3}"
W="$(mktemp -d "${BENCH_DIR:-/tmp}/cleave-bench-stream.XXXXXX")"
PIDS=()
cleanup() { for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done; rm -rf "$W"; }
trap cleanup EXIT

drop() { if [ "${COLD:-1}" = 1 ] && [ "$(id -u)" = 0 ]; then sync; echo 3 >/proc/sys/vm/drop_caches; fi; }
cpu_of() { awk '{print ($14+$15)/100}' "/proc/$1/stat"; } # utime+stime of a live pid, in s (HZ=100)
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
now() { date +%s.%N; }
calc() { python3 -c "print($1)"; }
# Waits (<= 30 s) until something listens on 127.0.0.1:$1, without connecting to it.
wait_listen() {
  local hex
  hex=$(printf '%04X' "$1")
  for _ in $(seq 600); do
    awk -v p=":$hex" '$2 ~ p"$" && $4 == "0A" {f=1} END {exit !f}' /proc/net/tcp && return 0
    sleep 0.05
  done
  echo "nothing listens on port $1" >&2
  exit 1
}

echo tok >"$W/token"
(cd "$W" && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=bench-ca 2>/dev/null &&
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >srv.ext &&
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout srv.key -out srv.csr -subj /CN=localhost 2>/dev/null &&
  openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out srv.pem -days 2 -extfile srv.ext 2>/dev/null)

# One socket run of a shell command ($2, sees $P) as the sender. Appends "wall scpu rcpu".
socket_run() {
  local mode=$1 cmd=$2
  drop
  P=$(port)
  # The receiver: a Python reader that writes and fsyncs what arrives.
  python3 - "$P" "$W/raw.out" <<'PY' &
import os, socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(1)
c, _ = s.accept(); f = open(sys.argv[2], "wb")
while True:
    b = c.recv(1 << 20)
    if not b: break
    f.write(b)
f.flush(); os.fsync(f.fileno())
PY
  local rpid=$!
  wait_listen "$P"
  local t0 t1
  t0=$(now)
  P=$P /usr/bin/time -f "%U %S" -o "$W/t.$mode" bash -c "$cmd"
  local rcpu
  rcpu=$(cpu_of $rpid)
  wait $rpid
  t1=$(now)
  [ "$(stat -c %s "$W/raw.out")" = "$BYTES" ] || { echo "$mode: reader got $(stat -c %s "$W/raw.out") of $BYTES bytes" >&2; exit 1; }
  echo "$(calc "$t1-$t0") $(awk '{print $1+$2}' "$W/t.$mode") $rcpu" >>"$W/res.$mode"
  rm -f "$W/raw.out"
}

cleave_run() {
  local mode=$1 sargs cargs
  drop
  P=$(port)
  rm -rf "$W/recv"
  if [ "$mode" = plaintext ]; then
    sargs=(--insecure-plaintext)
    cargs=(--insecure-plaintext)
  else
    sargs=(--stream-tls-cert "$W/srv.pem" --stream-tls-key "$W/srv.key")
    cargs=(--tls-ca "$W/ca.pem" --tls-server-name localhost)
  fi
  "$BIN" stream serve --stream-addr 127.0.0.1:$P --stream-staging "$W/recv" --stream-token-file "$W/token" --min-free-percent "${MIN_FREE_PERCENT:-0}" "${sargs[@]}" 2>"$W/serve.log" &
  local spid=$!
  PIDS+=($spid)
  wait_listen "$P"
  local t0 t1
  t0=$(now)
  /usr/bin/time -f "%U %S" -o "$W/t.send" "$BIN" stream send "$DATA" --to 127.0.0.1:$P --token-file "$W/token" "${cargs[@]}" --transfer-prefix "$mode" --json >"$W/send.json"
  t1=$(now)
  local rcpu
  rcpu=$(cpu_of $spid)
  kill $spid
  wait $spid 2>/dev/null || true
  echo "$(calc "$t1-$t0") $(awk '{print $1+$2}' "$W/t.send") $rcpu" >>"$W/res.$mode"
  if [ "$mode" = plaintext ]; then
    python3 -c "import json,sys;r=json.load(open('$W/send.json'))[0];print(r['bytesZeroCopy'],r['bytesSent'])" >>"$W/zc"
    # The receiver's check alone, cold: verify the received child.
    local got
    got=$(ls "$W"/recv/ready/ks/t/*-Data.db)
    drop
    t0=$(now)
    /usr/bin/time -f "%U %S" -o "$W/t.verify" "$BIN" verify "$got" >/dev/null
    t1=$(now)
    echo "$(calc "$t1-$t0") $(awk '{print $1+$2}' "$W/t.verify") 0" >>"$W/res.verify"
  fi
  rm -rf "$W/recv"
}

# median of column $2 of file $1
med() { python3 -c "import statistics,sys;print(statistics.median(float(l.split()[$2]) for l in open('$1')))"; }

for SIZE in "${SIZES[@]}"; do
  SRC="$W/src/ks/t-0123456789abcdef0123456789abcdef"
  rm -rf "$W/src" "$W"/res.* "$W/zc" && mkdir -p "$SRC"
  "$BIN" gen --out "$SRC" --size "$SIZE" --random >/dev/null 2>&1
  DATA="$(ls "$SRC"/*-Data.db)"
  # The bytes cleave sends: every component but Digest.crc32 and TOC.txt.
  FILES=$(ls "$SRC"/* | grep -v -e Digest.crc32 -e TOC.txt | tr '\n' ' ')
  BYTES=$(du -cb $FILES | tail -1 | cut -f1)
  GIB=$(calc "$BYTES/2**30")
  for r in $(seq "$RUNS"); do
    echo "# $SIZE round $r/$RUNS: $(uptime)" >&2
    socket_run raw "cat $FILES >/dev/tcp/127.0.0.1/\$P"
    socket_run copy "for f in $FILES; do dd if=\$f bs=1M status=none; done >/dev/tcp/127.0.0.1/\$P"
    cleave_run plaintext
    cleave_run tls
  done
  RAW=$(med "$W/res.raw" 0)
  COPY=$(med "$W/res.copy" 1)
  echo
  echo "$SIZE ($BYTES bytes), $RUNS runs per mode, medians; load: $(cut -d' ' -f1-3 /proc/loadavg)"
  printf '| size | run | wall s | MiB/s | sender CPU s | sender CPU s/GiB | vs copy CPU | receiver CPU s/GiB | vs raw TCP wall |\n|---|---|---|---|---|---|---|---|---|\n'
  for M in raw copy plaintext tls verify; do
    WALL=$(med "$W/res.$M" 0)
    S=$(med "$W/res.$M" 1)
    R=$(med "$W/res.$M" 2)
    case $M in
      raw) L="raw TCP (cat)" ;; copy) L="read+write copy (dd 1M) into a socket" ;;
      plaintext) L="cleave plaintext (sendfile)" ;; tls) L="cleave TLS" ;; verify) L="cleave verify of the child (cold)" ;;
    esac
    if [ $M = verify ]; then
      printf '| %s | %s | %.2f | %.0f | %.2f | %.2f | — | (%.2f CPU s/GiB) | — |\n' "$SIZE" "$L" "$WALL" "$(calc "$BYTES/2**20/$WALL")" "$S" "$(calc "$S/$GIB")" "$(calc "$S/$GIB")"
    else
      printf '| %s | %s | %.2f | %.0f | %.2f | %.2f | %.0f%% | %.2f | %.2f |\n' "$SIZE" "$L" "$WALL" "$(calc "$BYTES/2**20/$WALL")" "$S" "$(calc "$S/$GIB")" "$(calc "100*$S/$COPY")" "$(calc "$R/$GIB")" "$(calc "$RAW/$WALL")"
    fi
  done
  echo "plaintext bytesZeroCopy/bytesSent per run: $(tr '\n' ';' <"$W/zc")"
  echo "all runs (wall sender-cpu receiver-cpu):"
  for M in raw copy plaintext tls verify; do echo "  $M: $(tr '\n' ';' <"$W/res.$M")"; done
done
