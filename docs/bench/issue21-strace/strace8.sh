#!/usr/bin/env bash
# strace -c of cold 8 GiB aligned splits (staged) on an XFS loop mount. Usage: strace8.sh BIN OUTDIR
set -euo pipefail
BIN=$1; OUT=$2; mkdir -p "$OUT"; SPLIT_EXTRA=""
WORK=$(mktemp -d /work/i21b-scratch/st.XXXXXX)
IMG=$WORK/xfs.img; MNT=$WORK/mnt; DEV=
cleanup() { mountpoint -q "$MNT" && umount "$MNT"; [ -n "$DEV" ] && losetup -d "$DEV"; rm -rf "$WORK"; }
trap cleanup EXIT
truncate -s 12G "$IMG"
DEV=$(losetup --direct-io=on -f --show "$IMG")
mkfs.xfs -q -m reflink=1 "$DEV"; mkdir -p "$MNT"; mount "$DEV" "$MNT"
mkdir -p "$MNT/parent"
"$BIN" gen --out "$MNT/parent" --size 8GiB --partition-size 64KiB --row-size 4KiB --chunk 16KiB --compressible --json > "$WORK/gen.json"
data=$(sed -n 's/.*"data": *"\([^"]*\)".*/\1/p' "$WORK/gen.json" | head -1)
cold() { sync; echo 3 > /proc/sys/vm/drop_caches; }
run() { # name, strace flags...
  local name=$1; shift
  rm -rf "$MNT/out"; mkdir -p "$MNT/out"; fstrim "$MNT" || true; sync -f "$MNT"; cold
  cat /proc/loadavg > "$OUT/$name.load"
  /usr/bin/time -v "$@" "$BIN" split "$data" --out "$MNT/out" --parts 8 --layout aligned --digest off $SPLIT_EXTRA --json > "$OUT/$name.json" 2> "$OUT/$name.time"
}
for i in 1 2; do
  run plain-$i
  run strace-c-$i strace -f -c -o "$OUT/strace-c-$i.txt"
  run strace-cw-$i strace -f -c -w -o "$OUT/strace-cw-$i.txt"
done
SPLIT_EXTRA=""
run strace-T strace -f -T -tt -e trace=mincore,mmap,munmap,fsync,fdatasync,ioctl,syncfs,pread64,fadvise64 -o "$OUT/strace-T.txt"
SPLIT_EXTRA="--target-cassandra 4.1"
run t41-plain
run t41-strace-c strace -f -c -o "$OUT/t41-strace-c.txt"
rm -rf "$MNT/out"
echo ok
