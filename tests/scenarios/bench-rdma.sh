# SPDX-License-Identifier: GPL-2.0
# nvpeer bench vs perftest on the same Soft-RoCE device (rxe0 over a dummy netdev), loopback
# through 127.0.0.1 for both: ib_write_bw, ib_read_bw (65536 B, tx depth 128), ib_write_lat,
# ib_send_lat (2 B), perftest's default sizes, against `nvpeer bench` with the same size,
# iterations and depth. Prints both numbers and the ratio nvpeer/perftest (bandwidth: >= 1.0 is
# as good; latency: <= 1.0 is as good). Nothing is asserted on the numbers: TCG timing is
# noisy. Results also go to $NVPEER_OUT/bench-rdma.txt. Run: tests/run-bench-rdma.sh
. "$(dirname "$0")/lib.sh"
nvpeer=$REPO/userspace/target/release/nvpeer
work=$(mktemp -d)
BW_ITERS=${BENCH_RDMA_BW_ITERS:-400}
LAT_ITERS=${BENCH_RDMA_LAT_ITERS:-300}
expect "modprobe rdma_rxe" modprobe rdma_rxe
ip link add nvpeer0 type dummy && ip link set nvpeer0 up
expect "rdma link add rxe0" rdma link add rxe0 type rxe netdev nvpeer0

# perftest TOOL ARGS...: server and client on rxe0 (GID 0), the client's result line.
perftest() {
    local tool=$1; shift
    "$tool" -d rxe0 -x 0 "$@" >"$work/srv.txt" 2>&1 &
    local srv=$!
    sleep 1
    "$tool" -d rxe0 -x 0 "$@" 127.0.0.1 >"$work/$tool.txt" 2>&1
    wait $srv
    grep -E '^ *[0-9]+ +[0-9]+ ' "$work/$tool.txt" | tail -n1
}
# ours NAME ARGS...: nvpeer bench --json into $work/NAME.json.
ours() { local n=$1; shift; "$nvpeer" bench -d rxe0 -x 0 --json "$@" >"$work/$n.json" 2>"$work/$n.err" || cat "$work/$n.err"; }
q() { python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$work/$1.json" "$2"; }

res=$NVPEER_OUT/bench-rdma.txt
{
    echo "nvpeer bench vs perftest, Soft-RoCE rxe0 in a QEMU TCG guest (emulated CPU: absolute numbers are meaningless, ratios only)"
    printf '%-14s %-10s %-22s %12s %12s %8s\n' test size metric perftest nvpeer ratio
} >"$res"
row() { printf '%-14s %-10s %-22s %12.3f %12.3f %8.3f\n' "$1" "$2" "$3" "$4" "$5" "$(python3 -c "print($5 / $4 if $4 else 0)")" >>"$res"; }

for t in write read; do
    line=$(perftest "ib_${t}_bw" -s 65536 -n "$BW_ITERS" -t 128)
    pavg=$(awk '{print $4}' <<<"$line")
    ours "bw-$t" --op "$t" -s 65536 -n "$BW_ITERS" -t 128
    oavg=$(q "bw-$t" "r['rows'][0]['bandwidth']['avg_mbytes_per_s']")
    row "ib_${t}_bw" 65536 "BW average [MB/s]" "$pavg" "$oavg"
done
for t in write send; do
    line=$(perftest "ib_${t}_lat" -s 2 -n "$LAT_ITERS")
    ptyp=$(awk '{print $5}' <<<"$line"); pavg=$(awk '{print $6}' <<<"$line")
    ours "lat-$t" --op "$t" --lat -s 2 -n "$LAT_ITERS"
    row "ib_${t}_lat" 2 "t_typical [us]" "$ptyp" "$(q "lat-$t" "r['rows'][0]['latency']['median_us']")"
    row "ib_${t}_lat" 2 "t_avg [us]" "$pavg" "$(q "lat-$t" "r['rows'][0]['latency']['avg_us']")"
done
cat "$res"
ok "benchmark ran (numbers above; not asserted)"
rdma link delete rxe0; ip link del nvpeer0
rm -rf "$work"
finish
