#!/usr/bin/env bash
# Makes localhost/debian:bookworm-slim, what an unchanged `FROM debian:bookworm-slim` resolves to
# with `podman build --pull=never`, from Debian's own packages (no registry): a `debootstrap
# --variant=minbase` root filesystem, slimmed (apt lists, docs, man pages), whose apt source is
# Debian's public one, as in Debian's image. Build steps that install packages mount this
# machine's apt source over it read-only (e2e/image.sh, e2e/sandbox-image.sh), so no mirror name
# is baked into a layer. Kept in podman's storage, outside the clone: made once per machine
# (about 50 s); a base made before this layout (its apt source naming the mirror) is made again.
set -euo pipefail
cd "$(dirname "$0")/.."
export CONTAINERS_CONF="$PWD/e2e/containers.conf"
image=localhost/debian:bookworm-slim
layout=2
if podman image exists "$image" &&
  [ "$(podman image inspect --format '{{ index .Labels "akritas.base" }}' "$image" 2>/dev/null)" = "$layout" ]; then
  exit 0
fi
# The mirror this machine's apt uses (the only one its network may reach).
mirror=$(grep -h '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk 'NR==1{print $2}' || true)
mirror=${mirror:-$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)}
mirror=${mirror:-http://deb.debian.org/debian}
work=$(mktemp -d "${TMPDIR:-/tmp}/akritas-base.XXXXXX")
trap 'rm -rf "$work"' EXIT
debootstrap --variant=minbase bookworm "$work/rootfs" "$mirror" >"$work/debootstrap.log" ||
  { tail -n 20 "$work/debootstrap.log" >&2; exit 1; }
rm -rf "$work"/rootfs/var/lib/apt/lists/* "$work"/rootfs/var/cache/apt/*.bin \
  "$work"/rootfs/usr/share/doc/* "$work"/rootfs/usr/share/man/* "$work/rootfs/etc/apt/sources.list"
cat >"$work/rootfs/etc/apt/sources.list.d/debian.sources" <<'SOURCES'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
podman rmi -f "$image" >/dev/null 2>&1 || true
tar --numeric-owner -C "$work/rootfs" -c . |
  podman import --change "LABEL akritas.base=$layout" --change 'CMD ["bash"]' - "$image" >/dev/null
echo "made $image" >&2
