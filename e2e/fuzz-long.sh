#!/usr/bin/env bash
# The long fuzz run: every target of tests/fuzz with many cases, a fresh RNG seed,
# an optimized build, one target at a time so each gets both cores' share.
# Usage: e2e/fuzz-long.sh [cases per target, default 20000] [target filter]
# Prints one line per target: cases, cases/s, accepted/rejected, slowest case, seed.
# A failure prints the shrunk input and the seed that reproduces it
# (AKRITAS_FUZZ_SEED=<seed> with the same case count).
set -euo pipefail
cd "$(dirname "$0")/.."
cases="${1:-20000}"
filter="${2:-}"
export AKRITAS_FUZZ_CASES="$cases" AKRITAS_FUZZ_SEED="${AKRITAS_FUZZ_SEED:-random}"
cargo test --release --locked --test fuzz --no-run
started=$(date +%s)
status=0
cargo test --release --locked --test fuzz -- --test-threads 1 --nocapture $filter 2>&1 \
    | tee /tmp/akritas-fuzz-long.log | grep -E '^fuzz |panicked|HANG|^test result' || status=$?
echo "total wall time: $(( $(date +%s) - started )) s; full log: /tmp/akritas-fuzz-long.log"
grep -q 'test result: ok' /tmp/akritas-fuzz-long.log || exit 1
exit "$status"
