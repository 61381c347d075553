#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# test-provenance.sh: `nvpeer attach --dry-run` judges build provenance (issue 37) with the real
# kmod tools (`modinfo`, `modprobe --show-exports`) on real module files: small ELF objects built
# here by gcc with the sections a module has (`.modinfo`; exported CRCs in both forms the kernel
# has used: a `__crc_<symbol>` label in `___kcrctab*+<symbol>` (6.x) and an absolute `__crc_`
# symbol (4.x/5.x)), laid out as a host: /lib/modules/<release>/modules.dep, /sys/module, kallsyms.
# Asserts: matching CRCs -> compatible (would load); a core whose CRC changed -> "rebuild: built
# against ..., running ..." exit 1; the same with the core compressed (.ko.xz, .ko.zst); a core
# upgraded on disk but not reloaded (srcversion differs) -> unknown, loads; a module built before
# provenance -> unknown, loads; another kernel release -> rebuild; NVIDIA's module in our place ->
# refused. `nvpeer check`'s `provenance` row says the same before anyone loads the module (the
# facts gathered with the same tools, judged again alike from the saved JSON by `check --facts`).
# Needs gcc, kmod, xz, zstd, python3 and the built CLI.
# shellcheck disable=SC2015  # `a && ok || bad`: bad is what should run when either fails
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin=${NVPEER_BIN:-$repo/userspace/target/release/nvpeer}
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok    $*"; }
bad() { fail=$((fail + 1)); echo "FAIL  $*"; }
for tool in gcc modinfo modprobe xz zstd "$bin"; do
    command -v "$tool" >/dev/null || { echo "FAIL  $tool is missing"; exit 1; }
done
rel=7.2.0-test
lib=$t/lib/modules/$rel
mkdir -p "$t/sys/module" "$t/proc/sys/kernel" "$lib/kernel" "$lib/updates"
echo "$rel" >"$t/proc/sys/kernel/osrelease"

# mkmod FILE MODINFO [CRC-ASM]: an ELF object with MODINFO ("k=v" lines) in .modinfo.
mkmod() {
    local c=$t/m.c
    {
        printf 'const char modinfo[] __attribute__((section(".modinfo"), used)) = '
        while IFS= read -r kv; do printf '"%s\\0"\n' "$kv"; done <<<"$2"
        printf ';\n%s\n' "${3:-}"
    } >"$c"
    gcc -c -o "$1" "$c" || { echo "FAIL  gcc could not build $1"; exit 1; }
}
# crc6 SYM CRC: the 6.x form (export-internal.h's SYMBOL_CRC); crc5 SYM CRC: the absolute form.
crc6() { printf 'asm(".section \\"___kcrctab_gpl+%s\\",\\"a\\"\\n.balign 4\\n__crc_%s:\\n.long %s\\n.previous\\n");\n' "$1" "$1" "$2"; }
crc5() { printf 'asm(".globl __crc_%s\\n.set __crc_%s, %s\\n");\n' "$1" "$1" "$2"; }
REG=ib_register_peer_memory_client UNREG=ib_unregister_peer_memory_client GET=nvidia_p2p_get_pages
ours() {
    mkmod "$lib/updates/nvidia_peermem.ko" "description=GPUDirect RDMA peer-memory client for NVIDIA GPU memory (nvpeer, Rust)
vermagic=${1:-$rel} SMP mod_unload modversions
${2-nvpeer_import=$REG 0x1a2b3c4d ib_uverbs
nvpeer_import=$UNREG 0x00c0ffee ib_uverbs
nvpeer_import=$GET 0x55aa55aa nvidia
nvpeer_provider=ib_uverbs 24.10-1.1.4
nvpeer_provider=nvidia 580.159.04}"
}
core() { # core FILE CRC SRCVERSION
    mkmod "$1" "srcversion=$3
version=24.10-1.1.4" "$(crc6 "$REG" "$2")$(crc6 "$UNREG" 0x00c0ffee)"
}
ours
core "$t/ib_uverbs.ko" 0x1a2b3c4d AAAA
mkmod "$lib/kernel/nvidia.ko" "srcversion=NNNN
version=580.159.04" "$(crc5 "$GET" 0x55aa55aa)"
deps() { printf 'updates/nvidia_peermem.ko: kernel/%s\nkernel/%s:\nkernel/nvidia.ko:\n' "$1" "$1" >"$lib/modules.dep"; }
cp "$t/ib_uverbs.ko" "$lib/kernel/ib_uverbs.ko"; deps ib_uverbs.ko
printf '0000000000000000 T %s\t[ib_uverbs]\n0000000000000000 T %s\t[ib_uverbs]\n0000000000000000 T %s\t[nvidia]\n' \
    "$REG" "$UNREG" "$GET" >"$t/proc/kallsyms"
