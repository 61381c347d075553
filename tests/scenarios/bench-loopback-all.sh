# SPDX-License-Identifier: GPL-2.0
# shellcheck shell=bash disable=SC1091,SC2012
# `nvpeer bench --loopback-all` over Soft-RoCE in the VM: no GPU here, so with --mem host every
# RDMA device (two rxe devices over two dummy netdevs) is paired once with host memory and runs
# the loopback transfer in both directions (RDMA write, then RDMA read), each size's first
# messages verified byte by byte: a row per device and direction (text and JSON), each measured,
# named and carrying its registration path; software devices have no NUMA node, so nothing is
# pinned and the notes say so. A NIC that refuses RDMA reads of one device's memory (libibverbs
# in our ibv_noread wrapper registers rxe1's memory without remote-read access, so rxe itself
# NAKs the reads) makes that pair's read direction fail while its writes work: reported as the
# known "writes work, reads fail" class with its workaround, the other pair untouched.
# `--min-gbps` above what TCG can move fails every direction with one line naming it ("...
# below --min-gbps N", the line NHC's check_nvpeer_bw reports), exit 1; the usage errors exit 2
# in one line.
# Run: tests/vm/run.sh --kdir KDIR bench-loopback-all
. "$(dirname "$0")/lib.sh"
nvpeer=$REPO/userspace/target/release/nvpeer
work=$(mktemp -d)
[ -x "$nvpeer" ] || { not_ok "$nvpeer is missing (cargo build --release)"; finish; exit 1; }

