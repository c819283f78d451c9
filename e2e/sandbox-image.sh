#!/usr/bin/env bash
# Builds the images the container sandbox tests run (tests/sandbox_container.rs), with
# podman and no registry:
#   localhost/debian:bookworm-slim     a debootstrap base (what `FROM debian:bookworm-slim` resolves to)
#   localhost/akritas:sandbox-test     the Dockerfile's runtime stage, with the binary cargo built
#   localhost/akritas-validators:sandbox-test
#                                      that image plus python3, the attacks' validator language
#                                      (the image ships no validator programs: a derived image adds them)
# The Dockerfile's build stage (rust:1.95-bookworm) cannot be pulled here: the runtime stage takes
# the binary given (default target/debug/akritas) instead of the release build's output.
# Usage: e2e/sandbox-image.sh [BINARY]
set -euo pipefail
binary=$(realpath "${1:-target/debug/akritas}")
cd "$(dirname "$0")/.."
export CONTAINERS_CONF="$PWD/e2e/containers.conf"
work=target/sandbox-image
mkdir -p "$work"
if ! podman image exists localhost/debian:bookworm-slim; then
    # The mirror this machine's apt uses (the only one its network may reach).
    mirror=$(grep -h '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk 'NR==1{print $2}' || true)
    mirror=${mirror:-$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)}
    mirror=${mirror:-http://deb.debian.org/debian}
    rm -rf "$work/rootfs"
    debootstrap --variant=minbase bookworm "$work/rootfs" "$mirror" > "$work/debootstrap.log"
    rm -rf "$work"/rootfs/var/lib/apt/lists/* "$work"/rootfs/usr/share/doc/* "$work"/rootfs/usr/share/man/*
    tar --numeric-owner -C "$work/rootfs" -c . | podman import - localhost/debian:bookworm-slim > /dev/null
    rm -rf "$work/rootfs"
fi
context="$work/context"
rm -rf "$context" && mkdir -p "$context/config/examples"
cp -r instructions skills "$context/"
cp config/examples/server.container.json "$context/config/examples/"
objcopy --strip-debug "$binary" "$context/akritas"
# The runtime stage, as written, with the binary from the context.
awk '/^FROM debian:bookworm-slim/{on=1} on' Dockerfile \
    | sed 's#^COPY --from=build /out/akritas /usr/local/bin/akritas#COPY akritas /usr/local/bin/akritas#' \
    > "$context/Dockerfile"
grep -q '^COPY akritas /usr/local/bin/akritas' "$context/Dockerfile"
podman build --pull=never --network=host -q -t localhost/akritas:sandbox-test -f "$context/Dockerfile" "$context" > /dev/null
cat > "$work/Dockerfile.validators" <<'DOCKERFILE'
FROM localhost/akritas:sandbox-test
USER root
RUN apt-get update && apt-get install -y --no-install-recommends python3-minimal && rm -rf /var/lib/apt/lists/*
USER 10001:10001
DOCKERFILE
podman build --pull=never --network=host -q -t localhost/akritas-validators:sandbox-test -f "$work/Dockerfile.validators" "$work" > /dev/null
echo "built localhost/akritas-validators:sandbox-test"