for m in ib_uverbs:AAAA:24.10-1.1.4 nvidia:NNNN:580.159.04; do
    IFS=: read -r name src ver <<<"$m"
    mkdir -p "$t/sys/module/$name"; echo "$src" >"$t/sys/module/$name/srcversion"; echo "$ver" >"$t/sys/module/$name/version"
done

# The tools themselves read what was built.
[ "$(modprobe --show-exports "$lib/kernel/ib_uverbs.ko" | grep -c "$REG")" = 1 ] && ok "modprobe --show-exports reads the 6.x __kcrctab form" \
    || bad "show-exports of the core: $(modprobe --show-exports "$lib/kernel/ib_uverbs.ko" 2>&1)"
modprobe --show-exports "$lib/kernel/nvidia.ko" | grep -qx "0x55aa55aa	$GET" && ok "... and the absolute __crc_ form" || bad "show-exports of nvidia"

# attach CASE WANT-EXIT WANT-LINE: `nvpeer attach --dry-run` on the tree.
attach() {
    "$bin" --sysfs-root "$t/sys" --procfs-root "$t/proc" attach --dry-run >"$t/out" 2>"$t/err"
    local rc=$? line
    line=$(cat "$t/out" "$t/err")
    if [ "$rc" = "$2" ] && [ "$(wc -l <<<"$line")" = 1 ] && [ "$line" = "$3" ]; then ok "$1"
    else bad "$1: exit $rc, '$line' (want exit $2, '$3')"; fi
}
# row CASE STATUS DETAIL-START: the `provenance` row of `nvpeer check --json` on the tree, and the
# same row from `nvpeer check --facts` of that JSON.
row() {
    "$bin" --sysfs-root "$t/sys" --procfs-root "$t/proc" check --json >"$t/check.json" 2>"$t/check.err"
    "$bin" check --facts "$t/check.json" --json >"$t/again.json" 2>>"$t/check.err"
    python3 - "$t/check.json" "$t/again.json" "$2" "$3" <<'PY' >"$t/row.out" 2>&1 && ok "check: $1" || bad "check: $1: $(cat "$t/row.out" "$t/check.err")"
import json, sys
live, again = (json.load(open(f)) for f in sys.argv[1:3])
row = lambda r: next((c for c in r["checks"] if c["id"] == "provenance"), None)
c = row(live)
assert c is not None, "no provenance row"
assert c["status"] == sys.argv[3] and c["detail"].startswith(sys.argv[4]), c
assert row(again) == c, ("--facts judged it otherwise", row(again))
PY
}
attach "matching CRCs: compatible, would load" 0 "nvpeer attach: would load nvidia_peermem (provenance compatible) [dry run]"
row "matching CRCs: compatible" ok "compatible: $lib/updates/nvidia_peermem.ko (built for kernel $rel; 3 of 3 imported symbols with a CRC, each as ib_uverbs 24.10-1.1.4 and nvidia 580.159.04 export it)"
core "$lib/kernel/ib_uverbs.ko" 0x77777777 AAAA; echo 25.04-0.6.1 >"$t/sys/module/ib_uverbs/version"
want="nvpeer attach: not loading nvidia_peermem: rebuild: built against ib_uverbs 24.10-1.1.4 ($REG 0x1a2b3c4d), running ib_uverbs 25.04-0.6.1 (0x77777777)"
attach "the core's CRC changed: rebuild, exit 1" 1 "$want"
"$bin" --sysfs-root "$t/sys" --procfs-root "$t/proc" attach --dry-run --json >"$t/out" 2>&1
python3 - "$t/out" "${want#nvpeer attach: not loading nvidia_peermem: }" <<'PY' && ok "... attach --json keeps the rebuild verdict" || bad "attach --json on a rebuild: $(cat "$t/out")"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["result"] == "refused" and r["verdict"] == sys.argv[2], r
PY
row "the core's CRC changed: rebuild before load" fail "${want#nvpeer attach: not loading nvidia_peermem: }: \`modprobe nvidia_peermem\` would be refused"
for z in xz zstd; do
    rm -f "$lib/kernel/"ib_uverbs.ko.*
    $z -q -c "$lib/kernel/ib_uverbs.ko" >"$lib/kernel/ib_uverbs.ko.${z/zstd/zst}"
    deps "ib_uverbs.ko.${z/zstd/zst}"
    attach "... read from a $z-compressed core" 1 "$want"
