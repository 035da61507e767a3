#!/usr/bin/env bash
# Fuzz every parser in src/sstable/ and the stream manifest decoder for SECONDS each
# (default 60); see docs/fuzzing.md.
#
#   scripts/fuzz.sh [SECONDS]
#
# Seeds fuzz/corpus/<target>/ from the real component files under $CLEAVE_CORPUS
# (default: ../shared/corpus next to the repository), builds the fuzz targets with the
# default (stable) toolchain and RUSTC_BOOTSTRAP=1, and runs each target with
# -max_total_time. Exits non-zero if any target crashes, leaks, times out or fails to
# build; crashing inputs are left in fuzz/artifacts/<target>/ and the logs in
# fuzz/artifacts/logs/ (gitignored, like fuzz/corpus/).
set -euo pipefail

SECONDS_PER_TARGET="${1:-60}"
case "$SECONDS_PER_TARGET" in
  "" | 0 | *[!0-9]*) echo "usage: $0 [SECONDS] (SECONDS >= 1)" >&2; exit 2 ;;
esac

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CORPUS_SRC="${CLEAVE_CORPUS:-$ROOT/../shared/corpus}"
FUZZ="$ROOT/fuzz"
TARGETS=(compression_info index summary filter statistics toc digest crc descriptor codec stream_manifest bti_partitions bti_rows)
# Must match SUPPORTED_BIG_VERSIONS (src/sstable/descriptor.rs): the compression_info
# target picks the version as VERSIONS[first byte % 9].
VERSIONS=(ma mb mc md me na nb nc oa)

export RUSTC_BOOTSTRAP=1

# --- tools -----------------------------------------------------------------------------
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "== installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi
if ! command -v c++ >/dev/null 2>&1; then
  # libfuzzer-sys compiles libFuzzer (C++) from source.
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing a C++ compiler for libFuzzer"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ >/dev/null
  else
    echo "error: libFuzzer needs a C++ compiler (c++)" >&2
    exit 1
  fi
fi

# --- seeds ------------------------------------------------------------------------------
# Unsigned big-endian integer of N bytes at OFFSET in FILE.
be() {
  local v=0 b
  for b in $(od -An -v -tu1 -j "$2" -N "$3" "$1"); do v=$(((v << 8) | b)); done
  echo "$v"
}

# Writes stdin to DIR/<sha1 of content>, so reseeding does not duplicate.
put() {
  local dir=$1 tmp sum
  tmp="$(mktemp)"
  cat >"$tmp"
  sum="$(sha1sum "$tmp" | cut -c1-40)"
  mv "$tmp" "$dir/seed-$sum"
}

# One raw byte of value $1.
byte() { printf '%b' "\\x$(printf %02x "$(($1 & 255))")"; }

# Whether a version's CompressionInfo has maxCompressedLength: BIG na+ and BTI (5.0).
has_max_compressed_length() {
  case "$1" in n? | o? | d? | e?) return 0 ;; *) return 1 ;; esac
}

# Index of a version in VERSIONS; unknown ones (la, da) map to one of the same layout.
version_byte() {
  local i
  for i in "${!VERSIONS[@]}"; do
    [ "${VERSIONS[$i]}" = "$1" ] && { echo "$i"; return; }
  done
  if has_max_compressed_length "$1"; then echo 8; else echo 0; fi
}

# CompressionInfo.db of FILE's version: prints "data_length chunk_count offsets_at", or
# "-1 0 0" (no bound, no chunks) for a file too damaged to walk.
compression_layout() {
  local f=$1 version=$2 p n k i
  n=$(be "$f" 0 2)
  p=$((2 + n))
  k=$(be "$f" "$p" 4)
  p=$((p + 4))
  if [ "$k" -gt 1000 ] || [ "$p" -gt "$(stat -c %s "$f")" ]; then
    echo "-1 0 0"
    return
  fi
  for ((i = 0; i < 2 * k; i++)); do
    n=$(be "$f" "$p" 2)
    p=$((p + 2 + n))
  done
  p=$((p + 4)) # chunk length
  if has_max_compressed_length "$version"; then p=$((p + 4)); fi
  echo "$(be "$f" "$p" 8) $(be "$f" $((p + 8)) 4) $((p + 12))"
}

