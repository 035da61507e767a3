#!/usr/bin/env bash
# Offline Replace, cold, on an XFS loop mount (issue 21, docs/benchmarks.md "Issue 21"):
# `split --parts 8 --publish replace` of a generated parent by each binary given, side by
# side with `cp --reflink=never` of its Data.db (+ syncfs), per size, ITER runs each,
# interleaved. Per run: wall (process start to exit, plus a syncfs of the filesystem for
# cp; a Replace is durable when it exits) and the loop device's "flushes completed"
# (/proc/diskstats field 16) over the same interval. Needs root, xfsprogs, losetup.
#
#   scripts/bench-replace.sh "1GiB 8GiB" 3 main=/tmp/cleave-main branch=target/release/cleave
#
# Environment: IMAGE (size of the sparse loop image, default 48G: a 64 GiB parent needs
# IMAGE=40G without cp, 72G with it) and WITH_CP=0 (skip the cp runs, e.g. where the disk
# holds the parent once but not twice; cp's figure then comes from another run).
set -euo pipefail
SIZES=${1:-"1GiB 8GiB"}
ITER=${2:-3}
shift 2 || true
BINS=("$@")
[ ${#BINS[@]} -gt 0 ] || BINS=("branch=target/release/cleave")
GEN=${BINS[-1]#*=}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/cleave-bench-replace.XXXXXX")
IMG=$WORK/xfs.img
MNT=$WORK/mnt
DEV=
cleanup() {
  mountpoint -q "$MNT" && umount "$MNT"
  [ -n "$DEV" ] && losetup -d "$DEV"
  rm -rf "$WORK"
}
trap cleanup EXIT
IMAGE=${IMAGE:-48G}
WITH_CP=${WITH_CP:-1}
TOOLS=("${BINS[@]}")
[ "$WITH_CP" = 0 ] || TOOLS+=(cp)
truncate -s "$IMAGE" "$IMG"
DEV=$(losetup --direct-io=on -f --show "$IMG")
mkfs.xfs -q -m reflink=1 "$DEV"
mkdir -p "$MNT"
mount "$DEV" "$MNT"
MM=$(lsblk -no MAJ:MIN "$DEV" | tr -d ' ')
flushes() { awk -v mm="$MM" '{ if ($1 ":" $2 == mm) print $19 }' /proc/diskstats; }
now() { date +%s.%N; }
cold() { sync; echo 3 > /proc/sys/vm/drop_caches; }

echo "# $(uname -r), $(nproc) cores, loop $DEV (direct-io) on $(df --output=source "$WORK" | tail -1)"
echo "size	tool	run	wall_s	flushes	load1"
for size in $SIZES; do
  src=$MNT/src-$size/ks/t-1
  mkdir -p "$src"
  "$GEN" gen --out "$src" --size "$size" --compressible --json > "$WORK/gen.json"
  data=$(sed -n 's/.*"data": *"\([^"]*\)".*/\1/p' "$WORK/gen.json" | head -1)
  base=$(basename "$data" -Data.db)
  for run in $(seq 1 "$ITER"); do
    for b in "${TOOLS[@]}"; do
      name=${b%%=*}
      table=$MNT/run/ks/t-$run-$name
      rm -rf "$MNT/run"
      mkdir -p "$table"
      # The parent's files as shared extents: a fresh table without copying.
      cp --reflink=always "$src/$base"-* "$table/"
      cold
      f0=$(flushes)
      t0=$(now)
      if [ "$b" = cp ]; then
        cp --reflink=never "$table/$base-Data.db" "$table/copy-Data.db"
        sync -f "$table"  # syncfs(2)
      else
        "${b#*=}" split "$table/$base-Data.db" --out "$table" --parts 8 --publish replace --json > "$WORK/split.json"
      fi
      t1=$(now)
      f1=$(flushes)
      printf '%s\t%s\t%s\t%.3f\t%s\t%s\n' "$size" "$name" "$run" "$(echo "$t1 - $t0" | bc -l)" \
        "$((f1 - f0))" "$(cut -d' ' -f1 /proc/loadavg)"
    done
  done
  rm -rf "$MNT/src-$size" "$MNT/run"
done
