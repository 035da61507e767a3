#!/usr/bin/env bash
# Cassandra's own tools beside cleave, on the same Cassandra-written parent, cold, on an XFS
# loop mount with reflink (issue 30 deliverable 7; docs/benchmarks.md "Issue 30: Cassandra's
# own `sstablesplit` beside `cleave split`"):
#
#   scripts/bench-anchors.sh split "1GiB 8GiB" 3    StandaloneSplitter (`sstablesplit`, the
#                                                   "Existing" row of CASSANDRA-21550's table)
#                                                   against `cleave split --parts 8 --publish
#                                                   replace`, ITER runs each, interleaved
#
#   scripts/bench-anchors.sh cleanup 1GiB 3         `nodetool cleanup` on the old node of a
#                                                   two-node loopback cluster after the second
#                                                   node joined, against `cleave cleanup
#                                                   --publish replace` of a reflink copy of the
#                                                   same table, ITER tables, cold each time
#
# The parent: Cassandra 5.0.9's own CQLSSTableWriter (oracle/Oracle.java, family `blob_ck`:
# pk blob, ck bigint, v text; LZ4, 16 KiB chunks) writes SIZE of content, a live 5.0.9 node
# imports it and `nodetool compact`s it into one sstable (so the parent is what Cassandra's
# compaction writes), then the node stops. Every run starts from a reflink copy of that parent
# in the table directory, after `sync` and `drop_caches`.
#
# Per run: wall, user and system CPU, peak RSS and the blocks read and written (getrusage of
# the measured process and its children, 512-byte units, printed as MiB) by GNU time; for
# `nodetool cleanup`, whose work runs inside the node, the node's own CPU and /proc/<pid>/io
# over the command instead. Needs root, xfsprogs, losetup, /usr/bin/time,
# scripts/cassandra-testenv.sh install (5.0.9) and target/release/cleave.
#
# Environment: IMAGE (sparse loop image, default 48G), CLEAVE (binary, default
# target/release/cleave), CASSANDRA_VERSION (default 5.0.9), VALUE_BYTES (default 1024).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/sbin:/sbin"
MODE=${1:?usage: $0 split|cleanup SIZES ITER}
SIZES=${2:-"1GiB 8GiB"}
ITER=${3:-3}
V=${CASSANDRA_VERSION:-5.0.9}
CT=$PWD/scripts/cassandra-testenv.sh
CLEAVE=$(realpath "${CLEAVE:-target/release/cleave}")
VALUE_BYTES=${VALUE_BYTES:-1024}
ROWS=16 # rows a partition: uniform in 1..ROWS, 8.5 on average
FAMILY=blob_ck
TABLE_CQL="CREATE TABLE oracle.$FAMILY (pk blob, ck bigint, v text, PRIMARY KEY (pk, ck)) WITH compression = {'class': 'LZ4Compressor', 'chunk_length_in_kb': 16}"

# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh
bench_xfs bench-anchors 48G --direct-io=on

# The writer, compiled once against this version's jars.
bench_oracle "$V"

# start_node DIR [start args...]: prints nothing, sources DIR/cassandra.env into N_* vars.
start_node() {
  local dir=$1; shift
  mkdir -p "$dir"
  "$CT" start "$V" "$dir" "$@" >/dev/null
  NODES+=("$dir")
}

# make_parent SIZE NODE_DIR: the node holds exactly one sstable of SIZE content in oracle.blob_ck;
# sets TABLE_DIR. The node is left stopped. (Not run in a subshell: NODES must reach the trap.)
make_parent() {
  local size=$1 node=$2 bytes partitions gen table_dir
  bytes=$(bytes_of "$size")
  partitions=$(( bytes * 2 / (ROWS + 1) / (VALUE_BYTES + 24) ))
  # Not `gen-SIZE`: nodetool import reads a directory named `<table>-<id>` as a table's and
  # silently skips sstables whose table does not match (seen on 5.0.9).
  gen=$MNT/import/$FAMILY
  log "writing $size of content ($partitions partitions) with CQLSSTableWriter"
  "$JAVA" "${CLIENT_OPTS[@]}" -cp "$CLASSES:$CP" Oracle write --out "$gen" --family "$FAMILY" \
    --partitions "$partitions" --rows "$ROWS" --value-bytes "$VALUE_BYTES" --seed 1 >&2
  start_node "$node"
  "$CT" cql "$node" \
    "CREATE KEYSPACE IF NOT EXISTS oracle WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}" \
    "$TABLE_CQL" >/dev/null
  log "import + nodetool compact into one sstable"
  "$CT" nodetool "$node" import oracle "$FAMILY" "$gen" >&2
  [ -z "$(ls "$gen")" ] || { ls -l "$gen" >&2; echo "nodetool import left files in $gen" >&2; exit 1; }
  "$CT" nodetool "$node" compact oracle "$FAMILY" >&2
  "$CT" nodetool "$node" flush >&2
  "$CT" stop "$node" >/dev/null
  table_dir=$(ls -d "$(env_of "$node" DATA_DIR)"/oracle/"$FAMILY"-*)
  [ "$(ls "$table_dir"/*-Data.db | wc -l)" = 1 ] || { ls -l "$table_dir" >&2; echo "expected one sstable" >&2; exit 1; }
  rm -rf "$gen"
  TABLE_DIR=$table_dir
}

