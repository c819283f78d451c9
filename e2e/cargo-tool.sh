#!/usr/bin/env bash
# Prints the path of a pinned cargo tool, installing it first when it is missing:
#   e2e/cargo-tool.sh cargo-deny 0.20.2
# Tools live outside the repository, one directory per tool and version, so a fresh clone reuses
# them and a new pin installs next to the old one:
#   ${AKRITAS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/akritas}/tools/<tool>-<version>/bin/<tool>
# Install progress goes to stderr; stdout is the path only.
set -euo pipefail

if [[ $# -ne 2 ]]; then
    echo "usage: $0 <crate> <version>   (e.g. $0 cargo-deny 0.20.2)" >&2
    exit 2
fi
tool=$1
version=$2
root="${AKRITAS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/akritas}/tools/$tool-$version"
bin="$root/bin/$tool"

if [[ ! -x $bin ]]; then
    echo "installing $tool $version into $root" >&2
    # Without CARGO_TARGET_DIR cargo builds in a temporary directory it removes afterwards: the
    # install neither waits on nor fills the project's target directory.
    env -u CARGO_TARGET_DIR cargo install --locked --version "=$version" --root "$root" "$tool" >&2
fi
echo "$bin"
