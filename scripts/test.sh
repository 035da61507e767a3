#!/usr/bin/env bash
# Runs every test of cleave, after installing what the tests need on a fresh machine.
#
#   scripts/test.sh            install test dependencies, lint, run all tests, fuzz briefly
#   CLEAVE_FUZZ_SECONDS=0 ...  skip the fuzz smoke run
#
# Needs: the Rust toolchain (cargo), python3 with pip. As root on Debian it also installs the
# system packages the tests use. The real SSTables are read from ../shared (CLEAVE_SHARED to
# override); tests that need them print why they skip when they are absent.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH:/usr/sbin:/sbin"

step() { printf '\n==> %s\n' "$*"; }

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  step "system packages: xfsprogs (loop XFS with reflink for the zero-copy tests), umoci, skopeo, binutils (the image test), JDK 17 and Maven (the Cassandra oracle)"
  if ! command -v mkfs.xfs >/dev/null || ! command -v mkfs.ext4 >/dev/null \
      || ! command -v umoci >/dev/null || ! command -v skopeo >/dev/null || ! command -v strip >/dev/null \
      || ! [ -x /usr/lib/jvm/java-17-openjdk-amd64/bin/javac ] || ! command -v mvn >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      xfsprogs e2fsprogs umoci skopeo binutils openjdk-17-jdk-headless maven >/dev/null
  fi
else
  echo "not root or no apt-get: tests that mount a loop XFS will say why they skip"
fi

if [ "$(id -u)" = 0 ]; then
  step "Kubernetes test control plane (scripts/k8s-testenv.sh install; cached after the first build)"
  scripts/k8s-testenv.sh install
else
  echo "not root: the Kubernetes end-to-end test will say why it skips"
fi

step "Cassandra test oracle (scripts/cassandra-testenv.sh install: jars from Maven Central, JVMs; cached)"
scripts/cassandra-testenv.sh install

step "python test dependencies (tests/py/requirements.txt)"
pip_log="$(mktemp)"
if ! python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    -r tests/py/requirements.txt >"$pip_log" 2>&1; then
  cat "$pip_log"; rm -f "$pip_log"; exit 1
fi
rm -f "$pip_log"

step "cargo fmt --check"
cargo fmt --check

step "cargo clippy --all-targets -- -D warnings"
cargo clippy --quiet --all-targets -- -D warnings

step "cargo test (release: the corpus and XFS tests move real bytes)"
# The CLI's free-space reserve (docs/split.md) off for the suite's own runs, so that a
# machine whose /tmp has less than 10% free still runs them; tests/cli_space.rs sets it
# itself.
export CLEAVE_MIN_FREE_PERCENT=0
cargo test --release --all-targets --no-fail-fast 2>&1 | tee "${TMPDIR:-/tmp}/cleave-test.log"

# The release binary, last: `cargo test` links its own variant of target/release/cleave (a
# separate unit, with the dev-dependencies in the graph), so this leaves the `cargo build` one for
# the Dockerfile's prebuilt target (docs/install.md). Both are kept in target/release/deps, so
# switching back costs no rebuild after the first.
step "cargo build --release --locked (the binary the container image packages)"
cargo build --quiet --release --locked

# The fuzz crate builds the whole library instrumented (about 20 minutes on 2 cores), so CI
# does not fuzz by default; docs/fuzzing.md has the 60 s runs. CLEAVE_FUZZ_SECONDS=N runs N s each.
fuzz_seconds="${CLEAVE_FUZZ_SECONDS:-0}"
if [ "$fuzz_seconds" != 0 ] && [ -x scripts/fuzz.sh ]; then
  step "fuzz smoke: every target for ${fuzz_seconds}s (docs/fuzzing.md has the 60 s runs)"
  scripts/fuzz.sh "$fuzz_seconds"
fi

# One closing line that counts every cargo test binary's results.
awk '/^test result:/ { p += $4; f += $6; s += $8 } END { printf "\n%d passed, %d failed, %d skipped\n", p, f, s }' \
  "${TMPDIR:-/tmp}/cleave-test.log"
