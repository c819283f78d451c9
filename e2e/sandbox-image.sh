#!/usr/bin/env bash
# Builds the images the container sandbox tests run (tests/sandbox_container.rs), with
# podman and no registry:
#   localhost/debian:bookworm-slim     a debootstrap base (what `FROM debian:bookworm-slim` resolves to)
#   localhost/akritas:sandbox-test     the Dockerfile's image (e2e/image.sh), with the binary given
#   localhost/akritas-validators:sandbox-test
#                                      that image plus python3, the attacks' validator language
#                                      (the image ships no validator programs: a derived image adds them)
# The Dockerfile's build stage (rust:1.95-bookworm) cannot be pulled here: the image takes
# the binary given (default target/debug/akritas) from its context (`BINARY_FROM=context`).
# Usage: e2e/sandbox-image.sh [BINARY]
set -euo pipefail
binary=$(realpath "${1:-target/debug/akritas}")
cd "$(dirname "$0")/.."
export CONTAINERS_CONF="$PWD/e2e/containers.conf"
work=target/sandbox-image
mkdir -p "$work"
# The Dockerfile's image, with the binary given (e2e/image.sh).
e2e/image.sh "$binary" localhost/akritas:sandbox-test >/dev/null
apt_source=(-v /etc/apt/sources.list.d/debian.sources:/etc/apt/sources.list.d/debian.sources:ro)
cat > "$work/Dockerfile.validators" <<'DOCKERFILE'
FROM localhost/akritas:sandbox-test
USER root
RUN apt-get update && apt-get install -y --no-install-recommends python3-minimal && rm -rf /var/lib/apt/lists/*
USER 10001:10001
DOCKERFILE
podman build --pull=never --network=host "${apt_source[@]}" -q -t localhost/akritas-validators:sandbox-test -f "$work/Dockerfile.validators" "$work" > /dev/null
echo "built localhost/akritas-validators:sandbox-test"
