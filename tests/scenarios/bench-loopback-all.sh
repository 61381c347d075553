# SPDX-License-Identifier: GPL-2.0
# shellcheck shell=bash disable=SC1091,SC2012
# `nvpeer bench --loopback-all` over Soft-RoCE in the VM: no GPU here, so with --mem host every
# RDMA device (two rxe devices over two dummy netdevs) is paired once with host memory and runs
# the loopback transfer: one row per device (text and JSON), each measured and named; software
# devices have no NUMA node, so nothing is pinned and the notes say so. `--min-gbps` above what
# TCG can move fails every pair with one line naming it ("... below --min-gbps N", the line
# NHC's check_nvpeer_bw reports), exit 1; the usage errors exit 2 in one line.
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
j() { python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$work/$1.out" "$2" 2>&1; }

expect "modprobe rdma_rxe" modprobe rdma_rxe
for i in 0 1; do
    ip link add "nvlb$i" type dummy && ip link set "nvlb$i" up
    expect "rdma link add rxe$i (Soft-RoCE over a dummy netdev)" rdma link add "rxe$i" type rxe netdev "nvlb$i"
done
devs=$(ls /sys/class/infiniband | sort | tr '\n' ' ')
ndev=$(ls /sys/class/infiniband | wc -l)
expect "two RDMA devices or more" test "$ndev" -ge 2

# ---------------------------------------------------------------- one row per device
run all-json bench --loopback-all --mem host -s 65536 -n 200 --json
cat "$work/all-json.err"
expect_eq "[--json] exit 0" 0 "$(rc all-json)"
expect_eq "[--json] schema" nvpeer.bench-loopback-all/1 "$(j all-json "r['schema']")"
expect_eq "[--json] a pair per RDMA device, in name order" "$devs" "$(j all-json "' '.join(p['nic'] for p in r['pairs']) + ' '")"
expect_eq "[--json] every pair with host memory, named" "True" "$(j all-json "all(p['gpu'] is None and p['name'] == 'host memory - ' + p['nic'] for p in r['pairs'])")"
expect_eq "[--json] every pair measured, ok, above 0 Gb/s" "True" "$(j all-json "all(p['status'] == 'ok' and p['gbps'] > 0 for p in r['pairs'])")"
expect_eq "[--json] every pair ran the same transfer: 200 x 64 KiB on its own device" "True" "$(j all-json "all(p['bench']['rows'][-1]['size'] == 65536 and p['bench']['rows'][-1]['iterations'] == 200 and p['bench']['device'] == p['nic'] for p in r['pairs'])")"
expect_eq "[--json] none failed" 0 "$(j all-json "r['failed']")"
expect_eq "[--json] rxe: no NUMA node, not pinned, and said why" "True" "$(j all-json "all(p['numa_node'] is None and p['cpulist'] is None and 'not pinned' in p['note'] for p in r['pairs'] if p['nic'].startswith('rxe'))")"

run all-text bench --loopback-all --mem host -s 65536 -n 200
cat "$work/all-text.out"
expect_eq "[table] exit 0" 0 "$(rc all-text)"
expect_eq "[table] one ok row per device" "$ndev" "$(grep -cE '^  host memory - [a-z0-9_]+ .* ok$' "$work/all-text.out")"
for d in $devs; do
    expect "[table] a row for $d" grep -qE "^  host memory - $d " "$work/all-text.out"
done
expect "[table] no failure lines" test ! -s "$work/all-text.err"

# ---------------------------------------------------------------- --min-gbps
run low bench --loopback-all --mem host -s 65536 -n 50 --min-gbps 1000000
cat "$work/low.out" "$work/low.err"
expect_eq "[--min-gbps above the link] exit 1" 1 "$(rc low)"
expect_eq "[--min-gbps] one failure line per pair" "$ndev" "$(grep -c ' below --min-gbps 1000000$' "$work/low.err")"
for d in $devs; do
    expect "[--min-gbps] the line names host memory - $d and its rate" grep -qE "^nvpeer bench: host memory - $d: [0-9]+\.[0-9] Gb/s below --min-gbps 1000000$" "$work/low.err"
done
expect "[--min-gbps] the rows say LOW" test "$(grep -c ' LOW$' "$work/low.out")" = "$ndev"
# NHC's check_nvpeer_bw takes the first line with "below" or "fail" of stdout and stderr: it
# must be a failure line, not a table row.
"$nvpeer" bench --loopback-all --mem host -s 4096 -n 20 --min-gbps 1000000 >"$work/nhc.txt" 2>&1
expect "[--min-gbps] the first below/fail line of the combined output names a pair" \
    grep -qE '^nvpeer bench: host memory - [a-z0-9_]+: [0-9.]+ Gb/s below' <(grep -m1 -E 'below|fail|FAIL' "$work/nhc.txt")
run ok-min bench --loopback-all --mem host -s 65536 -n 50 --min-gbps 0.000001 --json
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
