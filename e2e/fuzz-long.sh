#!/usr/bin/env bash
# The long fuzz run: every target of tests/fuzz with many cases and a fresh RNG seed,
# one target at a time. Usage: e2e/fuzz-long.sh [cases per target, default 5000] [name filter]
# Set FUZZ_RELEASE=1 for an optimized build (a long first compile, many more cases/s).
# Prints one line per target (cases, cases/s, accepted/rejected, slowest case, seed). A
# failure prints the shrunk input and the seed that reproduces it: rerun with
# AKRITAS_FUZZ_SEED=<seed> and the same case count.
set -euo pipefail
cd "$(dirname "$0")/.."
export AKRITAS_FUZZ_CASES="${1:-5000}" AKRITAS_FUZZ_SEED="${AKRITAS_FUZZ_SEED:-random}"
filter="${2:-}"
profile=()
[[ "${FUZZ_RELEASE:-0}" == 1 ]] && profile=(--release)
log="${TMPDIR:-/tmp}/akritas-fuzz-long.log"
started=$(date +%s)
status=0
cargo test "${profile[@]}" --locked --test fuzz -- --test-threads 1 --nocapture $filter >"$log" 2>&1 || status=$?
grep -E '^fuzz |HANG|Test failed|minimal failing|^test result' "$log" || true
echo "wall time $(( $(date +%s) - started )) s; full log: $log"
exit "$status"
