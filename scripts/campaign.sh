#!/usr/bin/env bash
# The long variants of the reliability campaigns (docs/reliability.md). Not run by CI.
#
#   scripts/campaign.sh crash   [RUNS]   SIGKILL at every fault point, injected EIO at every
#                                        step, and RUNS (default 2000) random-instant kills
#   scripts/campaign.sh hostile [CASES]  CASES (default 2000) mutated sstables
#   scripts/campaign.sh all
#
# CLEAVE_CAMPAIGN_SEED / CLEAVE_HOSTILE_SEED change the seeds; the summary line of each
# campaign (counts of cases, outcomes and violations) is printed and appended to
# target/campaign-results.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
n=${2:-2000}
: "${CLEAVE_SHARED:=$(pwd)/../shared}"
export CLEAVE_SHARED
results=target/campaign-results.txt
mkdir -p target
run() {
    local t=$1; shift
    env "$@" cargo test --release --test "$t" -- --nocapture --test-threads 1 2>&1 \
        | tee /dev/stderr | grep -E "campaign" | sed "s/^/$(date -u +%FT%TZ) /" >> "$results"
}
case $what in
crash) run crash_campaign CLEAVE_CAMPAIGN_RANDOM="$n" ;;
hostile) run hostile_inputs CLEAVE_HOSTILE_CASES="$n" ;;
all)
    run crash_campaign CLEAVE_CAMPAIGN_RANDOM="$n"
    run hostile_inputs CLEAVE_HOSTILE_CASES="$n"
    ;;
*) echo "usage: $0 crash|hostile|all [N]" >&2; exit 2 ;;
esac
echo "results appended to $results"
