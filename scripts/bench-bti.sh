#!/usr/bin/env bash
# BTI (`da`) against BIG (`oa`) on the same Cassandra-written table (issue 33's target;
# docs/benchmarks.md "Issue 33"):
#
#   scripts/bench-bti.sh 8GiB 3
#
# Cassandra 5.0.9's CQLSSTableWriter (oracle/Oracle.java `write --sorted true`, family
# `blob_ck`: pk blob, ck bigint, v text; LZ4, 16 KiB chunks) writes the same rows (same seed)
# twice, once as BIG `oa` and once as BTI `da`, each as one sstable, on an XFS loop with
# reflink. Then ITER times each, interleaved, after `sync` and `drop_caches`:
# `cleave split <parent> --parts 8 --out <empty dir>` (children beside nothing; Data.db shared
# by reflink). Per run: wall, CPU, peak RSS, blocks read/written (GNU time) and cleave's own
# bytes shared/copied/re-encoded. Needs root, xfsprogs, losetup, /usr/bin/time,
# scripts/cassandra-testenv.sh install 5.0.9 and target/release/cleave.
#
# Environment: IMAGE (sparse loop image size, default 40G), CLEAVE (binary, default
# target/release/cleave), VALUE_BYTES (default 1024).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/sbin:/sbin"
SIZE=${1:-8GiB}
ITER=${2:-3}
V=5.0.9
CT=$PWD/scripts/cassandra-testenv.sh
CLEAVE=$(realpath "${CLEAVE:-target/release/cleave}")
VALUE_BYTES=${VALUE_BYTES:-1024}
ROWS=16 # rows a partition: uniform in 1..ROWS, 8.5 on average
FAMILY=blob_ck

# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh
bench_xfs bench-bti 40G --direct-io=on

bench_oracle "$V"

bytes=$(bytes_of "$SIZE")
partitions=$(( bytes * 2 / (ROWS + 1) / (VALUE_BYTES + 24) ))
declare -A PARENT
for format in big bti; do
  out=$MNT/$format/oracle/$FAMILY
  log "writing $SIZE of content ($partitions partitions) as $format with CQLSSTableWriter"
  "$JAVA" "${CLIENT_OPTS[@]}" -cp "$CLASSES:$CP" Oracle write --out "$out" --family "$FAMILY" \
    --partitions "$partitions" --rows "$ROWS" --value-bytes "$VALUE_BYTES" --seed 1 \
    --format "$format" --sorted true >&2
  [ "$(ls "$out"/*-Data.db | wc -l)" = 1 ] || { ls -l "$out" >&2; echo "expected one sstable" >&2; exit 1; }
  PARENT[$format]=$(ls "$out"/*-Data.db)
  log "$format parent: $(ls -l "$out" | awk 'NR>1 {printf "%s %s; ", $9, $5}')"
done

TSV=$WORK/rows.tsv
echo "# $(uname -r), $(nproc) cores, loop $DEV (direct-io) on $(df --output=source "$WORK" | tail -1), Cassandra $V writer"
printf 'size\tformat\twall_s\tuser_s\tsys_s\tpeak_rss_mib\tread_mib\twritten_mib\tshared_mib\tcopied_mib\treencoded_mib\tload1\n'
for i in $(seq "$ITER"); do
  for format in bti big; do
    out=$MNT/out-$format
    rm -rf "$out"; mkdir -p "$out"
    cold
    t=$WORK/time.out
    /usr/bin/time -o "$t" -f '%e\t%U\t%S\t%M\t%I\t%O' \
      "$CLEAVE" split "${PARENT[$format]}" --parts 8 --out "$out" --json >"$WORK/split.json" 2>"$WORK/split.err" \
      || { cat "$WORK/split.err" >&2; echo "split of $format failed" >&2; exit 1; }
    moved=$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("\t".join("%.1f" % (j[k] / 1048576) for k in ("bytes_shared", "bytes_copied", "bytes_reencoded")))' "$WORK/split.json")
    awk -v s="$SIZE" -v f="$format" -v m="$moved" -v ld="$(load1)" -F'\t' \
      '{ printf "%s\t%s\t%s\t%s\t%s\t%.1f\t%.1f\t%.1f\t%s\t%s\n", s, f, $1, $2, $3, $4/1024, $5/2048, $6/2048, m, ld }' "$t" | tee -a "$TSV"
  done
done
rm -rf "$MNT"/out-*
echo
echo "# medians (and the bti/big ratio of medians)"
python3 - "$TSV" <<'EOF'
import sys, statistics as st, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.rstrip('\n').split('\t')
    if len(f) < 12: continue
    rows[f[1]].append([float(x) for x in f[2:11]])
names = ['wall_s', 'cpu_s', 'peak_rss_mib', 'read_mib', 'written_mib', 'shared_mib']
med = {}
for fmt in ('bti', 'big'):
    r = rows[fmt]
    med[fmt] = [st.median(x[0] for x in r), st.median(x[1] + x[2] for x in r), st.median(x[3] for x in r),
                st.median(x[4] for x in r), st.median(x[5] for x in r), st.median(x[6] for x in r)]
    print(fmt, ' '.join(f'{n}={v:.3f}' for n, v in zip(names, med[fmt])))
print('ratio', ' '.join(f'{n}={a / b:.2f}x' if b else f'{n}=inf' for n, a, b in zip(names, med['bti'], med['big'])))
EOF
