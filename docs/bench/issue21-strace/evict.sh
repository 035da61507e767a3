#!/usr/bin/env bash
# After a cold split, what of the parent stays cached (fincore), old vs new binary.
set -euo pipefail
WORK=$(mktemp -d /work/i21b-scratch/ev.XXXXXX); IMG=$WORK/xfs.img; MNT=$WORK/mnt; DEV=
cleanup() { mountpoint -q "$MNT" && umount "$MNT"; [ -n "$DEV" ] && losetup -d "$DEV"; rm -rf "$WORK"; }
trap cleanup EXIT
truncate -s 4G "$IMG"; DEV=$(losetup --direct-io=on -f --show "$IMG"); mkfs.xfs -q -m reflink=1 "$DEV"; mkdir -p "$MNT"; mount "$DEV" "$MNT"
mkdir -p "$MNT/parent"
/work/bench-bin/cleave-main gen --out "$MNT/parent" --size 1GiB --compressible --json > "$WORK/gen.json"
data=$(sed -n 's/.*"data": *"\([^"]*\)".*/\1/p' "$WORK/gen.json" | head -1)
index=${data%Data.db}Index.db
for bin in /work/bench-bin/cleave-main /work/bench-bin/cleave-i21b-cachestat; do
  for warm in cold warm-index; do
    rm -rf "$MNT/out"; mkdir -p "$MNT/out"; sync; echo 3 > /proc/sys/vm/drop_caches
    [ $warm = warm-index ] && cat "$index" > /dev/null
    before=$(fincore -nb -o RES "$data" "$index" | tr '\n' ' ')
    "$bin" split "$data" --out "$MNT/out" --parts 8 --json > /dev/null
    echo "$(basename $bin) $warm: resident before (Data.db Index.db) $before after $(fincore -nb -o RES "$data" "$index" | tr '\n' ' ')"
  done
done
