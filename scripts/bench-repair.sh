#!/usr/bin/env bash
# What a zero-copy pre-split at the ring's tokens saves an incremental repair on stock Cassandra
# (issue 36; docs/repair.md, docs/benchmarks.md "Issue 36"):
#
#   scripts/bench-repair.sh SIZE [VERSION...]     e.g. scripts/bench-repair.sh 256MiB 5.0.9 4.1.10
#
# Per version, on an XFS loop mount with reflink: a two-node loopback cluster (A 127.0.0.1 token 0,
# B 127.0.0.2 token 2^62; RF 2, so both nodes hold every row), two tables of the same rows
# (Cassandra's own CQLSSTableWriter, family blob_ck: pk blob, ck bigint, v text; LZ4, 16 KiB
# chunks), imported into both nodes, compaction disabled in the schema so that only the repair
# moves sstables:
#   - `plain`:    as imported;
#   - `presplit`: both nodes stopped, every sstable split by `cleave split --tokens <every ring
#                 token> --publish replace --target-cassandra VERSION` (zero-copy), nodes started;
#   - `stcs`, `lcs` (and `ucs` on 5.0): pre-split the same way, then after the restart their
#                 compaction is switched on (`ALTER TABLE ... WITH compaction`) and left to
#                 settle (no pending or active compaction) before the repair: what each
#                 strategy does to the alignment before a repair comes.
# Every table sees the same restart. Then `nodetool repair -pr oracle TABLE` (incremental, the
# default since 2.2) on A, then on B, for each table; per table and node Cassandra's own metrics
# BytesAnticompacted and BytesMutatedAnticompaction (TableMetrics, read by `nodetool sjk mx`),
# the node's bytes written (/proc/PID/io) over the repairs, the sstable count and the repair's
# wall. Rows are judged by Cassandra's own reader: per node and table, `Oracle dump --digest`
# of every sstable (count, sum and xor of an MD5 of each row; filler partitions are
# empty and not counted) before the repairs and after must be equal, and equal between the nodes.
#
# Environment: IMAGE (loop image size, default 24G), CLEAVE (default target/release/cleave),
# VALUE_BYTES (default 1024), STRATEGIES (default "stcs lcs ucs"; ucs on 5.0 only), NUM_TOKENS (default 1: A token 0, B 2^62; N > 1: vnodes, N
# random tokens a node, and the pre-split cuts at all 2N of them). Needs root, xfsprogs, losetup, scripts/cassandra-testenv.sh install.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/sbin:/sbin"
SIZE=${1:?usage: $0 SIZE [VERSION...]}
shift
VERSIONS=("$@")
[ ${#VERSIONS[@]} -gt 0 ] || VERSIONS=(5.0.9 4.1.10)
CT=$PWD/scripts/cassandra-testenv.sh
CLEAVE=$(realpath "${CLEAVE:-target/release/cleave}")
VALUE_BYTES=${VALUE_BYTES:-1024}
ROWS=16
FAMILY=blob_ck
TOKEN_B=4611686018427387904
NUM_TOKENS=${NUM_TOKENS:-1}

# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh
bench_xfs bench-repair 24G

node_written() { # NODE_DIR -> bytes the node's JVM has written so far
  awk '/^write_bytes/ {print $2}' "/proc/$(env_of "$1" PID)/io"
}
table_dir() { ls -d "$(env_of "$1" DATA_DIR)/oracle/$2"-*; }

# metric NODE TABLE NAME: the Count of a TableMetrics meter/counter, through nodetool's sjk.
metric() {
  local out
  out=$("$CT" nodetool "$1" sjk mx -mg -b "org.apache.cassandra.metrics:type=Table,keyspace=oracle,scope=$2,name=$3" -f Count 2>&1) \
    || { echo "$out" >&2; echo "sjk mx failed for $3" >&2; exit 1; }
  printf '%s\n' "$out" | grep -Eo '^[0-9]+' | tail -1
}

# digest V NODE TABLE: Cassandra's own reader over every sstable of the table on that node; one
# line "count sum xor" combined over the files (sum mod 2^64, xor), and the number of sstables.
digest() {
  local v=$1 node=$2 t=$3 files
  mapfile -t files < <(ls "$(table_dir "$node" "$t")"/*-Data.db)
  "$JAVA" "${CLIENT_OPTS[@]}" -cp "$CLASSES:$CP" Oracle dump --digest rows --mode linear "${files[@]}" \
    >"$WORK/dump.out" 2>"$WORK/dump.log" \
    || { tail -n 20 "$WORK/dump.log" >&2; echo "Oracle dump of $t on $node failed" >&2; exit 1; }
  python3 -c '
import sys, re
c = s = x = 0
for l in sys.stdin:
    m = re.match(r"## count=(\d+) empty=\d+ min=-?\d+ max=-?\d+ sum=(\d+) xor=(\d+)", l)
    if m:
        c += int(m[1]); s = (s + int(m[2])) % 2**64; x ^= int(m[3])
print(c, s, x, sys.argv[1])' "${#files[@]}" <"$WORK/dump.out"
}

# settle NODE...: until no node has had a compaction pending or running for three checks in
# a row, 10 s apart (a strategy just switched on may not have counted its tasks yet).
settle() {
  local i n ok stats calm=0
  for i in $(seq 1 180); do
    sleep 10
    ok=1
    for n in "$@"; do
      stats=$("$CT" nodetool "$n" compactionstats)
      # 4.1 prints "pending tasks: 0", 5.0 a table row "pending tasks   0".
      grep -Eq '^pending tasks:?[[:space:]]+0([[:space:]]|$)' <<<"$stats" || ok=0
      grep -q 'oracle' <<<"$stats" && ok=0
    done
    if [ $ok = 1 ]; then calm=$((calm + 1)); else calm=0; fi
    [ $calm -ge 3 ] && return 0
  done
  echo "compaction did not settle within 30 minutes" >&2
  exit 1
}

run_version() {
  local v=$1 bytes partitions gen a b t n f td before after w0 w1 t0 t1
  bench_oracle "$v"
  TABLES=(plain presplit)
  local strategy
  for strategy in ${STRATEGIES-stcs lcs ucs}; do
    case $strategy:$v in ucs:4.*) ;; *) TABLES+=("$strategy") ;; esac
  done
  bytes=$(bytes_of "$SIZE")
  partitions=$(( bytes * 2 / (ROWS + 1) / (VALUE_BYTES + 24) ))
  gen=$MNT/gen-$v/$FAMILY
  log "$v: writing $SIZE of content ($partitions partitions) with CQLSSTableWriter"
  "$JAVA" "${CLIENT_OPTS[@]}" -cp "$CLASSES:$CP" Oracle write --out "$gen" --family "$FAMILY" \
    --partitions "$partitions" --rows "$ROWS" --value-bytes "$VALUE_BYTES" --seed 1 >&2
  a=$MNT/$v-a
  b=$MNT/$v-b
  mkdir -p "$a" "$b"
  local tokens_b=(--initial-token "$TOKEN_B")
  [ "$NUM_TOKENS" = 1 ] || tokens_b=()
  "$CT" start "$v" "$a" --num-tokens "$NUM_TOKENS" >/dev/null
  NODES+=("$a")
  "$CT" start "$v" "$b" --listen 127.0.0.2 --seeds "127.0.0.1:$(env_of "$a" STORAGE_PORT)" \
    --num-tokens "$NUM_TOKENS" "${tokens_b[@]}" >/dev/null
  NODES+=("$b")
  "$CT" cql "$a" "CREATE KEYSPACE oracle WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 2}" >/dev/null
  for t in "${TABLES[@]}"; do
    "$CT" cql "$a" "CREATE TABLE oracle.$t (pk blob, ck bigint, v text, PRIMARY KEY (pk, ck)) WITH compression = {'class': 'LZ4Compressor', 'chunk_length_in_kb': 16} AND compaction = {'class': 'SizeTieredCompactionStrategy', 'enabled': 'false'}" >/dev/null
    for n in "$a" "$b"; do
      # 5.0's import takes the table from the directory's name.
      mkdir -p "$WORK/import/$t"
      cp --reflink=always "$gen"/* "$WORK/import/$t/" 2>/dev/null || cp "$gen"/* "$WORK/import/$t/"
      "$CT" nodetool "$n" import oracle "$t" "$WORK/import/$t" >&2
      rm -rf "$WORK/import/$t"
    done
  done
  rm -rf "$(dirname "$gen")"
  "$CT" nodetool "$a" status >&2
  # Every token of the ring, as Cassandra describes the keyspace's ranges (MIN bounds none).
  local ring
  ring=$("$CT" nodetool "$a" describering oracle | python3 -c '
import re, sys
t = set()
for m in re.finditer(r"start_token:(-?\d+), end_token:(-?\d+)", sys.stdin.read()):
    t.update(int(x) for x in m.groups())
t.discard(-2**63)
print(",".join(str(x) for x in sorted(t)))')
  log "$v: the ring's $(tr ',' '\n' <<<"$ring" | wc -l) tokens: $ring"
  for n in "$b" "$a"; do "$CT" stop "$n" >/dev/null; done
  log "$v: pre-split of every sstable but plain's at the ring's tokens (nodes stopped)"
  for t in "${TABLES[@]:1}"; do
    for n in "$a" "$b"; do
      td=$(table_dir "$n" "$t")
      for f in "$td"/*-Data.db; do
        /usr/bin/time -f "$t: %e s wall, %U s user, %S s sys, %M KiB peak" "$CLEAVE" split "$f" \
          --tokens "$ring" --publish replace --out "$td" --target-cassandra "$v" >/dev/null
      done
    done
  done
  for n in "$a" "$b"; do "$CT" start "$v" "$n" >/dev/null; done
  for t in "${TABLES[@]:2}"; do
    local class=${t^^}
    case $t in stcs) class=SizeTieredCompactionStrategy ;; lcs) class=LeveledCompactionStrategy ;;
      ucs) class=UnifiedCompactionStrategy ;; esac
    "$CT" cql "$a" "ALTER TABLE oracle.$t WITH compaction = {'class': '$class'}" >/dev/null
  done
  if [ ${#TABLES[@]} -gt 2 ]; then
    log "$v: compaction on for ${TABLES[*]:2}; waiting until both nodes have none pending or active"
    settle "$a" "$b"
    for t in "${TABLES[@]}"; do
      log "$v: $t before the repair: $(ls "$(table_dir "$a" "$t")"/*-Data.db | wc -l) sstables on A"
    done
  fi
  printf 'version\ttable\tnode\tsstables_before\tsstables_after\tbytes_anticompacted\tbytes_mutated\tnode_written_mib\trepair_wall_s\trows_equal\n'
  for t in "${TABLES[@]}"; do
    declare -A BEFORE=() W0=()
    for n in "$a" "$b"; do
      BEFORE[$n]=$(digest "$v" "$n" "$t")
      W0[$n]=$(node_written "$n")
    done
    [ "${BEFORE[$a]% *}" = "${BEFORE[$b]% *}" ] || { echo "nodes differ before repair: ${BEFORE[*]}" >&2; exit 1; }
    t0=$(date +%s.%N)
    for n in "$a" "$b"; do "$CT" nodetool "$n" repair -pr oracle "$t" >&2; done
    t1=$(date +%s.%N)
    declare -A W1=()
    for n in "$a" "$b"; do W1[$n]=$(node_written "$n"); done
    # What the repair's sstables set off runs before the rows are read again.
    case $t in plain|presplit) ;; *) settle "$a" "$b" ;; esac
    for n in "$a" "$b"; do
      w1=${W1[$n]}
      after=$(digest "$v" "$n" "$t")
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f\t%.2f\t%s\n' "$v" "$t" "$(basename "$n")" \
        "${BEFORE[$n]##* }" "${after##* }" "$(metric "$n" "$t" BytesAnticompacted)" \
        "$(metric "$n" "$t" BytesMutatedAnticompaction)" \
        "$(python3 -c "print(($w1 - ${W0[$n]}) / 2**20)")" "$(python3 -c "print($t1 - $t0)")" \
        "$([ "${after% *}" = "${BEFORE[$n]% *}" ] && echo yes || echo "NO: ${BEFORE[$n]} -> $after")"
      [ "${after% *}" = "${BEFORE[$n]% *}" ] || exit 1
    done
    unset BEFORE W0 W1
  done
  for n in "$b" "$a"; do "$CT" stop "$n" >/dev/null; done
}

echo "# $(uname -r), $(nproc) cores, loop $DEV on $(df --output=source "$WORK" | tail -1), $SIZE of content a table, $NUM_TOKENS token(s) a node, load $(cut -d' ' -f1-3 /proc/loadavg)"
for v in "${VERSIONS[@]}"; do run_version "$v"; done
