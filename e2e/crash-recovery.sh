#!/usr/bin/env bash
# Crash-recovery run: `akritas serve` under mixed load (Alertmanager
# deliveries, chats, follow-ups, alert investigations and notifications) is SIGKILLed
# at random points N times and restarted on the same data directory; then every
# acknowledged request is checked exactly once through the API and the journals
# (tests/crash_recovery.rs says what "exactly once" means for each kind).
#
#   e2e/crash-recovery.sh [KILLS] [SEED]     # default 100 kills, a random seed
#
# Prints the seed first (pass it back to repeat the kill schedule) and ends with
#   crash-recovery: N kills survived (…), R records checked, 0 lost, 0 duplicated, …
# CI runs the same test with the default of 20 kills.
set -euo pipefail
cd "$(dirname "$0")/.."
export AKRITAS_CRASH_KILLS="${1:-100}"
if [ -n "${2:-}" ]; then
  export AKRITAS_CRASH_SEED="$2"
fi
exec cargo test --locked --test fast crash_recovery:: -- --nocapture
