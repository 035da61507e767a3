#!/usr/bin/env bash
# Issue 35 deliverable 4: the cleanup after a scale-up, measured on a real loopback cluster of
# stock Cassandra — `nodetool cleanup` against cleave's cleanup staged while the node runs and
# published at its restart — with every row SELECTed before and after on both paths
# (docs/benchmarks.md "Issue 35: the cleanup after a node joined, on a loopback cluster").
#
#   scripts/bench-cluster-cleanup.sh SIZE ITER       e.g. 8GiB 3
#
# 1. Cassandra 5.0.9's CQLSSTableWriter (oracle/Oracle.java, family `blob_ck`: pk blob, ck
#    bigint, v text; LZ4, 16 KiB chunks; `--sorted true`: one sstable) writes SIZE of content.
# 2. Node A (127.0.0.1, token 0) alone: keyspace `oracle` (SimpleStrategy, RF 1), ITER tables
#    `n1..nITER` for nodetool and one table `c1` for cleave, each importing a reflink copy of
#    that sstable (`nodetool import`): the same rows in every table.
# 3. Node B (127.0.0.2, token 2^63-1) joins: A streams it (2^63-1... wraps, 0] — B's half of
#    every table — and A now owns (-2^63, 0]. Stream throughput is unthrottled first
#    (`nodetool setstreamthroughput 0`: 5.0's default cap is 24 MiB/s).
# 4. Before: every row of n1 and c1 SELECTed through A (oracle/Select.java: count, sum and
#    xor of an MD5 per row); B's sstables of n1 and c1 read by Cassandra's reader (`Oracle
#    dump --digest true`) hold the same rows.
# 5. Per nodetool table, cold (sync, drop_caches): `nodetool cleanup oracle nI` on A — the
#    node's CPU (/proc/PID/stat) and I/O (/proc/PID/io) deltas over the command, as
#    scripts/bench-anchors.sh does.
# 6. ITER times, cold: `cleave cleanup <A's c1 directory> --owned-ranges (-2^63, 0] --publish
#    on-restart --target-cassandra 5.0.9` while A runs (GNU time: wall, CPU, peak RSS, blocks
#    read and written); each run but the last is withdrawn afterwards (its
#    `.cleave-pending/<uid>/` removed, what cleave's own withdraw does for a deleted job).
# 7. A stops (drain), `cleave apply-pending --data-dir` publishes the last run's intent (timed
#    too, reported apart: it is part of the restart, not of the work), A starts again.
# 8. After: every row of n1 and c1 SELECTed again; A's sstables of n1 and c1 read by
#    Cassandra's reader. Checks, each failing the script: SELECT equal before and after on
#    both paths; A's rows after the cleanup equal between the two paths (nodetool's rewrite
#    and cleave's children hold the same partitions); B holds the same rows of n1 and c1.
#
# NEGATIVE_CONTROL=1 gives cleave the wrong ownership (half of A's range): rows are lost
# and the script must end with "rows differ" and exit 1.
#
# Needs root, xfsprogs, losetup, /usr/bin/time, scripts/cassandra-testenv.sh install (5.0.9)
# and target/release/cleave. Environment: IMAGE (sparse loop image, default 48G), CLEAVE,
# CASSANDRA_VERSION (default 5.0.9), VALUE_BYTES (default 1024), CLEAVE_CASSANDRA_HEAP.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/sbin:/sbin"
SIZE=${1:?usage: $0 SIZE ITER}
ITER=${2:-3}
V=${CASSANDRA_VERSION:-5.0.9}
CT=$PWD/scripts/cassandra-testenv.sh
CLEAVE=$(realpath "${CLEAVE:-target/release/cleave}")
VALUE_BYTES=${VALUE_BYTES:-1024}
ROWS=16 # rows a partition: uniform in 1..ROWS, 8.5 on average
FAMILY=blob_ck
table_cql() { echo "CREATE TABLE oracle.$1 (pk blob, ck bigint, v text, PRIMARY KEY (pk, ck)) WITH compression = {'class': 'LZ4Compressor', 'chunk_length_in_kb': 16}"; }

# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh
bench_xfs bench-cluster-cleanup 48G --direct-io=on
bench_oracle "$V"
# The client flags stop at the C1 compiler, which starts short tools twice as fast; the writer,
# the SELECTs and the reads here run for minutes, where C2 is several times faster.
LONG_OPTS=()
for o in "${CLIENT_OPTS[@]}"; do [ "$o" = -XX:TieredStopAtLevel=1 ] || LONG_OPTS+=("$o"); done