seed() {
  [ -d "$CORPUS_SRC" ] || {
    echo "warning: no corpus at $CORPUS_SRC: fuzzing from empty corpora" >&2
    return
  }
  local t f base version len size dl count at o0 o1 sh data ci
  for t in "${TARGETS[@]}"; do mkdir -p "$FUZZ/corpus/$t"; done
  while IFS= read -r -d '' f; do
    base="$(basename "$f")"
    version="${base:0:2}"
    printf '%s' "$base" | put "$FUZZ/corpus/descriptor"
    printf '%s' "${f#"$CORPUS_SRC"/}" | put "$FUZZ/corpus/descriptor"
    case "$base" in
      *-CompressionInfo.db)
        { byte "$(version_byte "$version")"; cat "$f"; } |
          put "$FUZZ/corpus/compression_info"
        # Codec seed: the first chunk's payload (without its CRC).
        read -r dl count at < <(compression_layout "$f" "$version")
        data="${f%-CompressionInfo.db}-Data.db"
        if [ -f "$data" ] && [ "$count" -ge 1 ]; then
          size=$(stat -c %s "$data")
          o0=$(be "$f" "$at" 8)
          if [ "$count" -ge 2 ]; then o1=$(be "$f" $((at + 8)) 8); else o1=$size; fi
          len=$((o1 - 4 - o0))
          if [ "$len" -ge 0 ] && [ $((o0 + len)) -le "$size" ]; then
            dd if="$data" iflag=skip_bytes,count_bytes skip="$o0" count="$len" bs=64K \
              status=none | put "$FUZZ/corpus/codec"
          fi
        fi
        ;;
      *-Index.db)
        # The target's first 8 bytes: the Data.db logical (uncompressed) length.
        ci="${f%-Index.db}-CompressionInfo.db"
        data="${f%-Index.db}-Data.db"
        if [ -f "$ci" ]; then
          read -r dl count at < <(compression_layout "$ci" "$version")
        elif [ -f "$data" ]; then
          dl=$(stat -c %s "$data")
        else
          dl=-1 # all ones: no bound
        fi
        { for sh in 56 48 40 32 24 16 8 0; do byte $((dl >> sh)); done
          cat "$f"; } | put "$FUZZ/corpus/index"
        ;;
      *-Summary.db) put "$FUZZ/corpus/summary" <"$f" ;;
      *-Partitions.db) put "$FUZZ/corpus/bti_partitions" <"$f" ;;
      *-Rows.db) seed_bti_rows "$f" ;;
      *-Filter.db) put "$FUZZ/corpus/filter" <"$f" ;;
      *-Statistics.db) put "$FUZZ/corpus/statistics" <"$f" ;;
      *-TOC.txt) put "$FUZZ/corpus/toc" <"$f" ;;
      *-Digest.crc32 | *-Digest.adler32) put "$FUZZ/corpus/digest" <"$f" ;;
      *-CRC.db) put "$FUZZ/corpus/crc" <"$f" ;;
    esac
  done < <(find "$CORPUS_SRC" -type f -name '*-*' -print0 | sort -z)
  seed_stream_manifest
  for t in "${TARGETS[@]}"; do
    echo "   $t: $(find "$FUZZ/corpus/$t" -type f | wc -l) corpus file(s)"
  done
}

# bti_rows: one seed per entry of a Rows.db, `u32 key offset ‖ u32 partition size (no bound)`
# then the file. Without walking Partitions.db the entries are found the way they end: a
# u16 key length, the key, a Data.db position (uvint), then a negative root delta pointing
# back into the file (`TrieIndexEntry.serialize`); the fuzzer mutates from there.
seed_bti_rows() {
  local f="$1" at
  [ -s "$f" ] || return 0
  while read -r at; do
    { python3 -c 'import sys; sys.stdout.buffer.write(int(sys.argv[1]).to_bytes(4, "big") + b"\xff" * 4)' "$at"
      cat "$f"; } | put "$FUZZ/corpus/bti_rows"
  done < <(python3 - "$f" <<'PY'
import sys
b = open(sys.argv[1], "rb").read()
def uvint(i):
    # Cassandra's VIntCoding: the count of leading one bits of the first byte = extra bytes.
    first = b[i]; n = 0
    while n < 8 and first & (0x80 >> n): n += 1
    v = first & (0xff >> (n + 1)) if n < 8 else 0
    for k in range(n): v = (v << 8) | b[i + 1 + k]
    return v, i + 1 + n
for o in range(len(b) - 4):
    n = int.from_bytes(b[o:o + 2], "big")
    if not 1 <= n <= 64 or o + 2 + n + 2 > len(b): continue
    try:
        _, i = uvint(o + 2 + n)
        z, _ = uvint(i)
    except IndexError:
        continue
    delta = (z >> 1) ^ -(z & 1)
    if delta < 0 and o + 2 + n + delta >= 0:
        print(o)
PY
  )
}

