#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# check.sh KDIR            compares our declarations of the two foreign ABIs (include/rdma/peer_mem.h,
#                          include/nv-p2p.h) with the real headers of Debian's
#                          nvidia-open-kernel-source (nvidia-peermem/peer_mem.h, nvidia/nv-p2p.h).
# check.sh --self-test KDIR  proves the check can fail: runs it on mutated copies of our headers
#                          (two function pointers of peer_memory_client swapped, a constant, a
#                          prototype, an enum value, a typedef changed) and passes only if every
#                          mutant is reported.
#
# Both header sets are compiled out of tree with the kernel's own flags (make -C KDIR M=...):
# struct/union/typedef layouts (sizeof, offsetof, size and type of every member) are read from
# the DWARF of the objects; macro and enumerator values from `.ascii "->LABEL $VALUE"` lines of
# the assembler output; each real function is assigned to a pointer of our prototype type and
# __builtin_types_compatible_p records the verdict. Any difference in an item both sides
# declare is listed and fails the run; the last line is "abi: N items compared, M mismatches".
# The full item list is written to $NVPEER_CACHE/abi/report.txt. Host only (no VM).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
. "$repo/tests/setup/env.sh"

self_test=0
if [ "${1:-}" = --self-test ]; then self_test=1; shift; fi
[ $# -eq 1 ] || { echo "usage: check.sh [--self-test] KDIR" >&2; exit 2; }
kdir=$1
[ -f "$kdir/Makefile" ] && [ -f "$kdir/Module.symvers" ] \
    || { echo "abi: $kdir is not a built kernel tree" >&2; exit 2; }

src=$("$repo/tests/setup/nvidia-open-src.sh")
real_peer_mem=$src/nvidia-peermem/peer_mem.h
real_nv_p2p=$src/nvidia/nv-p2p.h
nv_version=$(cat "$src/nv_version")

work=$(mktemp -d /tmp/nvpeer-abi.XXXXXX)
trap 'rm -rf "$work"' EXIT

# compare OURS_INCLUDE_DIR WORKDIR [REPORT]: generate, build, compare; the status is the verdict.
compare() {
    local ours=$1 w=$2 report=${3:-}
    rm -rf "$w"; mkdir -p "$w"
    python3 "$here/abi.py" gen --ours "$ours" --real-peer-mem "$real_peer_mem" \
        --real-nv-p2p "$real_nv_p2p" --out "$w" || { echo "abi: MISMATCH: scanning the headers failed"; return 1; }
    if ! make -s -C "$kdir" M="$w" abi_ours.o abi_real.o abi_ours.s abi_real.s abi_proto.s \
            >"$w/build.log" 2>&1; then
        echo "abi: MISMATCH: the comparison units do not compile (log below)"
        sed 's/^/    /' "$w/build.log" | head -n 60
        return 1
    fi
    # Warnings of abi_proto.c are the prototype assignments that do not match: show them.
    if grep -q 'warning:' "$w/build.log"; then sed 's/^/    /' "$w/build.log" | head -n 40; fi
    python3 "$here/abi.py" compare --work "$w" ${report:+--report "$report"}
}

if [ $self_test -eq 0 ]; then
    echo "abi: ours (include/) against nvidia-open-kernel-source, driver $nv_version ($src)"
    if ! cmp -s "$real_nv_p2p" "$src/nvidia-peermem/nv-p2p.h"; then
        echo "abi: note: nvidia-peermem/nv-p2p.h differs from nvidia/nv-p2p.h; comparing with nvidia/nv-p2p.h"
    fi
    mkdir -p "$NVPEER_CACHE/abi"
    compare "$repo/include" "$work/check" "$NVPEER_CACHE/abi/report.txt"
    exit $?
fi

# ---- self-test: every mutant must make the comparison fail and name the mutated item.
# mutate NAME EXPECTED-OUTPUT-REGEX FILE PYTHON-REGEX REPLACEMENT
failures=0
mutate() {
    local name=$1 expect=$2 file=$3 pattern=$4 repl=$5 d=$work/mutant-$1 out
    rm -rf "$d"; mkdir -p "$d"; cp -r "$repo/include/." "$d/"
    if ! python3 - "$d/$file" "$pattern" "$repl" <<'EOF'
import re, sys
path, pattern, repl = sys.argv[1:]
text = open(path).read()
new, n = re.subn(pattern, repl, text, count=1, flags=re.S)
if n != 1 or new == text:
    sys.exit("pattern not found")
open(path, "w").write(new)
EOF
    then
        echo "abi self-test: FAIL: mutant '$name' no longer applies to include/$file; update $0"
        failures=$((failures + 1)); return
    fi
    if out=$(compare "$d" "$d.work" 2>&1); then
        echo "abi self-test: FAIL: mutant '$name' was NOT detected:"; echo "$out" | tail -n 5 | sed 's/^/    /'
        failures=$((failures + 1))
    elif ! grep -qE "$expect" <<<"$out"; then
        echo "abi self-test: FAIL: mutant '$name' failed the check, but not on /$expect/:"
        echo "$out" | grep -E 'MISMATCH|abi:' | head -n 8 | sed 's/^/    /'
        failures=$((failures + 1))
    else
        echo "abi self-test: ok: mutant '$name' detected: $(grep -m1 -E "$expect" <<<"$out")"
        echo "    $(tail -n1 <<<"$out")"
    fi
}

# The unmodified copy must pass (otherwise every mutant "fails" for the wrong reason).
if ! out=$(compare "$repo/include" "$work/baseline" 2>&1); then
    echo "abi self-test: FAIL: the unmodified headers do not pass; run tests/abi/check.sh first"
    echo "$out" | tail -n 10; exit 1
fi
mutate swap-fn-pointers 'MISMATCH: offsetof\(struct peer_memory_client, (put_pages|release)\)' rdma/peer_mem.h \
    '(\tvoid \(\*put_pages\)\([^;]*;\n)(.*?)(\tvoid \(\*release\)\([^;]*;\n)' '\3\2\1'
mutate constant 'MISMATCH: macro NVIDIA_P2P_GPU_UUID_LEN' nv-p2p.h \
    '(#define NVIDIA_P2P_GPU_UUID_LEN\s+)16' '\g<1>32'
mutate prototype 'MISMATCH: prototype nvidia_p2p_put_pages_persistent' nv-p2p.h \
    '(int nvidia_p2p_put_pages_persistent\([^;]*?)uint32_t flags' '\1uint64_t flags'
mutate enum-value 'MISMATCH: enum NVIDIA_P2P_PAGE_SIZE_64KB' nv-p2p.h \
    '(NVIDIA_P2P_PAGE_SIZE_4KB = )0' '\g<1>1'
mutate typedef 'MISMATCH: typedef invalidate_peer_memory' rdma/peer_mem.h \
    '(typedef int \(\*invalidate_peer_memory\)\(void \*reg_handle, )u64' '\1u32'
if [ $failures -ne 0 ]; then
    echo "abi self-test: $failures mutant(s) not detected"; exit 1
fi
echo "abi self-test: every mutant failed the check, as it must"