# run NAME ARGS...: nvpeer ARGS into $work/NAME.{out,err,rc}; a panic is a failure.
run() {
    local name=$1; shift
    "$nvpeer" "$@" >"$work/$name.out" 2>"$work/$name.err"
    echo $? >"$work/$name.rc"
    if grep -q panicked "$work/$name.err"; then not_ok "$name panicked: $(cat "$work/$name.err")"; fi
}
rc() { cat "$work/$1.rc"; }
# j NAME EXPR: EXPR over NAME's JSON report r; pair(DEV) is the pair of that RDMA device.
j() { python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
def pair(dev):
    return next(p for p in r["pairs"] if p["nic"] == dev)
print(eval(sys.argv[2]))' "$work/$1.out" "$2" 2>&1; }

expect "modprobe rdma_rxe" modprobe rdma_rxe
for i in 0 1; do
    ip link add "nvlb$i" type dummy && ip link set "nvlb$i" up
    expect "rdma link add rxe$i (Soft-RoCE over a dummy netdev)" rdma link add "rxe$i" type rxe netdev "nvlb$i"
done
devs=$(ls /sys/class/infiniband | sort | tr '\n' ' ')
ndev=$(ls /sys/class/infiniband | wc -l)
expect "two RDMA devices or more" test "$ndev" -ge 2

# ---------------------------------------------------------------- a row per device and direction
run all-json bench --loopback-all --mem host -s 65536 -n 50 --json
cat "$work/all-json.err"
expect_eq "[--json] exit 0" 0 "$(rc all-json)"
expect_eq "[--json] schema" nvpeer.bench-loopback-all/2 "$(j all-json "r['schema']")"
expect_eq "[--json] write, then read; 16 messages per size verified first" "write,read 16 False" "$(j all-json "'%s %s %s' % (','.join(r['ops']), r['verified_messages'], r['validated'])")"
expect_eq "[--json] a pair per RDMA device, in name order" "$devs" "$(j all-json "' '.join(p['nic'] for p in r['pairs']) + ' '")"
expect_eq "[--json] every pair with host memory, named" "True" "$(j all-json "all(p['gpu'] is None and p['name'] == 'host memory - ' + p['nic'] for p in r['pairs'])")"
expect_eq "[--json] every pair registered host memory with ibv_reg_mr" "True" "$(j all-json "all(p['registration'] == {'path': 'host_memory', 'api': 'ibv_reg_mr', 'dmabuf_mapping': None} for p in r['pairs'])")"
expect_eq "[--json] every direction of every pair measured, ok, above 0 Gb/s" "True" "$(j all-json "all(p['status'] == 'ok' and [d['op'] for d in p['directions']] == ['write', 'read'] and all(d['status'] == 'ok' and d['gbps'] > 0 for d in p['directions']) for p in r['pairs'])")"
expect_eq "[--json] every direction verified 16 x 64 KiB byte by byte" "True" "$(j all-json "all(d['verified_bytes'] == 16 * 65536 for p in r['pairs'] for d in p['directions'])")"
expect_eq "[--json] every direction ran the same transfer: 50 x 64 KiB of its op on its own device" "True" "$(j all-json "all(d['bench']['op'] == d['op'] and d['bench']['rows'][-1]['size'] == 65536 and d['bench']['rows'][-1]['iterations'] == 50 and d['bench']['device'] == p['nic'] for p in r['pairs'] for d in p['directions'])")"
expect_eq "[--json] none failed, no known issue" "0 True" "$(j all-json "r['failed'], all(p['known_issue'] is None for p in r['pairs'])" | tr -d "(),")"
expect_eq "[--json] rxe: no NUMA node, not pinned, and said why" "True" "$(j all-json "all(p['numa_node'] is None and p['cpulist'] is None and 'not pinned' in p['note'] for p in r['pairs'] if p['nic'].startswith('rxe'))")"

run all-text bench --loopback-all --mem host -s 4096 -n 20
cat "$work/all-text.out"
expect_eq "[table] exit 0" 0 "$(rc all-text)"
expect_eq "[table] one ok row per device and direction" "$((2 * ndev))" "$(grep -cE '^  host memory - [a-z0-9_]+ .* host memory \(ibv_reg_mr\) +(write|read) .* ok$' "$work/all-text.out")"
for d in $devs; do
    for op in write read; do
        expect "[table] a $op row for $d" grep -qE "^  host memory - $d .* $op +[0-9.]+ +ok$" "$work/all-text.out"
    done
done
expect "[table] no failure lines" test ! -s "$work/all-text.err"

# ---------------------------------------------------------------- reads refused by one NIC
# rxe1's memory registered without remote-read access (tests/stand-ins/ibv_noread): rxe1 NAKs
# every RDMA read of it, writes into it work; rxe0 is untouched.
noread=$work/libibverbs-noread.so
expect "build the ibv_noread wrapper" gcc -shared -fPIC -o "$noread" "$SIM_DIR/ibv_noread/ibv_noread.c" -libverbs -ldl
# (A function called with assignments in front sees them in its environment, as a command does.)
NVPEER_NOREAD_DEVICES=rxe1 NVPEER_LIBIBVERBS=$noread run noread bench --loopback-all --mem host -s 65536 -n 50 --json
NVPEER_NOREAD_DEVICES=rxe1 NVPEER_LIBIBVERBS=$noread run noread-text bench --loopback-all --mem host -s 4096 -n 20
cat "$work/noread.err" "$work/noread-text.out" "$work/noread-text.err"
expect_eq "[reads refused] exit 1" "1 1" "$(rc noread) $(rc noread-text)"
expect_eq "[reads refused] rxe0: write ok, read ok" "ok ok" "$(j noread "' '.join(d['status'] for d in pair('rxe0')['directions'])")"
expect_eq "[reads refused] rxe1: write ok, read error" "ok error" "$(j noread "' '.join(d['status'] for d in pair('rxe1')['directions'])")"
expect_eq "[reads refused] rxe1's write verified, its read refused by the NIC (remote access error)" "True True" "$(j noread "(lambda w, rd: (w['verified_bytes'] == 16 * 65536, 'remote access error' in rd['error']))(*pair('rxe1')['directions'])" | tr -d "(),")"
expect_eq "[reads refused] rxe1 is the known class, rxe0 is not" "None reads_fail_writes_work" "$(j noread "pair('rxe0')['known_issue'], pair('rxe1')['known_issue']['id']" | tr -d "(),'")"
expect_eq "[reads refused] the class names its sources and its workaround" "True" "$(j noread "(lambda k: k['references'] == ['NVIDIA/open-gpu-kernel-modules#1253', 'open-mpi/ompi#13183'] and k['workaround'].startswith('NCCL_NET_GDR_READ=0'))(pair('rxe1')['known_issue'])")"
expect_eq "[reads refused] one failure line" 1 "$(wc -l <"$work/noread-text.err")"
expect "[reads refused] the line names the pair, the read, the class and its workaround" \
    grep -qE '^nvpeer bench: host memory - rxe1: RDMA read failed: .*remote access error.*"writes work, reads fail" class.*NVIDIA/open-gpu-kernel-modules#1253, open-mpi/ompi#13183.*workaround: NCCL_NET_GDR_READ=0' "$work/noread-text.err"
expect "[reads refused] the table: rxe1 write ok, read ERROR" bash -c "grep -qE '^  host memory - rxe1 .* write +[0-9.]+ +ok$' '$work/noread-text.out' && grep -qE '^  host memory - rxe1 .* read +- +ERROR$' '$work/noread-text.out'"
# --op write alone: the refused reads are not run, so the pair passes.
NVPEER_NOREAD_DEVICES=rxe1 NVPEER_LIBIBVERBS=$noread run noread-write bench --loopback-all --mem host -s 4096 -n 20 --op write --json
expect_eq "[reads refused, --op write] exit 0, writes only" "0 write" "$(rc noread-write) $(j noread-write "','.join(r['ops'])")"

# ---------------------------------------------------------------- --min-gbps
run low bench --loopback-all --mem host -s 4096 -n 20 --min-gbps 1000000
cat "$work/low.out" "$work/low.err"
expect_eq "[--min-gbps above the link] exit 1" 1 "$(rc low)"
expect_eq "[--min-gbps] one failure line per pair and direction" "$((2 * ndev))" "$(grep -c ' below --min-gbps 1000000$' "$work/low.err")"
for d in $devs; do
    for op in write read; do
        expect "[--min-gbps] the line names host memory - $d, RDMA $op and its rate" grep -qE "^nvpeer bench: host memory - $d: RDMA $op [0-9]+\.[0-9] Gb/s below --min-gbps 1000000$" "$work/low.err"
    done
done
expect "[--min-gbps] the rows say LOW" test "$(grep -c ' LOW$' "$work/low.out")" = "$((2 * ndev))"
# NHC's check_nvpeer_bw takes the first line with "below" or "fail" of stdout and stderr: it
# must be a failure line, not a table row.
"$nvpeer" bench --loopback-all --mem host -s 4096 -n 20 --min-gbps 1000000 >"$work/nhc.txt" 2>&1
expect "[--min-gbps] the first below/fail line of the combined output names a pair" \
    grep -qE '^nvpeer bench: host memory - [a-z0-9_]+: RDMA write [0-9.]+ Gb/s below' <(grep -m1 -E 'below|fail|FAIL' "$work/nhc.txt")
run ok-min bench --loopback-all --mem host -s 4096 -n 20 --op write --min-gbps 0.000001 --json
expect_eq "[--min-gbps below every pair] exit 0" 0 "$(rc ok-min)"
expect_eq "[--min-gbps below every pair] recorded" 1e-06 "$(j ok-min "r['min_gbps']")"

# ---------------------------------------------------------------- usage errors
run lat bench --loopback-all --mem host --lat
expect_eq "[--lat] exit 2" 2 "$(rc lat)"
run dev bench --loopback-all --mem host -d rxe0
expect_eq "[-d] exit 2 (the devices are chosen per pair)" 2 "$(rc dev)"
run nominus bench --mem host --min-gbps 10
expect_eq "[--min-gbps without --loopback-all] exit 2" 2 "$(rc nominus)"
run badmin bench --loopback-all --mem host --min-gbps fast
expect_eq "[--min-gbps fast] exit 2" 2 "$(rc badmin)"
run noval bench --loopback-all --mem host -s 4096 -n 20 --no-validate --json
expect_eq "[--no-validate] exit 0, nothing verified" "0 0 0" "$(rc noval) $(j noval "r['verified_messages'], sum(d['verified_bytes'] for p in r['pairs'] for d in p['directions'])" | tr -d "(),")"
run nogpu bench --loopback-all
expect_eq "[no GPU, default --mem cuda] exit 2" 2 "$(rc nogpu)"
expect "[no GPU] one line pointing at --mem host" test "$(wc -l <"$work/nogpu.err")" = 1 -a -n "$(grep -e '--mem host or --mem sim' "$work/nogpu.err")"
cat "$work/nogpu.err"

# ---------------------------------------------------------------- no device
for i in 0 1; do rdma link delete "rxe$i"; ip link del "nvlb$i"; done
if [ -z "$(ls /sys/class/infiniband 2>/dev/null)" ]; then
    run nodev bench --loopback-all --mem host
    expect_eq "[no RDMA device] exit 2" 2 "$(rc nodev)"
    expect "[no RDMA device] one line saying so" test "$(wc -l <"$work/nodev.err")" = 1 -a -n "$(grep '^nvpeer bench: no RDMA device' "$work/nodev.err")"
fi
rm -rf "$work"
finish
