#!/usr/bin/env bash
# The linker e2e/release.sh gives rustc (`-C linker=`) for the release's first link: it links as
# `cc` would, and first keeps what rustc deletes after a link (the final crate's object files and
# rustc's temporary directory), with the link's arguments, in $AKRITAS_KEEP_LINK. release.sh then
# links the same objects again with the code layout (`--symbol-ordering-file`) instead of
# compiling the crate a second time. Files are hard-linked where they can be (same file system).
#
#   $AKRITAS_KEEP_LINK/args     the arguments, NUL-separated, with the kept files' new paths
#   $AKRITAS_KEEP_LINK/path     the PATH rustc ran the linker with (its lld is found through it)
#   $AKRITAS_KEEP_LINK/objects/ the kept files
#
# The other half, on a kept link:
#   e2e/keep-link.sh --output KEPT              prints the path the kept link wrote (its `-o`)
#   e2e/keep-link.sh --relink KEPT OUT [ARG...] links the kept objects again into OUT, with the
#                                               linker arguments ARG added at the end
# tests/release_layout.rs runs both halves on a small crate.
set -euo pipefail
kept_args() { # directory -> the array `args`
  if [[ ! -f $1/args ]]; then
    echo "keep-link: no kept link in $1" >&2
    return 1
  fi
  mapfile -d '' args < "$1/args"
}

case "${1:-}" in
  --output)
    kept_args "$2"
    for i in "${!args[@]}"; do
      if [[ ${args[$i]} == -o ]]; then
        echo "${args[i + 1]}"
      fi
    done
    exit 0
    ;;
  --relink)
    kept_args "$2"
    dir="$2" out="$3"
    shift 3
    for i in "${!args[@]}"; do
      if [[ ${args[$i]} == -o ]]; then
        args[i + 1]=$out
      fi
    done
    PATH="$(cat "$dir/path")" exec "${AKRITAS_REAL_LINKER:-cc}" "${args[@]}" "$@"
    ;;
esac

keep="${AKRITAS_KEEP_LINK:?AKRITAS_KEEP_LINK names the directory that keeps the link}"
rm -rf "$keep"
mkdir -p "$keep/objects"

keep_file() { # path -> sets `kept`, the kept copy's path
  kept="$keep/objects/$(printf '%05d' "$kept_count")-$(basename "$1")"
  kept_count=$((kept_count + 1))
  ln "$1" "$kept" 2> /dev/null || cp "$1" "$kept"
}

kept_count=0
kept=""
temp_dir=""
args=()
for arg in "$@"; do
  if [[ $arg == @* ]]; then
    echo "keep-link: rustc passed its arguments in a file ($arg); the link cannot be kept" >&2
    exit 1
  fi
  # rustc's temporary directory (`rustcXXXXXX`, next to the output): kept whole, once.
  if [[ -z $temp_dir && $arg =~ ^(.*/rustc[[:alnum:]]{6})(/|$) && -d ${BASH_REMATCH[1]} ]]; then
    temp_dir="${BASH_REMATCH[1]}"
    cp -al "$temp_dir" "$keep/temp" 2> /dev/null || { rm -rf "$keep/temp"; cp -a "$temp_dir" "$keep/temp"; }
  fi
  if [[ -n $temp_dir && $arg == *"$temp_dir"* ]]; then
    args+=("${arg//"$temp_dir"/"$keep/temp"}")
  elif [[ $arg == *.rcgu.o && -f $arg ]]; then
    keep_file "$arg"
    args+=("$kept")
  else
    args+=("$arg")
  fi
done
printf '%s\0' "${args[@]}" > "$keep/args"
printf '%s' "$PATH" > "$keep/path"
exec "${AKRITAS_REAL_LINKER:-cc}" "$@"
