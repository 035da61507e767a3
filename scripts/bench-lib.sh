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

bench_xfs() {
  local name=$1 size=$2
  shift 2
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/cleave-$name.XXXXXX")
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
