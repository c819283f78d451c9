#!/usr/bin/env bash
# The release of one target, built locally the way .github/workflows/release.yml builds it:
#   e2e/release.sh                      # x86_64-unknown-linux-gnu, into dist/
#   TARGET=aarch64-unknown-linux-gnu DIST=/tmp/out e2e/release.sh
# Writes into $DIST (default dist/):
#   akritas-<version>-<target>.tar.gz   the binary, the instructions and skills it reads by default
#                                       (as the image ships them), README.md, LICENSE when there is one
#   akritas-<version>-<target>.cdx.json the SBOM of that binary (CycloneDX 1.5 JSON, tools/sbom)
#   SHA256SUMS                          sha256sum lines for both, names relative to $DIST
# and checks that the binary needs no glibc newer than the runtime image's (Debian bookworm, 2.36)
# and runs from the unpacked tarball with no Rust and an empty environment. docs/release.md.
set -euo pipefail
cd "$(dirname "$0")/.."

# The runtime image (the Dockerfile's final stage) is debian:bookworm-slim, which ships glibc 2.36.
MAX_GLIBC=2.36
HOST=$(rustc -vV | sed -n 's/^host: //p')
TARGET=${TARGET:-$HOST}
DIST=${DIST:-dist}
target_dir=${CARGO_TARGET_DIR:-target}
# The SBOM and the archive take their timestamps from it (a reproducible SBOM has no serial number).
# Not exported to the build: the `cc` build scripts (ring, psm) track it, and a new value each
# commit would rebuild them and everything above them.
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2> /dev/null || date +%s)}
export -n SOURCE_DATE_EPOCH

version=$(cargo metadata --no-deps --format-version 1 --locked \
    | python3 -c 'import json, sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "akritas"))')
name="akritas-$version-$TARGET"
echo "release $name"

# --- code layout: the functions an `ask` executes, first in .text --------------------------------
# The kernel maps the 64 KiB around each code page a process touches; spread over the whole
# binary, the few MiB an `ask` runs made most of it resident. A profile of this very build
# (valgrind's callgrind on both configurations of the `ask` bench) lists them, and the binary is
# linked again with that list (lld's --symbol-ordering-file; Rust links x86_64 Linux with its own
# lld from 1.90 on). The first link keeps its inputs (e2e/keep-link.sh as rustc's linker), so the
# second links the very objects that were profiled, without compiling again: ThinLTO renames the
# functions it promotes whenever the crate changes, so a list only fits the build it came from.
# SYMBOL_ORDER=0 skips it (docs/release.md, "Code layout").
rustc_minor=$(rustc --version | sed -n 's/^rustc 1\.\([0-9]*\)\..*/\1/p')
layout=0
if [[ ${SYMBOL_ORDER:-1} != 0 && $TARGET == x86_64-unknown-linux-gnu && $TARGET == "$HOST" && ${rustc_minor:-0} -ge 90 ]]; then
    layout=1
    if ! command -v valgrind > /dev/null; then
        echo "error: the code layout needs valgrind (apt-get install valgrind), or SYMBOL_ORDER=0 to skip it" >&2
        exit 1
    fi
fi

# Links the kept objects again, into $1, with the linker arguments that follow.
relink() {
    e2e/keep-link.sh --relink "$kept" "$@"
}

# --- build -------------------------------------------------------------------------------------
if ((layout)); then
    binary="$target_dir/release/akritas"
    kept="$target_dir/release/akritas-link"
    AKRITAS_KEEP_LINK="$kept" cargo rustc --release --locked --bin akritas -- -C "linker=$PWD/e2e/keep-link.sh"
    # When cargo found the binary up to date, the link kept by an earlier run must be the one that
    # made it: linked again unchanged, it gives the same bytes. Otherwise the crate is built again.
    unordered="$kept/akritas.unordered"
    if [[ ! -f $kept/args ]] || ! relink "$unordered" || ! cmp -s "$unordered" "$(e2e/keep-link.sh --output "$kept")"; then
        echo "the kept link does not make the binary cargo has; building the binary crate again"
        touch src/main.rs
        AKRITAS_KEEP_LINK="$kept" cargo rustc --release --locked --bin akritas -- -C "linker=$PWD/e2e/keep-link.sh"
        relink "$unordered"
        cmp "$unordered" "$(e2e/keep-link.sh --output "$kept")"
    fi
    order="$target_dir/release/symbol-order.txt"
    cargo build --locked -p akritas-testkit --bin symbol-order
    "$target_dir/debug/symbol-order" "$unordered" "$order"
    relink "$binary.ordered" -Wl,--symbol-ordering-file="$order" -Wl,--no-warn-symbol-ordering
    mv -f "$binary.ordered" "$binary"
    # Every name listed must be in the binary linked with the list, or the layout did not take.
    listed=$(sort -u "$order")
    found=$(comm -12 <(printf '%s\n' "$listed") <(nm --defined-only "$binary" | awk '{print $3}' | sort -u) | wc -l)
    total=$(printf '%s\n' "$listed" | wc -l)
    echo "code layout: $found of the $total functions an ask executes are placed first"
    if ((found < total)); then
        echo "error: the relinked binary lacks $((total - found)) of the $total functions listed" >&2
        exit 1
    fi
    rm -f "$unordered"
