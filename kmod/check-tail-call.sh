#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# check-tail-call.sh KDIR OBJECT: NVIDIA's free callback (nvpeer_glue_free_callback in
# nvpeer_callback.c) must end in a jump to module_put and have no return of its own: the module
# reference it took on entry is then dropped by its last instruction, and no instruction of the
# module runs after it (REVIEW-KMOD C5). A compiler that emits `call module_put; ret` instead
# reopens that window, so the build stops. x86_64 and arm64 (objdump's own or llvm-objdump's
# syntax); a kernel without CONFIG_MODULE_UNLOAD has no module_put to jump to and nothing to
# close.
set -eu
kdir=$1 obj=$2
if ! grep -qs '^CONFIG_MODULE_UNLOAD=y' "$kdir/.config"; then
    exit 0
fi
objdump=${OBJDUMP:-${CROSS_COMPILE:-}objdump}
dis=$("$objdump" -dr "$obj") || { echo "check-tail-call: cannot disassemble $obj with $objdump" >&2; exit 1; }
printf '%s\n' "$dis" | awk -v obj="$obj" '
    /^[0-9a-f]+ <nvpeer_glue_free_callback>:/ { infn = 1; next }
    infn && /^[0-9a-f]+ <.*>:/ { infn = 0 }
    infn && /^$/ { infn = 0 }
    !infn { next }
    # A relocation line names the target of the instruction before it.
    /R_(X86_64|AARCH64)_[A-Z0-9_]+[[:space:]]/ {
        target = $NF; sub(/[-+]0x[0-9a-f]+$/, "", target)
        if (target == "module_put") { put = last_op; put_at = count }
        if (target ~ /return_thunk/) { returns++ }
        next
    }
    /^[[:space:]]+[0-9a-f]+:/ {
        line = $0; sub(/^[[:space:]]+[0-9a-f]+:[[:space:]]*/, "", line)
        # Skip the raw bytes objdump prints before the mnemonic.
        n = split(line, f, /[[:space:]]+/)
        op = ""
        for (i = 1; i <= n; i++) if (f[i] !~ /^[0-9a-f][0-9a-f]$/ && f[i] !~ /^[0-9a-f]{8}$/) { op = f[i]; break }
        if (op == "") next
        if (op ~ /^(nop|int3|udf|\.word)/) next
        if (op ~ /^(ret|retq|retaa|retab)$/) returns++
        last_op = op; count++
        next
    }
    END {
        if (!count) { printf "check-tail-call: no nvpeer_glue_free_callback in %s\n", obj; exit 1 }
        if (put !~ /^(jmp|b)$/ || returns) {
            printf "check-tail-call: nvpeer_glue_free_callback in %s does not end in a tail jump to module_put (module_put reached by %s, %d return(s)): the compiler did not make the sibling call; REVIEW-KMOD C5 would be open again\n", obj, (put == "" ? "nothing" : put), returns
            exit 1
        }
        if (put_at != count) {
            printf "check-tail-call: nvpeer_glue_free_callback in %s goes on after its jump to module_put\n", obj
            exit 1
        }
    }'
