# SPDX-License-Identifier: GPL-2.0
# `nvpeer selftest` in the VM against the stand-ins: nv_p2p_sim's "GPU memory" is registered
# through peer_core_sim's REG_MR test interface (upstream ib_core has no peer-memory hook), the
# stand-in NIC moves a pattern both ways, and the module's counters and memory_peers must show
# exactly one registration of the expected pages and bytes and its release. Without the module
# the self-test must fail and say precisely why.
# Run: tests/vm/run.sh selftest
. "$(dirname "$0")/lib.sh"
nvpeer=$REPO/userspace/target/release/nvpeer
ko=$KO_DIR/nvidia_peermem.ko
core_ko=$SIM_DIR/peer_core_sim/peer_core_sim.ko
nv_ko=$SIM_DIR/nv_p2p_sim/nv_p2p_sim.ko
work=$(mktemp -d)
for f in "$nvpeer" "$ko" "$core_ko" "$nv_ko"; do
    [ -e "$f" ] || { not_ok "$f is missing (tests/build-all.sh, cargo build --release)"; finish; exit 1; }
done
# st NAME ARGS...: nvpeer selftest ARGS into $work/NAME.{out,err,rc}.
st() {
    local name=$1; shift
    "$nvpeer" selftest "$@" >"$work/$name.out" 2>"$work/$name.err"
    echo $? >"$work/$name.rc"
    if grep -q panicked "$work/$name.err"; then not_ok "selftest ($name) panicked: $(cat "$work/$name.err")"; fi
}
j() { python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
def s(n):
    return next((x for x in r["steps"] if x["name"] == n), {"status": "absent", "detail": ""})
print(eval(sys.argv[2]))' "$work/$1.out" "$2" 2>&1; }

expect "insmod peer_core_sim generation=5x-unmaps sysfs=1" insmod "$core_ko" generation=5x-unmaps sysfs=1
expect "insmod nv_p2p_sim" insmod "$nv_ko"

# ---------------------------------------------------------------- module not loaded
st nomod --mem sim
cat "$work/nomod.out"
expect_eq "[no module] exit 1" 1 "$(cat "$work/nomod.rc")"
expect "[no module] says the module is not loaded" grep -q '\[FAIL\] module .*peer-memory module is not loaded' "$work/nomod.out"
expect "[no module] the registration failure names the cause" grep -qE '\[FAIL\] register .*Bad address.*: likely cause: the peer-memory module is not loaded' "$work/nomod.out"
expect "[no module] selftest FAILED" grep -q '^selftest FAILED$' "$work/nomod.out"

# ---------------------------------------------------------------- module loaded
expect "insmod nvidia_peermem.ko" insmod "$ko"
st loaded --mem sim
cat "$work/loaded.out"
expect_eq "[loaded] exit 0" 0 "$(cat "$work/loaded.rc")"
expect "[loaded] selftest passed" grep -q '^selftest passed$' "$work/loaded.out"
expect "[loaded] names the peer_core_sim test interface" grep -q 'registered through peer_core_sim test interface' "$work/loaded.out"
st json --mem sim --size 1M --json
expect_eq "[json] exit 0" 0 "$(cat "$work/json.rc")"
expect_eq "[json] schema, passed" "nvpeer.selftest/1 True" "$(j json "r['schema'], r['passed']" | tr -d "(),'")"
expect_eq "[json] 1 MiB" 1048576 "$(j json "r['size']")"
for step in module allocate staged_copy register transfer deregister free module_counters memory_peers; do
    expect_eq "[json] step $step ok" ok "$(j json "s('$step')['status']")"
done
expect "[json] taken by nv_mem" grep -q 'taken by peer client nv_mem' <(j json "s('register')['detail']")
expect "[json] 16 GPU pages, 1048576 bytes" grep -q 'exactly one registration of 16 GPU pages (1048576 bytes)' <(j json "s('module_counters')['detail']")
expect "[json] every byte verified" grep -q '1048576 bytes written into and 1048576 read' <(j json "s('transfer')['detail']")
expect_eq "[after] no live contexts left" 0 "$(cat /sys/module/nvidia_peermem/nvpeer/stats/live_contexts)"

# ---------------------------------------------------------------- malformed argument
"$nvpeer" selftest --size 0 >/dev/null 2>"$work/zero.err"; zrc=$?
expect_eq "[size 0] usage error, exit 2" 2 "$zrc"

expect "rmmod nvidia_peermem" rmmod nvidia_peermem
expect "rmmod the stand-ins" rmmod nv_p2p_sim peer_core_sim
rm -rf "$work"
finish
