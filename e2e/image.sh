#!/usr/bin/env bash
# Builds the project's image from its Dockerfile, unchanged, with podman and no registry:
# `FROM debian:bookworm-slim` resolves to the local base e2e/base-image.sh makes, and the
# binary comes from the build context (`--build-arg BINARY_FROM=context`): BINARY (default the
# release build e2e/release.sh makes, target/release/akritas), debug info stripped. The
# Dockerfile's own build stage (rust:1.95-bookworm, which no registry serves here) is not built.
# The context holds what the runtime stage copies, nothing else. Tags TAG (default
# localhost/akritas:<crate version>) and prints it. Docker format, so the HEALTHCHECK is kept.
# Base image and layers stay in podman's storage, outside the clone.
#
#   e2e/image.sh [BINARY [TAG]]
set -euo pipefail
cd "$(dirname "$0")/.."
export CONTAINERS_CONF="$PWD/e2e/containers.conf"
binary=$(realpath "${1:-${CARGO_TARGET_DIR:-target}/release/akritas}")
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
tag="${2:-localhost/akritas:$version}"
[ -x "$binary" ] || { echo "no binary at $binary: build it (e2e/release.sh) or name one" >&2; exit 1; }
e2e/base-image.sh
context=$(mktemp -d "${TMPDIR:-/tmp}/akritas-image.XXXXXX")
trap 'rm -rf "$context"' EXIT
mkdir -p "$context/config/examples"
cp Dockerfile "$context/"
cp -r instructions skills "$context/"
cp config/examples/server.container.json "$context/config/examples/"
objcopy --strip-debug "$binary" "$context/akritas"
started=$SECONDS
# This machine's apt source over the base's, read-only, for the step that installs packages.
podman build --pull=never --format docker --network=host \
  -v /etc/apt/sources.list.d/debian.sources:/etc/apt/sources.list.d/debian.sources:ro \
  --build-arg BINARY_FROM=context -t "$tag" "$context" >"$context/build.log" 2>&1 ||
  { tail -n 30 "$context/build.log" >&2; exit 1; }
echo "built $tag from the Dockerfile in $((SECONDS - started)) s ($(podman image inspect --format '{{.Size}}' "$tag" | numfmt --to=iec))" >&2
echo "$tag"
