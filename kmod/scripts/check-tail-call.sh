#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# check-tail-call.sh KDIR OBJECT: NVIDIA's free callback (nvpeer_glue_free_callback in
# nvpeer_callback.c) must end in a jump to module_put and have no return of its own: the module
# reference it took on entry is then dropped by its last instruction, and no instruction of the
# module runs after it (REVIEW-KMOD C5). A compiler that emits `call module_put; ret` instead
# reopens that window, so the build stops. OBJECT is the callback's object or the linked module.
# x86_64 and arm64, GNU objdump's or llvm-objdump's syntax; the disassembly is read without the
# raw bytes (--no-show-raw-insn), so no awk regex feature beyond POSIX's common core is needed
# (mawk, Debian's default awk, takes `{n}` intervals literally: REVIEW-KMOD-3 T4-3).
# A kernel without CONFIG_MODULE_UNLOAD has no module_put to jump to and nothing to close.
#
# check-tail-call.sh --self-test: runs the verdict on planted disassemblies (x86_64 and arm64,
# old binutils' `jmpq`, arm64 pointer authentication's `retaa`) under every awk installed.
set -eu

# verdict OBJECT-NAME: reads `objdump -dr --no-show-raw-insn` output on stdin; prints one line
# and fails unless the callback ends in a jump to module_put and never returns.
verdict() {
    # shellcheck disable=SC2016,SC2086 # the program is awk's; AWK may be a command with words
    ${AWK:-awk} -v obj="$1" '
    /^[0-9a-f]+ <nvpeer_glue_free_callback>:/ { infn = 1; next }
    infn && /^[0-9a-f]+ <.*>:/ { infn = 0 }
    infn && /^[[:space:]]*$/ { infn = 0 }
    !infn { next }
    # A relocation line names the target of the instruction before it.
    /R_(X86_64|AARCH64)_[A-Z0-9_]+[[:space:]]/ {
        target = $NF; sub(/[-+]0x[0-9a-f]+$/, "", target)
        if (target == "module_put") { put = last_op; put_at = count }
        if (target ~ /return_thunk/) { returns++ }
        next
    }
    /^[[:space:]]*[0-9a-f]+:/ {
        line = $0; sub(/^[[:space:]]*[0-9a-f]+:[[:space:]]*/, "", line)
        split(line, f, /[[:space:]]+/); op = f[1]
        if (op == "") next
        # Padding and traps after the jump (SLS hardening puts int3 there) are not instructions
        # that run; x86 nops may carry prefixes (`cs nopw`, `data16 ...`).
        if (op ~ /^(int3|udf|\.word|\.inst|hint)$/ || line ~ /(^|[[:space:]])nop/) next
        if (op ~ /^(ret|retq|retl|retaa|retab|eret|eretaa|eretab)$/) returns++
        last_op = op; count++
        next
    }
    END {
        if (!count) { printf "check-tail-call: no nvpeer_glue_free_callback in %s\n", obj; exit 1 }
        if (put !~ /^(jmp|jmpq|b)$/ || returns) {
            printf "check-tail-call: nvpeer_glue_free_callback in %s does not end in a tail jump to module_put (module_put reached by %s, %d return(s)): the compiler did not make the sibling call; REVIEW-KMOD C5 would be open again\n", obj, (put == "" ? "nothing" : put), returns
            exit 1
        }
        if (put_at != count) {
            printf "check-tail-call: nvpeer_glue_free_callback in %s goes on after its jump to module_put\n", obj
            exit 1
        }
    }'
}

# Planted disassemblies for --self-test, each named by what the verdict must be. Shapes as GNU
# objdump 2.40 and llvm-objdump 19 print them with -dr --no-show-raw-insn.
plant() {
    case $1 in
    ok-x86_64) cat <<'EOF'