elif [[ $TARGET == "$HOST" ]]; then
    cargo build --release --locked --bin akritas
    binary="$target_dir/release/akritas"
else
    cargo build --release --locked --bin akritas --target "$TARGET"
    binary="$target_dir/$TARGET/release/akritas"
fi

# --- glibc: no symbol version newer than the runtime image's ----------------------------------
# The symbol versions the binary needs (readelf reads the ELF of any architecture, so a cross-built
# binary is checked too).
glibc=$(readelf -W -V "$binary" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -u -V | tail -n 1)
if [[ -z $glibc ]]; then
    echo "error: $binary has no GLIBC symbol versions; is it a dynamically linked glibc binary?" >&2
    exit 1
fi
if [[ $(printf '%s\n%s\n' "$glibc" "$MAX_GLIBC" | sort -V | tail -n 1) != "$MAX_GLIBC" ]]; then
    echo "error: $binary needs GLIBC_$glibc, newer than the $MAX_GLIBC of the runtime image (debian:bookworm-slim)." >&2
    echo "  It would fail to start there. Build on a system with glibc <= $MAX_GLIBC (e.g. the rust:1.95-bookworm image)." >&2
    readelf -W --dyn-syms "$binary" | grep "@GLIBC_$glibc" | sed 's/^/  /' >&2
    exit 1
fi
echo "glibc: needs GLIBC_$glibc at most (runtime image has $MAX_GLIBC)"

# --- dist --------------------------------------------------------------------------------------
rm -rf "$DIST"
mkdir -p "$DIST"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir "$stage/$name"
install -m 0755 "$binary" "$stage/$name/akritas"
# The instructions and skills the binary also has built in, as files to read and change (`serve`
# and `ask` started in the unpacked directory read these; elsewhere, their built-in copies).
cp -R instructions skills README.md "$stage/$name/"
if [[ -f LICENSE ]]; then
    cp LICENSE "$stage/$name/"
fi
# Fixed owner, order and times (the last commit's, as for the SBOM): the archive does not depend
# on who built it when.
tar -C "$stage" --owner=0 --group=0 --numeric-owner --sort=name --mtime="@$SOURCE_DATE_EPOCH" -cf - "$name" \
    | gzip -9 -n > "$DIST/$name.tar.gz"

# The SBOM: every crate cargo builds into the binary for this target (`cargo tree -e normal`: the
# whole tree, no dev-dependencies, no build scripts' dependencies, no other platform's crates,
# features as this package alone enables them), with the lockfile's checksums (tools/sbom).
cargo build --locked -p akritas-sbom --bin akritas-sbom
SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH "$target_dir/debug/akritas-sbom" --target "$TARGET" --output "$DIST/$name.cdx.json"

(cd "$DIST" && sha256sum "$name.tar.gz" "$name.cdx.json" > SHA256SUMS && sha256sum -c SHA256SUMS)

# --- it runs without Rust ----------------------------------------------------------------------
if [[ $TARGET == "$HOST" ]]; then
    mkdir "$stage/unpacked"
    tar -C "$stage/unpacked" -xzf "$DIST/$name.tar.gz"
    unpacked="$stage/unpacked/$name"
    (cd "$stage" && env -i PATH=/usr/bin:/bin "$unpacked/akritas" --version)
    if command -v podman > /dev/null && podman image exists localhost/debian:bookworm-slim; then
        echo "in debian:bookworm-slim:"
        CONTAINERS_CONF="$PWD/e2e/containers.conf" podman run --rm --pull=never -v "$unpacked:/x:ro" \
            localhost/debian:bookworm-slim /x/akritas --version
    else
        echo "skipped the run in debian:bookworm-slim: no podman image localhost/debian:bookworm-slim"
    fi
fi
echo "wrote $DIST:"
ls -l "$DIST"
