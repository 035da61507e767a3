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
export PATH="$HOME/.cargo/bin:$PATH"

step() { printf '\n==> %s\n' "$*"; }

step "python test dependencies (tests/py/requirements.txt)"
python3 -m pip install --quiet --disable-pip-version-check -r tests/py/requirements.txt 2>&1 \
  | grep -v -e "Running pip as the 'root' user" -e "^$" || true

step "cargo fmt --check"
cargo fmt --check

step "cargo clippy --all-targets -- -D warnings"
cargo clippy --quiet --all-targets -- -D warnings

step "cargo test"
cargo test --all-targets 2>&1 | tee "${TMPDIR:-/tmp}/cleave-test.log"

fuzz_seconds="${CLEAVE_FUZZ_SECONDS:-10}"
if [ "$fuzz_seconds" != 0 ] && [ -x scripts/fuzz.sh ]; then
  step "fuzz smoke: every target for ${fuzz_seconds}s (docs/fuzzing.md has the 60 s runs)"
  scripts/fuzz.sh "$fuzz_seconds"
fi

# One closing line that counts every cargo test binary's results.
awk '/^test result:/ { p += $4; f += $6; s += $8 } END { printf "\n%d passed, %d failed, %d skipped\n", p, f, s }' \
  "${TMPDIR:-/tmp}/cleave-test.log"
