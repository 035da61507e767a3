#!/usr/bin/env bash
# Builds cleave's container image without a container engine: an OCI archive assembled from
# the release binary and the Debian packages it links against, the way distroless builds its
# images from .debs (unpacked with `dpkg-deb -x`, never installed, no maintainer script run).
#
#   scripts/build-image.sh                  -> target/image/cleave.oci.tar (tag: <version>)
#   scripts/build-image.sh rootfs DIR       only the file tree, into DIR (the Dockerfile's step)
#
# Environment:
#   CLEAVE_BINARY   the binary to package (default target/release/cleave, built with
#                   `cargo build --release --locked` when absent)
#   CLEAVE_IMAGE    the archive to write (default target/image/cleave.oci.tar)
#   CLEAVE_DEB_CACHE where downloaded .debs are kept (default ~/.cache/cleave/debs)
#   SOURCE_DATE_EPOCH every file's time and the image's creation time (default: the commit's)
#
# The image: /usr/local/bin/cleave (stripped), glibc (libc6), libgcc_s (libgcc-s1), the
# Mozilla CA bundle (ca-certificates) at /etc/ssl/certs/ca-certificates.crt, /etc/passwd and
# /etc/group with UID/GID 999 (Cassandra's in the official images), /tmp, and
# /var/lib/dpkg/status.d/<package> so image scanners see the package versions. No shell, no
# package manager. User 999:999, entrypoint `cleave`, labels org.opencontainers.image.*.
# Tools, all Debian packages: dpkg-deb, apt-get download, strip (binutils), GNU tar, umoci; installed
# with apt-get when missing and running as root. Nothing runs a container.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
export PATH="$PATH:/usr/sbin:/sbin"

# The packages the binary needs at run time. `ldd target/release/cleave` lists libc.so.6,
# libm.so.6, libgcc_s.so.1 and the loader: libc6 and libgcc-s1; ca-certificates for TLS to
# anything outside the cluster's own CA. The build fails if ldd names a library none of
# them ships.
PACKAGES=(libc6 libgcc-s1 ca-certificates)

die() { echo "build-image.sh: $*" >&2; exit 1; }

