# Sourced by the benchmarks that run Cassandra on an XFS loop mount with reflink
# (scripts/bench-anchors.sh, scripts/bench-repair.sh, scripts/bench-bti.sh), after
# `set -euo pipefail` and with CT set to scripts/cassandra-testenv.sh:
#
#   bench_xfs NAME SIZE [LOSETUP_OPTION...]
#       WORK (a fresh temp directory cleave-NAME.*), IMG, MNT (XFS, reflink=1, on a loop file
#       of SIZE, or $IMAGE), DEV; an EXIT trap stops every node in NODES, the last started
#       first (a joined node before its seed), unmounts and removes WORK.
#   bench_oracle VERSION
#       JAVA, CP, CLIENT_OPTS (that version's client JVM) and CLASSES (oracle/Oracle.java
#       compiled against its jars with javac --release 11, as the tests do, under WORK).
#   log, env_of NODE_DIR VAR, bytes_of 1GiB|512MiB, cold (sync, drop_caches), load1
#   timed LABEL CMD...
#       one row appended to $TSV (and printed) from GNU time: label, wall, user, sys, peak RSS
#       MiB, MiB read and written (blocks of 512 bytes), load1; a caller prints any leading
#       column first. TSV is $WORK/rows.tsv unless set.
#   timed_nodetool_cleanup SIZE NODE_DIR TABLE
#       cold, then `nodetool cleanup oracle TABLE` on that node: one `nodetool-cleanup` row
#       whose CPU (in the user column) and I/O are the node JVM's, the work being the node's
#   cleanup_medians [SKIP_TOOL]
#       the medians of $TSV's rows per tool and the nodetool-cleanup/cleave ratio

bench_xfs() {
  local name=$1 size=$2
  shift 2
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/cleave-$name.XXXXXX")
  TSV=${TSV:-$WORK/rows.tsv}
  IMG=$WORK/xfs.img
  MNT=$WORK/mnt
  DEV=
  NODES=()
  trap bench_cleanup EXIT
  truncate -s "${IMAGE:-$size}" "$IMG"
  DEV=$(losetup "$@" -f --show "$IMG")
  mkfs.xfs -q -m reflink=1 "$DEV"
  mkdir -p "$MNT"
  mount "$DEV" "$MNT"
}

bench_cleanup() {
  local i
  for ((i = ${#NODES[@]} - 1; i >= 0; i--)); do "$CT" stop "${NODES[$i]}" >/dev/null 2>&1 || true; done
  mountpoint -q "$MNT" && umount "$MNT"
  [ -n "$DEV" ] && losetup -d "$DEV"
  rm -rf "$WORK"
}

bench_oracle() {
  local v=$1
  JAVA=$("$CT" java "$v")
  CP=$("$CT" classpath "$v")
  read -r -a CLIENT_OPTS <<<"$("$CT" jvm-opts "$v" client)"
  CLASSES=$WORK/classes-$v
  mkdir -p "$CLASSES"
  javac -nowarn --release 11 -cp "$CP" -d "$CLASSES" oracle/Oracle.java 2>"$WORK/javac.log" \
    || { cat "$WORK/javac.log"; exit 1; }
}

cold() { sync; echo 3 > /proc/sys/vm/drop_caches; }
load1() { cut -d' ' -f1 /proc/loadavg; }
log() { printf '# %s\n' "$*" >&2; }
env_of() { (set -a; . "$1/cassandra.env"; printf '%s\n' "${!2}"); }
bytes_of() { # 1GiB / 512MiB -> bytes
  python3 -c "import re,sys; m=re.fullmatch(r'(\d+)(GiB|MiB)', sys.argv[1]); print(int(m[1]) << (30 if m[2]=='GiB' else 20))" "$1"
}

timed() {
  local label=$1 t; shift
  t=$WORK/time.out
  /usr/bin/time -o "$t" -f '%e\t%U\t%S\t%M\t%I\t%O' "$@" >"$WORK/cmd.log" 2>&1 \
    || { cat "$WORK/cmd.log" >&2; echo "$label failed" >&2; exit 1; }
  awk -v l="$label" -v ld="$(load1)" -F'\t' \
    '{ printf "%s\t%s\t%s\t%s\t%.1f\t%.1f\t%.1f\t%s\n", l, $1, $2, $3, $4/1024, $5/2048, $6/2048, ld }' "$t" | tee -a "$TSV"
}

node_cpu_io() { # PID -> "cpu_seconds read_bytes write_bytes"
  python3 -c '
import os, sys
pid = sys.argv[1]
f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
cpu = (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
io = dict(l.split(": ") for l in open(f"/proc/{pid}/io").read().splitlines())
print(cpu, int(io["read_bytes"]), int(io["write_bytes"]))' "$1"
}

# nodetool is a JMX client: the work runs in the node, so the node's CPU (/proc/PID/stat) and
# I/O (/proc/PID/io) deltas over the command are reported beside the client's wall.
timed_nodetool_cleanup() { # SIZE NODE_DIR TABLE
  local size=$1 node=$2 table=$3 pid t0 t1 c0 c1 r0 r1 w0 w1
  pid=$(env_of "$node" PID)
  cold
  read -r c0 r0 w0 <<<"$(node_cpu_io "$pid")"
  t0=$(date +%s.%N)
  "$CT" nodetool "$node" cleanup oracle "$table" >&2
  t1=$(date +%s.%N)
  read -r c1 r1 w1 <<<"$(node_cpu_io "$pid")"
  python3 -c 'import sys; s,t0,t1,c0,c1,r0,r1,w0,w1,ld=sys.argv[1:]; print(f"{s}\tnodetool-cleanup\t{float(t1)-float(t0):.2f}\t{float(c1)-float(c0):.2f}\t-\t-\t{(int(r1)-int(r0))/2**20:.1f}\t{(int(w1)-int(w0))/2**20:.1f}\t{ld}")' \
    "$size" "$t0" "$t1" "$c0" "$c1" "$r0" "$r1" "$w0" "$w1" "$(load1)" | tee -a "$TSV"
}

cleanup_medians() { # [SKIP_TOOL]
  echo "# medians (and the nodetool-cleanup/cleave ratio of medians; nodetool's CPU and I/O are the node's)"
  python3 - "$TSV" "${1:-}" <<'PY'
import sys, statistics as st
rows = {}
for line in open(sys.argv[1]):
    f = line.rstrip('\n').split('\t')
    if len(f) < 9 or f[1] == sys.argv[2]: continue
    sys_s = 0.0 if f[4] == '-' else float(f[4])
    rows.setdefault(f[1], []).append([float(f[2]), float(f[3]) + sys_s, float(f[6]), float(f[7])])
names = ['wall_s', 'cpu_s', 'read_mib', 'written_mib']
med = {k: [st.median(x[i] for x in r) for i in range(4)] for k, r in rows.items()}
for k, m in med.items():
    print(k, ' '.join(f'{n}={v:.3f}' for n, v in zip(names, m)))
if 'nodetool-cleanup' in med and 'cleave' in med:
    a, b = med['nodetool-cleanup'], med['cleave']
    print('ratio', ' '.join(f'{n}={x / y:.1f}x' if y else f'{n}=inf' for n, x, y in zip(names, a, b)))
PY
}