# restore TABLE_DIR PRISTINE: the table holds exactly the pristine parent again (reflink copies).
restore() {
  find "$1" -maxdepth 1 -type f -delete
  find "$1" -maxdepth 1 -mindepth 1 -type d -name '.cleave-*' -exec rm -rf {} +
  cp --reflink=always "$2"/* "$1"/
}

run_split() {
  local size node table_dir pristine parent mb i children
  echo "# $(uname -r), $(nproc) cores, loop $DEV (direct-io) on $(df --output=source "$WORK" | tail -1), Cassandra $V"
  printf 'size\ttool\twall_s\tuser_s\tsys_s\tpeak_rss_mib\tread_mib\twritten_mib\tload1\n'
  for size in $SIZES; do
    node=$MNT/node-$size
    make_parent "$size" "$node"
    table_dir=$TABLE_DIR
    pristine=$MNT/pristine-$size
    mkdir -p "$pristine"
    cp --reflink=always "$table_dir"/* "$pristine"/
    parent=$(basename "$(ls "$pristine"/*-Data.db)")
    mb=$(( ($(stat -c %s "$pristine/$parent") / 8 + 1048575) / 1048576 ))
    log "parent $parent: $(du -sh --apparent-size "$pristine" | cut -f1), Data.db $(stat -c %s "$pristine/$parent") bytes; sstablesplit -s $mb"
    for i in $(seq "$ITER"); do
      restore "$table_dir" "$pristine"; cold
      printf '%s\t' "$size" | tee -a "$TSV"
      timed sstablesplit "$JAVA" "${CLIENT_OPTS[@]}" -Dcassandra.config="file://$node/cassandra.yaml" \
        -Dcassandra.storagedir="$node" -cp "$CP" org.apache.cassandra.tools.StandaloneSplitter \
        --no-snapshot -s "$mb" "$table_dir/$parent"
      children=$(ls "$table_dir"/*-Data.db | wc -l)
      log "sstablesplit left $children sstables"
      restore "$table_dir" "$pristine"; cold
      printf '%s\t' "$size" | tee -a "$TSV"
      timed cleave "$CLEAVE" split "$table_dir/$parent" --parts 8 --publish replace --out "$table_dir"
      children=$(ls "$table_dir"/*-Data.db | wc -l)
      log "cleave left $children sstables"
    done
    restore "$table_dir" "$pristine"
    # A node started on the split result is the check that both sets are Cassandra's: counts.
  done
  echo
  echo "# medians (and the sstablesplit/cleave ratio of medians)"
  python3 - "$TSV" <<'EOF'
import sys, statistics as st, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.rstrip('\n').split('\t')
    if len(f) < 9: continue
    rows[(f[0], f[1])].append([float(x) for x in f[2:8]])
names = ['wall_s', 'cpu_s', 'peak_rss_mib', 'read_mib', 'written_mib']
for size in dict.fromkeys(k[0] for k in rows):
    med = {}
    for tool in ('sstablesplit', 'cleave'):
        r = rows.get((size, tool), [])
        if not r: continue
        med[tool] = [st.median(x[0] for x in r), st.median(x[1] + x[2] for x in r),
                     st.median(x[3] for x in r), st.median(x[4] for x in r), st.median(x[5] for x in r)]
        print(size, tool, ' '.join(f'{n}={v:.3f}' for n, v in zip(names, med[tool])))
    if len(med) == 2:
        print(size, 'ratio', ' '.join(f'{n}={a / b:.1f}x' if b else f'{n}=inf' for n, a, b in
                                       zip(names, med['sstablesplit'], med['cleave'])))
EOF
}

# cleanup: node A (token 0) holds ITER tables, each one compacted SIZE sstable of the same rows;
# node B joins with token 2^63-1, so A owns (-2^63, 0] — about half of each table — and streams
# the rest to B. `nodetool cleanup oracle <table i>` on A (B up and idle) is timed against
# `cleave cleanup --owned-ranges (-2^63, 0] --publish replace` of a reflink copy of A's table i
# (Cassandra's own files, in a table-shaped directory no Cassandra reads), cold each time
# (nodetool's CPU and I/O are the node's: timed_nodetool_cleanup in bench-lib.sh).
run_cleanup() {
  local size=$SIZES bytes partitions gen a b i t table_dir copy ranges
  echo "# $(uname -r), $(nproc) cores, loop $DEV (direct-io) on $(df --output=source "$WORK" | tail -1), Cassandra $V, two nodes"
  # nodetool's rows: the node's CPU (user+sys) in user_s, `-` for sys_s and peak_rss_mib.
  printf 'size\ttool\twall_s\tuser_s\tsys_s\tpeak_rss_mib\tread_mib\twritten_mib\tload1\n'
  bytes=$(bytes_of "$size")
  partitions=$(( bytes * 2 / (ROWS + 1) / (VALUE_BYTES + 24) ))
  gen=$MNT/gen
  log "writing $size of content ($partitions partitions) with CQLSSTableWriter"
  "$JAVA" "${CLIENT_OPTS[@]}" -cp "$CLASSES:$CP" Oracle write --out "$gen" --family "$FAMILY" \
    --partitions "$partitions" --rows "$ROWS" --value-bytes "$VALUE_BYTES" --seed 1 >&2
  a=$MNT/node-a
  start_node "$a"
  "$CT" cql "$a" "CREATE KEYSPACE oracle WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}" >/dev/null
  for i in $(seq "$ITER"); do
    t=${FAMILY}_$i
    "$CT" cql "$a" "${TABLE_CQL/oracle.$FAMILY /oracle.$t }" >/dev/null
    # 5.0's import takes the table from the directory's name (see make_parent).
    mkdir -p "$MNT/import/$t"
    cp --reflink=always "$gen"/* "$MNT/import/$t/"
    "$CT" nodetool "$a" import oracle "$t" "$MNT/import/$t" >&2
    "$CT" nodetool "$a" compact oracle "$t" >&2
  done
  rm -rf "$gen"
  log "node B joins with token 9223372036854775807 (A keeps (-2^63, 0])"
  b=$MNT/node-b
  start_node "$b" --listen 127.0.0.2 --seeds "127.0.0.1:$(env_of "$a" STORAGE_PORT)" \
    --initial-token 9223372036854775807
  "$CT" nodetool "$a" status >&2
  ranges=$WORK/owned.yaml
  echo '- {start: "-9223372036854775808", end: "0"}' >"$ranges"
  for i in $(seq "$ITER"); do
    t=${FAMILY}_$i
    table_dir=$(ls -d "$(env_of "$a" DATA_DIR)"/oracle/"$t"-*)
    # cleave's copy first, while A's table still holds the whole parent.
    copy=$MNT/copy-$i/oracle/$(basename "$table_dir")
    mkdir -p "$copy"
    find "$table_dir" -maxdepth 1 -type f -exec cp --reflink=always {} "$copy/" \;
    log "table $t: $(ls "$table_dir"/*-Data.db | wc -l) sstable(s), Data.db $(cat "$table_dir"/*-Data.db | wc -c) bytes"
    cold
    printf '%s\t' "$size" | tee -a "$TSV"
    timed cleave "$CLEAVE" cleanup "$copy" --owned-ranges "$ranges" --publish replace
    log "cleave left $(ls "$copy"/*-Data.db | wc -l) sstable(s), $(cat "$copy"/*-Data.db | wc -c) bytes of Data.db"
    timed_nodetool_cleanup "$size" "$a" "$t"
    log "nodetool cleanup left $(ls "$table_dir"/*-Data.db | wc -l) sstable(s), $(cat "$table_dir"/*-Data.db | wc -c) bytes of Data.db"
  done
  echo
  cleanup_medians
}
case $MODE in
  split) run_split ;;
  cleanup) run_cleanup ;;
  *) echo "usage: $0 split|cleanup SIZES ITER" >&2; exit 2 ;;
esac