0000000000000000 <nvpeer_glue_free_callback>:
   0:	endbr64
   4:	call	0x9 <nvpeer_glue_free_callback+0x9>
			5: R_X86_64_PLT32	__fentry__-0x4
   9:	push   %rbx
   a:	mov    %rdi,%rbx
   d:	mov    $0x0,%rdi
			10: R_X86_64_32S	__this_module
  14:	call   19 <nvpeer_glue_free_callback+0x19>
			15: R_X86_64_PLT32	__module_get-0x4
  19:	mov    %rbx,%rdi
  1c:	call   21 <nvpeer_glue_free_callback+0x21>
			1d: R_X86_64_PLT32	nvpeer_free_callback-0x4
  21:	mov    $0x0,%rdi
			24: R_X86_64_32S	__this_module
  28:	pop    %rbx
  29:	jmp    2e <nvpeer_glue_free_callback+0x2e>
			2a: R_X86_64_PLT32	module_put-0x4
  2e:	int3
  2f:	cs nopw 0x0(%rax,%rax,1)

0000000000000040 <nvpeer_glue_other>:
  40:	ret
EOF
    ;;
    ok-x86_64-jmpq) cat <<'EOF'
0000000000000000 <nvpeer_glue_free_callback>:
   0:	callq  5 <nvpeer_glue_free_callback+0x5>
			1: R_X86_64_PLT32	__fentry__-0x4
   5:	push   %rbx
   6:	mov    %rdi,%rbx
   9:	callq  e <nvpeer_glue_free_callback+0xe>
			a: R_X86_64_PLT32	nvpeer_free_callback-0x4
   e:	mov    $0x0,%rdi
			11: R_X86_64_32S	__this_module
  15:	pop    %rbx
  16:	jmpq   1b <nvpeer_glue_free_callback+0x1b>
			17: R_X86_64_PLT32	module_put-0x4
EOF
    ;;
    ok-x86_64-llvm) cat <<'EOF'
0000000000000000 <nvpeer_glue_free_callback>:
       0:      	endbr64
       4:      	pushq	%rbx
       5:      	movq	%rdi, %rbx
       8:      	callq	0xd <nvpeer_glue_free_callback+0xd>
		0000000000000009:  R_X86_64_PLT32	nvpeer_free_callback-0x4
       d:      	movq	$0x0, %rdi
		0000000000000010:  R_X86_64_32S	__this_module
      14:      	popq	%rbx
      15:      	jmp	0x1a <nvpeer_glue_free_callback+0x1a>
		0000000000000016:  R_X86_64_PLT32	module_put-0x4
      1a:      	int3
EOF
    ;;
    bad-x86_64-call-thunk) cat <<'EOF'
0000000000000000 <nvpeer_glue_free_callback>:
   0:	push   %rbx
   1:	mov    %rdi,%rbx
   4:	call   9 <nvpeer_glue_free_callback+0x9>
			5: R_X86_64_PLT32	nvpeer_free_callback-0x4
   9:	mov    $0x0,%rdi
			c: R_X86_64_32S	__this_module
  10:	call   15 <nvpeer_glue_free_callback+0x15>
			11: R_X86_64_PLT32	module_put-0x4
  15:	pop    %rbx
  16:	jmp    1b <nvpeer_glue_free_callback+0x1b>
			17: R_X86_64_PLT32	__x86_return_thunk-0x4
EOF
    ;;
    bad-x86_64-retq) cat <<'EOF'
0000000000000000 <nvpeer_glue_free_callback>:
   0:	push   %rbx
   1:	callq  6 <nvpeer_glue_free_callback+0x6>
			2: R_X86_64_PLT32	module_put-0x4
   6:	pop    %rbx
   7:	retq
EOF
    ;;
    ok-arm64) cat <<'EOF'
