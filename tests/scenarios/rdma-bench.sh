# SPDX-License-Identifier: GPL-2.0
# `nvpeer bench` over Soft-RoCE in the VM: every operation (RDMA write, RDMA read, send,
# write-with-immediate) moves verified data at 8 B, 4 KiB and 1 MiB in loopback on one rxe
# device, in bandwidth and latency mode; the output formats; the server/client mode across two
# network namespaces (veth pair, one rxe device in each); and the failures: a server killed
# mid-transfer, a wrong device, a malformed argument: one clear line, non-zero exit, no panic.
# Bidirectional runs (-b: every op at 8 B, 4 KiB, 1 MiB, both directions' bytes verified) and
# connections through librdmacm (--rdma-cm), in loopback and across the namespaces. `--plot`: the
# `-a --compare-staged` sweep drawn as SVG (plot_check.py reads it back).
# Run: tests/vm/run.sh rdma-bench
. "$(dirname "$0")/lib.sh"
nvpeer=$REPO/userspace/target/release/nvpeer
work=$(mktemp -d)
[ -x "$nvpeer" ] || { not_ok "$nvpeer is missing (cargo build --release)"; finish; exit 1; }

# run NAME ARGS...: nvpeer ARGS into $work/NAME.{out,err,rc}; a panic is a failure.
run() { local name=$1; shift; runx "$name" "$nvpeer" "$@"; }
# runx NAME COMMAND...: the same for a whole command line.
runx() {
    local name=$1; shift
    "$@" >"$work/$name.out" 2>"$work/$name.err"
    echo $? >"$work/$name.rc"
    if grep -q panicked "$work/$name.err"; then not_ok "$name panicked: $(cat "$work/$name.err")"; fi
}
rc() { cat "$work/$1.rc"; }
j() { python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$work/$1.out" "$2" 2>&1; }

expect "modprobe rdma_rxe" modprobe rdma_rxe
ip link add nvpeer0 type dummy && ip link set nvpeer0 up
expect "rdma link add rxe0 (Soft-RoCE over a dummy netdev)" rdma link add rxe0 type rxe netdev nvpeer0

# ---------------------------------------------------------------- loopback, every op x size
for op in write read send write-imm; do
    for size in 8 4096 1048576; do
        n=8; [ "$size" -eq 1048576 ] && n=3
        run "bw-$op-$size" bench -d rxe0 --op "$op" -s "$size" -n "$n" --validate --json
        expect_eq "[loopback $op $size B bw] exit 0" 0 "$(rc "bw-$op-$size")"
        expect_eq "[loopback $op $size B bw] every byte of $n messages verified" $((n * size)) "$(j "bw-$op-$size" "r['rows'][0]['verified_bytes']")"
    done
    for size in 8 4096 1048576; do
        n=5; [ "$size" -eq 1048576 ] && n=2
        run "lat-$op-$size" bench -d rxe0 --op "$op" -s "$size" -n "$n" --lat --validate --json
        expect_eq "[loopback $op $size B lat] exit 0" 0 "$(rc "lat-$op-$size")"
        expect_eq "[loopback $op $size B lat] every byte of $n messages verified" $((n * size)) "$(j "lat-$op-$size" "r['rows'][0]['verified_bytes']")"
        expect "[loopback $op $size B lat] min <= median <= p99 <= max, > 0" test "$(j "lat-$op-$size" "(lambda l: 0 < l['min_us'] <= l['median_us'] <= l['p99_us'] <= l['max_us'])(r['rows'][0]['latency'])")" = True
    done
done
cat "$work/lat-send-8.err"
expect_eq "[json] schema" nvpeer.bench/1 "$(j bw-write-8 "r['schema']")"
expect_eq "[json] memory and registration labelled on both sides" "host|ibv_reg_mr (pinned host pages)|host|ibv_reg_mr (pinned host pages)" "$(j bw-write-8 "'|'.join([r['mem'], r['reg'], r['peer_mem'], r['peer_reg']])")"

# The --all sweep: 23 sizes, 2 B .. 8 MiB, each message verified.
run sweep bench -d rxe0 --op write -a -n 1 --validate --json
expect_eq "[--all] exit 0" 0 "$(rc sweep)"
expect_eq "[--all] 23 sizes from 2 B to 8 MiB" "23 2 8388608" "$(j sweep "len(r['rows']), r['rows'][0]['size'], r['rows'][-1]['size']" | tr -d "(),")"
expect_eq "[--all] every byte verified" $(( (16 << 20) - 2 )) "$(j sweep "sum(x['verified_bytes'] for x in r['rows'])")"
expect "[--all] no progress output through a pipe" test ! -s "$work/sweep.err"

# Unvalidated bandwidth with a deep queue, several sizes, perftest's layout and our table.
run bw-sweep bench -d rxe0 --op write -s 65536 -n 200 -t 64 --format perftest
expect_eq "[perftest format] exit 0" 0 "$(rc bw-sweep)"
expect "[perftest format] perftest's bandwidth header" grep -q '#bytes     #iterations    BW peak\[MB/sec\]    BW average\[MB/sec\]   MsgRate\[Mpps\]' "$work/bw-sweep.out"
expect "[perftest format] a 65536-byte row of 200 iterations" grep -qE '^ 65536[[:space:]]+200[[:space:]]+[0-9.]+[[:space:]]+[0-9.]+[[:space:]]+[0-9.]+$' "$work/bw-sweep.out"
cat "$work/bw-sweep.out"
run lat-table bench -d rxe0 --op send --lat -n 20
expect_eq "[human latency table] exit 0" 0 "$(rc lat-table)"
expect "[human latency table] columns" grep -qE 'size +iters +min us +median us +avg us +p99 us +p99.9 us +max us' "$work/lat-table.out"
cat "$work/lat-table.out"
run staged bench -d rxe0 --op write -s 4096 -n 20 --compare-staged
expect_eq "[compare-staged] exit 0" 0 "$(rc staged)"
expect "[compare-staged] one-line recommendation" grep -qE '^recommendation: (use the direct path for messages of|direct path wins|staged path wins)' "$work/staged.out"
cat "$work/staged.out"
# --plot: bandwidth and time per message against size, direct and staged (host memory here),
# drawn as SVG and kept with the run's logs ($NVPEER_OUT); the crossover is marked where the
# recommendation names one.
plot=$NVPEER_OUT/rdma-bench-plot.svg
# One message in flight (-t 1): deeper queues of 8 MiB writes stalled rxe under TCG for 20 s once.
run plot bench -d rxe0 --op write -a -n 4 -t 1 --compare-staged --plot "$plot" --json
cat "$work/plot.err"
expect_eq "[--plot] exit 0" 0 "$(rc plot)"
expect "[--plot] the SVG shows the axes, direct and staged in both panels, the crossover as recommended" \
    python3 "$REPO/tests/scenarios/plot_check.py" "$plot" "$work/plot.out"
cat /tmp/expect.out
run plot-bad bench -d rxe0 -n 2 --plot /nonexistent/dir/x.svg
expect_eq "[--plot into a missing directory] exit 2" 2 "$(rc plot-bad)"
expect "[--plot into a missing directory] one line naming the file" test "$(wc -l <"$work/plot-bad.err")" = 1 -a -n "$(grep '^nvpeer bench: --plot /nonexistent/dir/x.svg: ' "$work/plot-bad.err")"

# Several QPs: messages spread round-robin, each receive matched to its message.
run qps-send bench -d rxe0 --op send -q 4 -s 4096 -n 16 --validate --json
expect_eq "[4 QPs send] exit 0" 0 "$(rc qps-send)"
expect_eq "[4 QPs send] 4 QPs, 16 x 4 KiB verified" "4 65536" "$(j qps-send "r['qps'], r['rows'][0]['verified_bytes']" | tr -d "(),")"
run qps-imm bench -d rxe0 --op write-imm -q 3 -s 1024 -n 90 -t 12 --json
expect_eq "[3 QPs write-imm, 12 in flight, immediates checked] exit 0" 0 "$(rc qps-imm)"
cat "$work/qps-imm.err"
run qps-lat bench -d rxe0 --op send -q 2 --lat -n 2
expect_eq "[--qps with --lat] exit 2" 2 "$(rc qps-lat)"
expect "[--qps with --lat] says why" grep -q 'for bandwidth runs' "$work/qps-lat.err"
# --duration: batches of -n until the time is up.
run dur bench -d rxe0 --op write -s 4096 -n 10 -D 2 --json
expect_eq "[-D 2] exit 0" 0 "$(rc dur)"
expect "[-D 2] a whole number of batches, at least one" test "$(j dur "(lambda n: n >= 10 and n % 10 == 0)(r['rows'][0]['iterations'])")" = True

# ---------------------------------------------------------------- bidirectional (-b)
for op in write read send write-imm; do
    for size in 8 4096 1048576; do
        n=6; [ "$size" -eq 1048576 ] && n=2
        run "bi-$op-$size" bench -d rxe0 -b --op "$op" -s "$size" -n "$n" --validate --json
        expect_eq "[loopback -b $op $size B] exit 0" 0 "$(rc "bi-$op-$size")"
        expect_eq "[loopback -b $op $size B] both directions verified: client, server, total" "$((n * size)) $((n * size)) $((2 * n * size))" "$(j "bi-$op-$size" "' '.join(str(x) for x in [d['verified_bytes'] for d in r['rows'][0]['directions']] + [r['rows'][0]['verified_bytes']])")"
    done
done
cat "$work/bi-send-4096.err"
expect_eq "[-b json] bidirectional, requesters, sum of the directions" "True client+server True" "$(j bi-write-4096 "r['bidirectional'], '+'.join(d['requester'] for d in r['rows'][0]['directions']), abs(r['rows'][0]['bandwidth']['avg_gbps'] - sum(d['bandwidth']['avg_gbps'] for d in r['rows'][0]['directions'])) < 1e-9" | tr -d "(),'")"
run bi-table bench -d rxe0 -b --op write -s 65536 -n 100
expect_eq "[-b human table] exit 0" 0 "$(rc bi-table)"
expect "[-b human table] a line per direction" grep -qE 'by the server$' "$work/bi-table.out"
cat "$work/bi-table.out"
run bi-lat bench -d rxe0 -b --lat -n 2
expect_eq "[-b with --lat] exit 2" 2 "$(rc bi-lat)"
expect "[-b with --lat] one line saying why" test "$(wc -l <"$work/bi-lat.err")" = 1 -a -n "$(grep 'for bandwidth runs' "$work/bi-lat.err")"

# ---------------------------------------------------------------- --rdma-cm
# Loopback through the CM binds to the device's IPv4 address.
ip addr add 10.78.0.1/24 dev nvpeer0
for op in write send; do
    run "cm-$op" bench -d rxe0 --rdma-cm --op "$op" -s 4096 -n 6 --validate --json
    expect_eq "[loopback --rdma-cm $op] exit 0" 0 "$(rc "cm-$op")"
    expect_eq "[loopback --rdma-cm $op] 6 x 4 KiB verified" 24576 "$(j "cm-$op" "r['rows'][0]['verified_bytes']")"
done
cat "$work/cm-send.err"
runx no-cm unshare -m sh -c "mount --bind /dev/null $(realpath "$(ldconfig -p | awk '/librdmacm.so.1 /{print $NF; exit}')") && exec $nvpeer bench -d rxe0 --rdma-cm -n 2"
expect_eq "[--rdma-cm without librdmacm] exit 2" 2 "$(rc no-cm)"
expect "[--rdma-cm without librdmacm] one line saying so" test "$(wc -l <"$work/no-cm.err")" = 1 -a -n "$(grep '^nvpeer bench: librdmacm unavailable' "$work/no-cm.err")"
cat "$work/no-cm.err"
run cm-plain bench -d rxe0 -n 2 -s 64 --json
expect_eq "[without --rdma-cm librdmacm is not needed] exit 0" 0 "$(rc cm-plain)"

# ---------------------------------------------------------------- failures
run bad-dev bench -d nosuchdev -n 2
expect_eq "[wrong device] exit 2" 2 "$(rc bad-dev)"
expect "[wrong device] one line naming the devices there are" test "$(wc -l <"$work/bad-dev.err")" = 1 -a -n "$(grep '^nvpeer bench: no RDMA device: "nosuchdev" not found; libibverbs lists: .*rxe0' "$work/bad-dev.err")"
run bad-size bench -d rxe0 -s 12Q
expect_eq "[malformed size] exit 2 (usage)" 2 "$(rc bad-size)"
runx no-verbs env NVPEER_LIBIBVERBS=libibverbs-absent.so.1 "$nvpeer" bench -d rxe0 -n 2
expect_eq "[absent libibverbs] exit 2" 2 "$(rc no-verbs)"
expect "[absent libibverbs] says so" grep -q 'libibverbs unavailable: cannot load libibverbs-absent.so.1' "$work/no-verbs.err"
run no-cuda bench -d rxe0 --mem cuda -n 2
expect_eq "[no libcuda] exit 2" 2 "$(rc no-cuda)"
expect "[no libcuda] says so" grep -q 'CUDA: cannot load libcuda.so' "$work/no-cuda.err"

# ---------------------------------------------------------------- two namespaces
ip netns add nva && ip netns add nvb
ip link add nvva type veth peer name nvvb
ip link set nvva netns nva && ip link set nvvb netns nvb
ip -n nva addr add 10.77.0.1/24 dev nvva && ip -n nvb addr add 10.77.0.2/24 dev nvvb
ip -n nva link set nvva up && ip -n nvb link set nvvb up
ip -n nva link set lo up && ip -n nvb link set lo up
expect "rdma link add rxea in namespace nva" ip netns exec nva rdma link add rxea type rxe netdev nvva
expect "rdma link add rxeb in namespace nvb" ip netns exec nvb rdma link add rxeb type rxe netdev nvvb
for op in write read send write-imm; do
    ip netns exec nvb "$nvpeer" bench --server -d rxeb >"$work/srv-$op.out" 2>"$work/srv-$op.err" &
    srv=$!
    runx "cli-$op" ip netns exec nva "$nvpeer" bench 10.77.0.2 -d rxea --op "$op" -s 4096 -n 6 --validate --json
    wait $srv; srv_rc=$?
    expect_eq "[netns $op] client exit 0" 0 "$(rc "cli-$op")"
    expect_eq "[netns $op] server exit 0" 0 "$srv_rc"
    expect_eq "[netns $op] 6 x 4 KiB verified" 24576 "$(j "cli-$op" "r['rows'][0]['verified_bytes']")"
    expect_eq "[netns $op] devices" "rxea rxeb" "$(j "cli-$op" "r['device'] + ' ' + r['peer_device']")"
done
cat "$work/cli-send.err" "$work/srv-send.err"

for op in write read send write-imm; do
    for size in 8 4096 1048576; do
        n=6; [ "$size" -eq 1048576 ] && n=2
        ip netns exec nvb "$nvpeer" bench --server -d rxeb >"$work/bsrv-$op-$size.out" 2>"$work/bsrv-$op-$size.err" &
        srv=$!
        runx "bcli-$op-$size" ip netns exec nva "$nvpeer" bench 10.77.0.2 -d rxea -b --op "$op" -s "$size" -n "$n" --validate --json
        wait $srv; srv_rc=$?
        expect_eq "[netns -b $op $size B] client and server exit 0" "0 0" "$(rc "bcli-$op-$size") $srv_rc"
        expect_eq "[netns -b $op $size B] both directions verified: client, server, total" "$((n * size)) $((n * size)) $((2 * n * size))" "$(j "bcli-$op-$size" "' '.join(str(x) for x in [d['verified_bytes'] for d in r['rows'][0]['directions']] + [r['rows'][0]['verified_bytes']])")"
    done
done
cat "$work/bcli-send-4096.err" "$work/bsrv-send-4096.err"
for op in write send; do
    ip netns exec nvb "$nvpeer" bench --server --rdma-cm -d rxeb >"$work/csrv-$op.out" 2>"$work/csrv-$op.err" &
    srv=$!
    runx "ccli-$op" ip netns exec nva "$nvpeer" bench 10.77.0.2 --rdma-cm -d rxea --op "$op" -s 65536 -n 6 --validate --json
    wait $srv; srv_rc=$?
    expect_eq "[netns --rdma-cm $op] client and server exit 0" "0 0" "$(rc "ccli-$op") $srv_rc"
    expect_eq "[netns --rdma-cm $op] 6 x 64 KiB verified" 393216 "$(j "ccli-$op" "r['rows'][0]['verified_bytes']")"
done
cat "$work/ccli-send.err" "$work/csrv-send.err"

# A server killed mid-transfer: the client says so in one line and exits 2.
# server_killed NAME LABEL CLIENT-ARGS...: runs the client against a fresh server, kills the
# server after 8 s and checks how the client ends.
server_killed() {
    local name=$1 label=$2 srv cli cli_rc t0
    shift 2
    ip netns exec nvb "$nvpeer" bench --server -d rxeb >"$work/srv-$name.out" 2>"$work/srv-$name.err" &
    srv=$!
    ip netns exec nva "$nvpeer" bench 10.77.0.2 -d rxea "$@" >"$work/$name.out" 2>"$work/$name.err" &
    cli=$!
    sleep 8
    kill -9 $srv 2>/dev/null
    wait $srv 2>/dev/null
    t0=$SECONDS
    wait $cli; cli_rc=$?
    expect_eq "[$label] client exit 2" 2 "$cli_rc"
    expect "[$label] noticed within 15 s" test $((SECONDS - t0)) -lt 15
    expect "[$label] one line naming the peer" test "$(wc -l <"$work/$name.err")" = 1 -a -n "$(grep -E '^nvpeer bench: peer: ' "$work/$name.err")"
    expect "[$label] no panic" bash -c "! grep -q panicked '$work/$name.err'"
    cat "$work/$name.err"
}
server_killed kill "server killed" --op send --lat -s 64 -n 1000000
# The same during a bidirectional run: the client is requester and responder at once.
server_killed bkill "server killed, -b" -b --op write -s 4096 -n 100000000

ip netns exec nva rdma link delete rxea; ip netns exec nvb rdma link delete rxeb
ip netns del nva; ip netns del nvb
rdma link delete rxe0; ip link del nvpeer0
rm -rf "$work"
finish