need_tools() {
  local missing=()
  command -v dpkg-deb >/dev/null || missing+=(dpkg)
  command -v apt-get >/dev/null || die "needs apt-get (Debian or Ubuntu) to download ${PACKAGES[*]}"
  command -v strip >/dev/null || missing+=(binutils)
  [ "${1:-}" = rootfs ] || command -v umoci >/dev/null || missing+=(umoci)
  if [ ${#missing[@]} -gt 0 ]; then
    [ "$(id -u)" = 0 ] || die "missing ${missing[*]}: apt-get install ${missing[*]} (as root)"
    echo "build-image.sh: installing ${missing[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# Every file's time, and the image's `created`: $SOURCE_DATE_EPOCH, else the commit's time.
source_date_epoch() {
  echo "${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct 2>/dev/null || echo 0)}"
}

cargo_version() {
  sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -n1
}

binary() {
  local b="${CLEAVE_BINARY:-$repo/target/release/cleave}"
  if [ ! -x "$b" ]; then
    [ -z "${CLEAVE_BINARY:-}" ] || die "CLEAVE_BINARY=$b is not an executable"
    (cd "$repo" && cargo build --quiet --release --locked)
  fi
  echo "$b"
}

# Downloads each package's candidate .deb once into the cache; prints the paths.
download_debs() {
  local cache="${CLEAVE_DEB_CACHE:-$HOME/.cache/cleave/debs}"
  mkdir -p "$cache"
  if ! apt-cache show "${PACKAGES[0]}" >/dev/null 2>&1; then
    [ "$(id -u)" = 0 ] || die "no apt package lists: apt-get update (as root)"
    apt-get update -qq
  fi
  local p v arch f
  arch="$(dpkg --print-architecture)"
  for p in "${PACKAGES[@]}"; do
    v="$(apt-cache policy "$p" | sed -n 's/^  Candidate: //p')"
    [ -n "$v" ] && [ "$v" != "(none)" ] || die "apt has no candidate for $p"
    # apt-get download names files <pkg>_<version with : as %3a>_<arch>.deb
    f="$(ls "$cache/${p}_${v//:/%3a}_"*.deb 2>/dev/null | head -n1 || true)"
    if [ -z "$f" ]; then
      (cd "$cache" && apt-get download -qq -o APT::Sandbox::User=root "$p=$v" >/dev/null) || die "apt-get download $p=$v failed"
      f="$(ls "$cache/${p}_${v//:/%3a}_"*.deb | head -n1)"
    fi
    echo "$f"
  done
}

# The image's file tree in $1 (empty or absent).
assemble_rootfs() {
  local root="$1" bin debs d p
  bin="$(binary)"
  mapfile -t debs < <(download_debs)
  rm -rf "$root"
  mkdir -p "$root"
  mkdir -p "$root/var/lib/dpkg/status.d"
  for d in "${debs[@]}"; do
    dpkg-deb -x "$d" "$root"
    p="$(dpkg-deb -f "$d" Package)"
    # What distroless writes for scanners: the package's control paragraph.
    dpkg-deb -f "$d" > "$root/var/lib/dpkg/status.d/$p"
  done
  # Documentation, manuals and maintainer helpers are not needed to run: keep each
  # package's copyright only (the licence terms travel with the binaries).
  find "$root/usr/share/doc" -type f ! -name copyright -delete 2>/dev/null || true
  rm -rf "$root/usr/share/man" "$root/usr/share/info" "$root/usr/share/lintian" \
    "$root/usr/share/locale" "$root/usr/sbin" "$root/etc/ca-certificates" \
    "$root/usr/share/ca-certificates" 2>/dev/null || true
  # glibc's iconv modules (8 MB of the 14 MB glibc): only iconv(3) loads them, and neither
  # cleave nor the Rust standard library calls it; the image has no locales either.
  rm -rf "$root/usr/lib/x86_64-linux-gnu/gconv" "$root/usr/lib/"*-linux-gnu*/gconv 2>/dev/null || true
  # update-ca-certificates would build the bundle (a maintainer script; never run here):
  # the Mozilla certificates in name order, as it concatenates them.
  mkdir -p "$root/etc/ssl/certs"
  local certs
  certs="$(mktemp -d)"
  dpkg-deb -x "$(printf '%s\n' "${debs[@]}" | grep '/ca-certificates_')" "$certs"
  find "$certs/usr/share/ca-certificates" -name '*.crt' -print0 | LC_ALL=C sort -z \
    | xargs -0 cat > "$root/etc/ssl/certs/ca-certificates.crt"
  rm -rf "$certs"
  [ -s "$root/etc/ssl/certs/ca-certificates.crt" ] || die "empty CA bundle"

  install -D -m 0755 /dev/null "$root/usr/local/bin/cleave"
  strip --strip-debug -o "$root/usr/local/bin/cleave" "$bin"
  chmod 0755 "$root/usr/local/bin/cleave"

  # Every library the binary links is in the tree (ldd of the host's link).
  local lib
  for lib in $(ldd "$bin" | awk '/=>/ { print $1 } /^\t\/.*ld-linux/ { print $1 }'); do
    case "$lib" in linux-vdso*) continue ;; esac
    [ -n "$(find "$root" -name "$(basename "$lib")" -print -quit)" ] \
      || die "$bin links $lib, which none of ${PACKAGES[*]} ships: add its package to PACKAGES"
  done

  # Users: root, and 999 (cassandra in the official Cassandra and cass-operator images; the
  # children cleave writes must belong to Cassandra's user). No login shell exists.
  printf 'root:x:0:0:root:/root:/usr/sbin/nologin\ncleave:x:999:999:cleave:/nonexistent:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' \
    > "$root/etc/passwd"
  printf 'root:x:0:\ncleave:x:999:\nnogroup:x:65534:\n' > "$root/etc/group"
  # glibc's resolver order: /etc/hosts (the kubelet's) first, then DNS.
  printf 'passwd: files\ngroup: files\nhosts: files dns\n' > "$root/etc/nsswitch.conf"
  mkdir -p "$root/tmp" "$root/root"
  chmod 1777 "$root/tmp"
  chmod 0700 "$root/root"

  # One owner and one time for every file: the same tree whoever builds it, whenever.
  local epoch
  epoch="$(source_date_epoch)"
  chown -R 0:0 "$root"
  find "$root" -depth -exec touch -h -d "@$epoch" {} +
}

if [ "${1:-}" = rootfs ]; then
  [ -n "${2:-}" ] || die "usage: scripts/build-image.sh rootfs DIR"
  need_tools rootfs
  assemble_rootfs "$2"
  exit 0
fi
[ $# -eq 0 ] || die "usage: scripts/build-image.sh | scripts/build-image.sh rootfs DIR"

need_tools
version="$(cargo_version)"
revision="$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)"
if [ "$revision" != unknown ] && [ -n "$(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  revision="$revision-dirty"
fi
created="$(date -u -d "@$(source_date_epoch)" +%Y-%m-%dT%H:%M:%SZ)"
out="${CLEAVE_IMAGE:-$repo/target/image/cleave.oci.tar}"

work="$(mktemp -d "${TMPDIR:-/tmp}/cleave-image.XXXXXX")"
trap 'rm -rf "$work"' EXIT
assemble_rootfs "$work/rootfs"

# One layer: the whole tree, written by GNU tar. Not `umoci insert`: Debian's umoci 0.4.7
# ends the stream it writes 103 bytes into a 512-byte block (no padding of the last member,
# no end-of-archive blocks); `umoci unpack` tolerates that, GNU tar ("Unexpected EOF in
# archive") and Python's tarfile do not, nor need a kubelet's runtime. The same bytes for
# the same tree: names sorted, one owner, one time (the tree's), POSIX format without the
# atime/ctime records; member names relative to / ("etc/passwd", no "./" entry that would
# restamp the container's root directory).
layer="$work/layer.tar"
epoch="$(source_date_epoch)"
mapfile -t top < <(cd "$work/rootfs" && LC_ALL=C ls -A | LC_ALL=C sort)
tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner \
  --format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
  -C "$work/rootfs" -cf "$layer" -- "${top[@]}"
# What every reader needs before the blob is written: a whole number of 512-byte records
# ending in the two zero blocks, and a listing GNU tar reads back without complaint.
[ $(( $(stat -c %s "$layer") % 512 )) -eq 0 ] || die "layer tar is not a whole number of 512-byte blocks"
[ -z "$(tail -c 1024 "$layer" | tr -d '\0')" ] || die "layer tar lacks its end-of-archive blocks"
tar -tf "$layer" >/dev/null || die "GNU tar cannot list the layer it wrote"

layout="$work/oci"
umoci init --layout "$layout"
umoci new --image "$layout:$version"
# `raw add-layer` stores the archive verbatim (gzip-compressed; its diff_id is the sha256 of
# these bytes) and records it in the manifest and the config.
umoci raw add-layer --image "$layout:$version" --history.created "$created" \
  --history.created_by "scripts/build-image.sh" "$layer"
umoci config --image "$layout:$version" --created "$created" \
  --history.created "$created" --history.created_by "scripts/build-image.sh (config)" \
  --os linux --architecture "$(dpkg --print-architecture)" \
  --config.user 999:999 \
  --config.workingdir / \
  --config.env PATH=/usr/local/bin \
  --config.entrypoint /usr/local/bin/cleave \
  --config.cmd run --config.cmd --help \
  --config.label "org.opencontainers.image.title=cleave" \
  --config.label "org.opencontainers.image.description=Split Apache Cassandra SSTables by token range without rewriting rows" \
  --config.label "org.opencontainers.image.licenses=Apache-2.0" \
  --config.label "org.opencontainers.image.version=$version" \
  --config.label "org.opencontainers.image.revision=$revision" \
  --config.label "org.opencontainers.image.created=$created" \
  --config.label "org.opencontainers.image.source=https://github.com/cleave-dev/cleave" \
  --config.label "org.opencontainers.image.base.name=scratch" \
  --manifest.annotation "org.opencontainers.image.version=$version" \
  --manifest.annotation "org.opencontainers.image.revision=$revision"
umoci gc --layout "$layout"

# An OCI archive is the layout directory as a tar (what `skopeo copy oci-archive:` reads).
mkdir -p "$(dirname "$out")"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@0" -C "$layout" -cf "$out.tmp" .
mv "$out.tmp" "$out"
echo "$out ($(du -k "$out" | cut -f1) KiB): cleave $version ($revision), user 999:999"
