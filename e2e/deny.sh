#!/usr/bin/env bash
# The dependency policy of deny.toml, checked with a pinned cargo-deny (installed once into the
# tool cache by e2e/cargo-tool.sh) over the locked dependency tree of the workspace: licenses,
# duplicate versions and sources. RustSec advisories need the advisory database, which cargo-deny
# clones from GitHub on each run:
#   AKRITAS_ADVISORIES=1 e2e/deny.sh
# runs that check too (with network access). docs/release.md.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_DENY_VERSION=0.20.2
deny=$(e2e/cargo-tool.sh cargo-deny "$CARGO_DENY_VERSION")

"$deny" --locked --workspace check licenses bans sources
if [[ ${AKRITAS_ADVISORIES:-0} == 1 ]]; then
    "$deny" --locked --workspace check advisories
else
    echo "skipped advisories: they need the RustSec database from github.com; run AKRITAS_ADVISORIES=1 $0 with network access"
fi