# stream_manifest: no file on disk is a manifest, so the seeds are written here, in the
# shape src/stream/manifest.rs encodes (the target also wraps every input in a valid
# envelope, so a bare JSON payload reaches the field rules).
seed_stream_manifest() {
  local d="$FUZZ/corpus/stream_manifest"
  mkdir -p "$d"
  printf '%s' '{"transfer":"3f2a.nb-5.0","group":"move-ks","keyspace":"ks","table":"t_1","version":"nb","import":"None","source":"node-a nb-5-big-Data.db","files":[{"component":"CompressionInfo.db","size":43,"crc32":1},{"component":"Statistics.db","size":4000,"crc32":2},{"component":"Index.db","size":10,"crc32":3},{"component":"Data.db","size":1073741824,"crc32":4}]}' | put "$d"
  printf '%s' '{"transfer":"u.1.2","group":"g","keyspace":"k","table":"t","version":"ma","import":"Staging","files":[{"component":"CRC.db","size":8,"crc32":0},{"component":"Statistics.db","size":1,"crc32":0},{"component":"Summary.db","size":1,"crc32":0},{"component":"Filter.db","size":1,"crc32":0},{"component":"Index.db","size":1,"crc32":0},{"component":"Data.db","size":0,"crc32":0}]}' | put "$d"
  printf '%s' '{"transfer":"x","group":"g","keyspace":"k","table":"t","version":"oa","import":"Import","files":[]}' | put "$d"
}

echo "== seeding fuzz/corpus from $CORPUS_SRC"
seed

# --- build and run ----------------------------------------------------------------------
cd "$FUZZ"
echo "== building fuzz targets ($(rustc --version), RUSTC_BOOTSTRAP=1)"
build_start=$(date +%s)
cargo fuzz build
echo "   built in $(($(date +%s) - build_start)) s at $(git -C "$ROOT" rev-parse --short HEAD)"
# The targets run from this one build: `cargo fuzz run` would rebuild whenever the source
# tree changed in between (and fuzz a different cleave for each target).
BIN="$FUZZ/target/$(rustc -vV | sed -n 's/^host: //p')/release"

mkdir -p "$FUZZ/artifacts/logs"
failed=()
summary=()
for t in "${TARGETS[@]}"; do
  echo "== $t: ${SECONDS_PER_TARGET}s"
  log="$FUZZ/artifacts/logs/$t.log"
  rc=0
  mkdir -p "$FUZZ/artifacts/$t"
  before=$(find "$FUZZ/corpus/$t" -type f | wc -l)
  "$BIN/$t" -artifact_prefix="$FUZZ/artifacts/$t/" -max_total_time="$SECONDS_PER_TARGET" \
    -timeout=10 -print_final_stats=1 "$FUZZ/corpus/$t" >"$log" 2>&1 || rc=$?
  after=$(find "$FUZZ/corpus/$t" -type f | wc -l)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
  secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -n1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n1 || true)
  rate=""
  if [ -n "$execs" ] && [ -n "$secs" ] && [ "$secs" -gt 0 ]; then rate=$((execs / secs)); fi
  line="$t: rc=$rc execs=${execs:-?} secs=${secs:-?} exec/s=${rate:-?} corpus=$before->$after ${cov}"
  echo "   $line"
  summary+=("$line")
  if [ "$rc" -ne 0 ]; then
    failed+=("$t")
    tail -n 40 "$log" >&2
  fi
done

echo "== summary"
printf '   %s\n' "${summary[@]}"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "FAILED: ${failed[*]} (inputs in fuzz/artifacts/, logs in fuzz/artifacts/logs/)" >&2
  exit 1
fi
echo "all ${#TARGETS[@]} targets ran ${SECONDS_PER_TARGET}s clean"
