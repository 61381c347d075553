#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# extract-object.sh AR NM OBJCOPY ARCHIVE OBJECT: the module's Rust object out of the static library
# rustc made with fat LTO: its one object with code, the client's; any other member
# (`compiler_builtins`') must define nothing, or the build stops naming what it defines. The
# bitcode rustc embeds (for LTO, which is done) is removed: modpost refuses such sections.
set -eu
ar=$1 nm=$2 objcopy=$3 archive=$(cd "$(dirname "$4")" && pwd)/${4##*/} out=$5
dir=$(mktemp -d "$(dirname "$out")/.extract.XXXXXX")
trap 'rm -rf "$dir"' EXIT
(cd "$dir" && $ar x "$archive")
main=
for o in "$dir"/*.o; do
    case ${o##*/} in
    *compiler_builtins*)
        defined=$($nm --defined-only "$o" 2>/dev/null | awk '{print $NF}' | tr '\n' ' ')
        [ -z "$defined" ] || { echo "nvpeer: compiler_builtins defines $defined: an intrinsic the kernel lacks is needed (kmod/runtime/compiler_builtins.rs)" >&2; exit 1; } ;;
    *) [ -z "$main" ] || { echo "nvpeer: $archive has more than one object of code (${main##*/}, ${o##*/}): fat LTO expected" >&2; exit 1; }
       main=$o ;;
    esac
done
[ -n "$main" ] || { echo "nvpeer: no object in $archive" >&2; exit 1; }
$objcopy --remove-section=.llvmbc --remove-section=.llvmcmd "$main" "$out"
