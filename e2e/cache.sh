#!/usr/bin/env sh
# Prints the build cache shared by every clone on this machine, and creates it:
# $AKRITAS_CACHE, else $XDG_CACHE_HOME/akritas, else ~/.cache/akritas. The Go test binaries
# (e2e/kube/build.sh), the real-model servers and models (e2e/real-models.sh), the cargo
# tools (e2e/cargo-tool.sh) and cargo's target directory of .ci/run live there, each
# keyed by its version (cargo keys its own), so a fresh clone reuses them
# (testkit's `cache_dir` reads the same variables).
set -eu
if [ -n "${AKRITAS_CACHE:-}" ]; then
  dir="$AKRITAS_CACHE"
elif [ -n "${XDG_CACHE_HOME:-}" ]; then
  dir="$XDG_CACHE_HOME/akritas"
else
  dir="$HOME/.cache/akritas"
fi
mkdir -p "$dir"
echo "$dir"