done
rm -f "$lib/kernel/"ib_uverbs.ko.*; deps ib_uverbs.ko; echo 24.10-1.1.4 >"$t/sys/module/ib_uverbs/version"
# MOFED upgraded on disk (new file, srcversion BBBB), the old core still loaded (AAAA).
core "$lib/kernel/ib_uverbs.ko" 0x77777777 BBBB
attach "core upgraded on disk, not reloaded: unknown, loads (the kernel judges)" 0 \
    "nvpeer attach: would load nvidia_peermem (provenance unknown: the loaded ib_uverbs is not $lib/kernel/ib_uverbs.ko (srcversion differs): its CRCs are not readable; the next reload of ib_uverbs brings $lib/kernel/ib_uverbs.ko (0x77777777): rebuild before it; the kernel judges the load) [dry run]"
row "core upgraded on disk, not reloaded: unknown, says the next reload needs a rebuild" warn \
    "unknown: the loaded ib_uverbs is not $lib/kernel/ib_uverbs.ko (srcversion differs): its CRCs are not readable; the next reload of ib_uverbs brings $lib/kernel/ib_uverbs.ko (0x77777777): rebuild before it"
# ... found as the loaded one in the DOCA driver container's root.
dl=$t/run/mellanox/drivers/lib/modules/$rel
mkdir -p "$dl/kernel"; cp "$t/ib_uverbs.ko" "$dl/kernel/"; printf 'kernel/ib_uverbs.ko:\n' >"$dl/modules.dep"
attach "... its loaded file in /run/mellanox/drivers: compatible" 0 "nvpeer attach: would load nvidia_peermem (provenance compatible) [dry run]"
rm -rf "$t/run"; core "$lib/kernel/ib_uverbs.ko" 0x1a2b3c4d AAAA
ours 7.1.0-old
attach "built for another kernel: rebuild" 1 "nvpeer attach: not loading nvidia_peermem: rebuild: built against kernel 7.1.0-old, running kernel $rel"
row "built for another kernel: rebuild" fail "rebuild: built against kernel 7.1.0-old, running kernel $rel"
ours "$rel" ""
attach "built before provenance: unknown, loads" 0 \
    "nvpeer attach: would load nvidia_peermem (provenance unknown: $lib/updates/nvidia_peermem.ko records no provenance (no nvpeer_import in its .modinfo: built before issue 37); the kernel judges the load) [dry run]"
row "built before provenance: the kernel release judged, the CRCs not" ok \
    "$lib/updates/nvidia_peermem.ko is built for kernel $rel, the running one; the CRCs of the symbols it imports from the IB core and the NVIDIA driver: not judged"
mkmod "$lib/updates/nvidia_peermem.ko" "description=NVIDIA GPU memory plug-in
vermagic=$rel SMP"
attach "NVIDIA's nvidia-peermem in our place: refused" 1 \
    "nvpeer attach: not loading nvidia_peermem: modprobe nvidia_peermem would load $lib/updates/nvidia_peermem.ko, which is not nvpeer's"
row "NVIDIA's nvidia-peermem in our place: nothing to judge" ok "\`modprobe nvidia_peermem\` loads $lib/updates/nvidia_peermem.ko, which is not nvpeer's"
echo garbage >"$lib/updates/nvidia_peermem.ko"
"$bin" --sysfs-root "$t/sys" --procfs-root "$t/proc" attach --dry-run --json >"$t/out" 2>&1
python3 - "$t/out" <<'PY' && ok "an unreadable module file: JSON names modinfo's error" || bad "unreadable file: $(cat "$t/out")"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["schema"] == "nvpeer.attach/1" and r["result"] == "would_load", r
assert r["verdict"].startswith("unknown: cannot read ") and "failed (exit 1)" in r["verdict"], r
PY
echo "[test-provenance] $pass ok, $fail failed"
[ "$fail" = 0 ]
