#!/usr/bin/env bash
# RangeStream transport benchmark on loopback (docs/benchmarks.md "Streaming"):
#
#   scripts/bench-stream.sh [SIZE ...]        (default: 1GiB; e.g. 1GiB 8GiB)
#
# For each size: generates one sstable (`cleave gen --random`, incompressible, 16 KiB
# chunks), then, one after the other on the same machine and the same files:
#   raw TCP    bash `cat Data.db >/dev/tcp/…` into a Python socket reader that writes
#              and fsyncs a file (the same bytes, no protocol, no checks);
#   plaintext  cleave stream send → cleave stream serve --insecure-plaintext (token);
#   TLS        the same over rustls (a throwaway CA made with openssl);
#   copy       `dd bs=1M` read-and-write copy of Data.db + fsync (the CPU baseline).
# Prints wall seconds, MiB/s, sender user+sys CPU seconds, receiver CPU seconds, and the
# receiver's commit (full check) time from its log. Page cache is dropped before each run
# when root (cold cache; COLD=0 keeps it warm). Needs ~3x SIZE of free space under $BENCH_DIR (default /tmp).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$ROOT/target/release/cleave"
[ -x "$BIN" ] || (cd "$ROOT" && cargo build --release)
SIZES=("${@:-1GiB}")
W="$(mktemp -d "${BENCH_DIR:-/tmp}/cleave-bench-stream.XXXXXX")"
PIDS=()
cleanup() { for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done; rm -rf "$W"; }
trap cleanup EXIT

drop() { if [ "${COLD:-1}" = 1 ] && [ "$(id -u)" = 0 ]; then sync; echo 3 >/proc/sys/vm/drop_caches; fi; }
cpu_of() { awk '{print ($14+$15)/100}' "/proc/$1/stat"; }  # utime+stime of a live pid, in s (HZ=100)
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

echo tok >"$W/token"
(cd "$W" && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=bench-ca 2>/dev/null &&
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >srv.ext &&
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout srv.key -out srv.csr -subj /CN=localhost 2>/dev/null &&
  openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out srv.pem -days 2 -extfile srv.ext 2>/dev/null)

printf '| size | run | wall s | MiB/s | sender CPU s | receiver CPU s | vs raw TCP |\n|---|---|---|---|---|---|---|\n'
for SIZE in "${SIZES[@]}"; do
  SRC="$W/src/ks/t-0123456789abcdef0123456789abcdef"
  rm -rf "$W/src" && mkdir -p "$SRC"
  "$BIN" gen --out "$SRC" --size "$SIZE" --random >/dev/null 2>&1
  DATA="$(ls "$SRC"/*-Data.db)"
  BYTES=$(du -cb "$SRC"/* | tail -1 | cut -f1)
  MIB=$(python3 -c "print($BYTES/1048576)")

  # raw TCP: every component's bytes, cat into a socket, reader writes + fsyncs.
  drop
  P=$(port)
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
  RPID=$!; sleep 0.5
  T0=$(date +%s.%N)
  /usr/bin/time -f "%U %S" -o "$W/t.raw" bash -c "cat $SRC/* >/dev/tcp/127.0.0.1/$P"
  R_CPU=$(cpu_of $RPID); wait $RPID; T1=$(date +%s.%N)
  RAW=$(python3 -c "print($T1-$T0)")
  S_CPU=$(awk '{print $1+$2}' "$W/t.raw")
  printf '| %s | raw TCP (cat) | %.2f | %.0f | %.2f | %.2f | 1.00 |\n' "$SIZE" "$RAW" "$(python3 -c "print($MIB/$RAW)")" "$S_CPU" "$R_CPU"
  rm -f "$W/raw.out"

  for MODE in plaintext tls; do
    drop
    P=$(port); rm -rf "$W/recv"
    if [ $MODE = plaintext ]; then
      SARGS=(--insecure-plaintext); CARGS=(--insecure-plaintext)
    else
      SARGS=(--stream-tls-cert "$W/srv.pem" --stream-tls-key "$W/srv.key"); CARGS=(--tls-ca "$W/ca.pem" --tls-server-name localhost)
    fi
    "$BIN" stream serve --stream-addr 127.0.0.1:$P --stream-staging "$W/recv" --stream-token-file "$W/token" "${SARGS[@]}" 2>"$W/serve.log" &
    SPID=$!; PIDS+=($SPID); sleep 0.5
    T0=$(date +%s.%N)
    /usr/bin/time -f "%U %S" -o "$W/t.send" "$BIN" stream send "$DATA" --to 127.0.0.1:$P --token-file "$W/token" "${CARGS[@]}" --transfer-prefix "$MODE" >/dev/null
    T1=$(date +%s.%N)
    R_CPU=$(cpu_of $SPID); kill $SPID; wait $SPID 2>/dev/null || true
    WALL=$(python3 -c "print($T1-$T0)")
    S_CPU=$(awk '{print $1+$2}' "$W/t.send")
    printf '| %s | cleave %s | %.2f | %.0f | %.2f | %.2f | %.2f |\n' "$SIZE" "$MODE" "$WALL" "$(python3 -c "print($MIB/$WALL)")" "$S_CPU" "$R_CPU" "$(python3 -c "print($RAW/$WALL)")"
    rm -rf "$W/recv"
  done

  # read-and-write copy: CPU baseline for the sender.
  drop
  /usr/bin/time -f "%e %U %S" -o "$W/t.copy" dd if="$DATA" of="$W/copy.out" bs=1M conv=fsync status=none
  read -r CW CU CS <"$W/t.copy"
  printf '| %s | dd copy (read+write) | %.2f | %.0f | %.2f | — | — |\n' "$SIZE" "$CW" "$(python3 -c "print($MIB/$CW)")" "$(python3 -c "print($CU+$CS)")"
  rm -f "$W/copy.out"
  # receiver verification alone: the full check of the received child (cleave verify).
done