0000000000000000 <nvpeer_glue_free_callback>:
   0:	paciasp
   4:	stp	x29, x30, [sp, #-32]!
   8:	mov	x29, sp
   c:	str	x19, [sp, #16]
  10:	mov	x19, x0
  14:	adrp	x0, 0 <__this_module>
			14: R_AARCH64_ADR_PREL_PG_HI21	__this_module
  18:	add	x0, x0, #0x0
			18: R_AARCH64_ADD_ABS_LO12_NC	__this_module
  1c:	bl	0 <__module_get>
			1c: R_AARCH64_CALL26	__module_get
  20:	mov	x0, x19
  24:	bl	0 <nvpeer_free_callback>
			24: R_AARCH64_CALL26	nvpeer_free_callback
  28:	adrp	x0, 0 <__this_module>
			28: R_AARCH64_ADR_PREL_PG_HI21	__this_module
  2c:	add	x0, x0, #0x0
			2c: R_AARCH64_ADD_ABS_LO12_NC	__this_module
  30:	ldr	x19, [sp, #16]
  34:	ldp	x29, x30, [sp], #32
  38:	autiasp
  3c:	b	0 <module_put>
			3c: R_AARCH64_JUMP26	module_put
EOF
    ;;
    bad-arm64-retaa) cat <<'EOF'
0000000000000000 <nvpeer_glue_free_callback>:
   0:	pacibsp
   4:	stp	x29, x30, [sp, #-16]!
   8:	mov	x29, sp
   c:	bl	0 <nvpeer_free_callback>
			c: R_AARCH64_CALL26	nvpeer_free_callback
  10:	adrp	x0, 0 <__this_module>
			10: R_AARCH64_ADR_PREL_PG_HI21	__this_module
  14:	add	x0, x0, #0x0
			14: R_AARCH64_ADD_ABS_LO12_NC	__this_module
  18:	bl	0 <module_put>
			18: R_AARCH64_CALL26	module_put
  1c:	ldp	x29, x30, [sp], #16
  20:	retaa
EOF
    ;;
    bad-arm64-after-jump) cat <<'EOF'
0000000000000000 <nvpeer_glue_free_callback>:
   0:	b	0 <module_put>
			0: R_AARCH64_JUMP26	module_put
   4:	mov	x0, #0x0
   8:	ret
EOF
    ;;
    bad-missing) cat <<'EOF'
0000000000000000 <nvpeer_glue_other>:
   0:	ret
EOF
    ;;
    esac
}

if [ "${1:-}" = --self-test ]; then
    cases="ok-x86_64 ok-x86_64-jmpq ok-x86_64-llvm bad-x86_64-call-thunk bad-x86_64-retq ok-arm64
        bad-arm64-retaa bad-arm64-after-jump bad-missing"
    fails=0 awks=""
    for a in mawk gawk original-awk busybox-awk; do
        case $a in busybox-awk) busybox awk 'BEGIN {}' 2>/dev/null && awks="$awks $a" ;;
        *) command -v "$a" >/dev/null && awks="$awks $a" ;; esac
    done
    case $awks in *mawk*) ;; *) echo "check-tail-call --self-test: mawk is not installed (Debian's default awk; the case T4-3 is about)"; exit 1 ;; esac
    for a in $awks; do
        for c in $cases; do
            awk_cmd=$a; [ "$a" = busybox-awk ] && awk_cmd="busybox awk"
            # A refusal counts only when it is the check's own one line, not a broken awk.
            if out=$(plant "$c" | AWK=$awk_cmd verdict "$c" 2>&1); then got=ok
            else case $out in "check-tail-call: "*) got=bad ;; *) got="an error" ;; esac; fi
            if [ "$got" = "${c%%-*}" ]; then echo "ok   $a $c${out:+: $out}"
            else echo "FAIL $a $c: expected ${c%%-*}, got $got${out:+: $out}"; fails=$((fails + 1)); fi
        done
    done
    echo "check-tail-call --self-test: $fails failure(s) under$awks"
    [ "$fails" -eq 0 ]
    exit
fi

kdir=$1 obj=$2
# The configuration as the kernel tree records it: .config, or a headers package's auto.conf.
config=
for f in "$kdir/.config" "$kdir/include/config/auto.conf"; do
    [ -f "$f" ] && { config=$f; break; }
done
[ -n "$config" ] || { echo "check-tail-call: no .config or include/config/auto.conf in $kdir: cannot tell whether modules unload" >&2; exit 1; }
if ! grep -qs '^CONFIG_MODULE_UNLOAD=y' "$config"; then
    exit 0
fi
objdump=${OBJDUMP:-${CROSS_COMPILE:-}objdump}
dis=$("$objdump" -dr --no-show-raw-insn "$obj") || {
    if head -c 4 "$obj" | grep -q '^BC'; then
        echo "check-tail-call: $obj is LLVM bitcode (CONFIG_LTO_CLANG): check the linked module instead" >&2
    else
        echo "check-tail-call: cannot disassemble $obj with $objdump" >&2
    fi
    exit 1
}
printf '%s\n' "$dis" | verdict "$obj"