start_node() { # DIR [start args...]
  local dir=$1; shift
  mkdir -p "$dir"
  "$CT" start "$V" "$dir" "$@" >/dev/null
  # A restarted node is already in NODES (the EXIT trap stops each once).
  [[ " ${NODES[*]} " == *" $dir "* ]] || NODES+=("$dir")
}
table_dir() { ls -d "$(env_of "$1" DATA_DIR)"/oracle/"$2"-*; }
# Every row of a table SELECTed through NODE (oracle/Select.java: the Java driver that 5.0
# ships; count, sum and xor of an MD5 per row).
javac -nowarn --release 11 -cp "$CP" -d "$CLASSES" oracle/Select.java
select_digest() { # NODE TABLE
  "$JAVA" "${LONG_OPTS[@]}" -cp "$CLASSES:$CP" Select --host "$(env_of "$1" CQL_HOST)" \
    --port "$(env_of "$1" CQL_PORT)" --table "oracle.$2" | sed -n 's/^## //p'
}
# Cassandra's own reader over every sstable of a table directory, the per-sstable digests
# combined (count and sum add, xor xors; see oracle/Oracle.java `dump --digest`).
sstable_digest() { # TABLE_DIR
  local files
  mapfile -t files < <(ls "$1"/*-Data.db)
  "$JAVA" "${LONG_OPTS[@]}" -cp "$CLASSES:$CP" Oracle dump --mode linear --digest true "${files[@]}" |
    python3 -c '
import sys
n = e = s = x = 0
for l in sys.stdin:
    if not l.startswith("## "): continue
    f = dict(kv.split("=") for kv in l[3:].split())
    n += int(f["count"]); e += int(f["empty"]); s = (s + int(f["sum"])) % 2**64; x ^= int(f["xor"])
print(f"count={n} sum={s} xor={x} empty={e}")'
}

check_equal() { # WHAT A B
  if [ "$2" = "$3" ]; then log "equal: $1 ($2)"; else echo "DIFFERENT: $1: $2 vs $3" >&2; FAILED=1; fi
}
FAILED=0
say() { log "[${SECONDS}s] $*"; }

echo "# $(uname -r), $(nproc) cores, loop $DEV (direct-io) on $(df --output=source "$WORK" | tail -1), Cassandra $V, two nodes, $SIZE a table"
bytes=$(bytes_of "$SIZE")
partitions=$(( bytes * 2 / (ROWS + 1) / (VALUE_BYTES + 24) ))
gen=$MNT/gen
say "writing $SIZE of content ($partitions partitions) with CQLSSTableWriter (sorted: one sstable)"
"$JAVA" "${LONG_OPTS[@]}" -cp "$CLASSES:$CP" Oracle write --out "$gen" --family "$FAMILY" \
  --partitions "$partitions" --rows "$ROWS" --value-bytes "$VALUE_BYTES" --seed 1 --sorted true >&2
a=$MNT/node-a
start_node "$a"
"$CT" cql "$a" "CREATE KEYSPACE oracle WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}" >/dev/null
tables=()
for i in $(seq "$ITER"); do tables+=("n$i"); done
tables+=(c1)
for t in "${tables[@]}"; do
  "$CT" cql "$a" "$(table_cql "$t")" >/dev/null
  # 5.0's import takes the table from the directory's name: `<table>` (bench-anchors.sh).
  mkdir -p "$MNT/import/$t"
  cp --reflink=always "$gen"/* "$MNT/import/$t/"
  "$CT" nodetool "$a" import oracle "$t" "$MNT/import/$t" >&2
  [ -z "$(ls "$MNT/import/$t")" ] || { ls -l "$MNT/import/$t" >&2; echo "import left files" >&2; exit 1; }
done
rm -rf "$gen"
say "A holds $(ls "$(table_dir "$a" c1)"/*-Data.db | wc -l) sstable(s) a table, Data.db $(cat "$(table_dir "$a" c1)"/*-Data.db | wc -c) bytes"

"$CT" nodetool "$a" setstreamthroughput 0 >&2
"$CT" nodetool "$a" setstreamthroughput -e 0 >&2 || true
say "node B joins with token 9223372036854775807 (A keeps (-2^63, 0])"
b=$MNT/node-b
t0=$(date +%s)
# A joining node needs the ring delay to see A up and pull the schema before it bootstraps
# (scripts/cassandra-testenv.sh, CLEAVE_CASSANDRA_RING_DELAY_MS); with the test env's 1 s it
# streamed nothing.
CLEAVE_CASSANDRA_RING_DELAY_MS=10000 start_node "$b" --listen 127.0.0.2 --seeds "127.0.0.1:$(env_of "$a" STORAGE_PORT)" \
  --initial-token 9223372036854775807
say "B joined in $(( $(date +%s) - t0 )) s"
"$CT" nodetool "$a" status >&2
"$CT" nodetool "$b" flush >&2
for t in "${tables[@]}"; do
  say "B's $t: $(cat "$(table_dir "$b" "$t")"/*-Data.db 2>/dev/null | wc -c) bytes of Data.db"
done
# A join that streamed nothing (B bootstrapping before the schema reached it) would make a
# cleanup lose B's half: the SELECTs below would say so; stop here with the cause instead.
[ "$(cat "$(table_dir "$b" c1)"/*-Data.db 2>/dev/null | wc -c)" -gt 0 ] \
  || { echo "B holds no data of oracle.c1 after joining: nothing was streamed" >&2; exit 1; }

say "before: SELECT every row of n1 and c1 through A; B's sstables read by Cassandra"
declare -A BEFORE
for t in n1 c1; do
  BEFORE[$t]=$(select_digest "$a" "$t"); say "SELECT $t before: ${BEFORE[$t]}"
done
check_equal "SELECT n1 = c1 before (the same rows)" "${BEFORE[n1]}" "${BEFORE[c1]}"
B_N1=$(sstable_digest "$(table_dir "$b" n1)"); B_C1=$(sstable_digest "$(table_dir "$b" c1)")
check_equal "B's sstables, n1 = c1" "$B_N1" "$B_C1"
say "read"

printf 'size\ttool\twall_s\tuser_s\tsys_s\tpeak_rss_mib\tread_mib\twritten_mib\tload1\n'
for i in $(seq "$ITER"); do
  t=n$i
  timed_nodetool_cleanup "$SIZE" "$a" "$t"
  say "nodetool cleanup of $t left $(ls "$(table_dir "$a" "$t")"/*-Data.db | wc -l) sstable(s), $(cat "$(table_dir "$a" "$t")"/*-Data.db | wc -c) bytes of Data.db"
done

ranges=$WORK/owned.yaml
if [ "${NEGATIVE_CONTROL:-0}" = 1 ]; then
  # The negative control: cleave is told A owns only (-2^63, -2^62], half of what it owns;
  # the rows of (-2^62, 0] are then dropped from A while B never had them, and the checks
  # below must fail (the script exits 1, naming them).
  echo '- {start: "-9223372036854775808", end: "-4611686018427387904"}' >"$ranges"
  say "NEGATIVE CONTROL: cleave told A owns (-2^63, -2^62] only; the row checks must fail"
else
  echo '- {start: "-9223372036854775808", end: "0"}' >"$ranges"
fi
c1_dir=$(table_dir "$a" c1)
for i in $(seq "$ITER"); do
  cold
  printf '%s\t' "$SIZE" | tee -a "$TSV"
  timed cleave "$CLEAVE" cleanup "$c1_dir" --owned-ranges "$ranges" --publish on-restart \
    --job-uid "bench-$i" --target-cassandra "$V"
  say "cleave staged $(ls "$c1_dir/.cleave-pending/bench-$i"/children-*/*-Data.db 2>/dev/null | wc -l) child(ren) in .cleave-pending/bench-$i"
  [ "$i" = "$ITER" ] || rm -rf "$c1_dir/.cleave-pending/bench-$i"
done

say "A restarts: drain, apply-pending, start"
"$CT" stop "$a" >/dev/null
cold
printf '%s\t' "$SIZE" | tee -a "$TSV"
timed apply-pending "$CLEAVE" apply-pending --data-dir "$(env_of "$a" DATA_DIR)"
start_node "$a"
say "cleave's publication left $(ls "$c1_dir"/*-Data.db | wc -l) sstable(s), $(cat "$c1_dir"/*-Data.db | wc -c) bytes of Data.db"

say "after: SELECT every row again; A's sstables read by Cassandra"
for t in n1 c1; do
  after=$(select_digest "$a" "$t"); say "SELECT $t after: $after"
  check_equal "SELECT $t before = after" "${BEFORE[$t]}" "$after"
done
A_N1=$(sstable_digest "$(table_dir "$a" n1)"); A_C1=$(sstable_digest "$c1_dir")
say "A's sstables read after: n1 (nodetool) $A_N1; c1 (cleave) $A_C1"
# Cleave's children may hold empty filler partitions (`empty=`) that a rewrite does not:
# compare the rows, not the fillers.
check_equal "A's rows after, nodetool = cleave" "${A_N1% empty=*}" "${A_C1% empty=*}"

echo
cleanup_medians apply-pending
[ "$FAILED" = 0 ] || { echo "rows differ (above)" >&2; exit 1; }
echo "# rows: equal on both paths"
