#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# `nvpeer stats --format prometheus` / `--textfile DIR` (issue 16, item 2; issue 37: pinned bytes
# per GPU next to BAR1, on a copy of the pix fixture with the module's per-GPU totals): every fixture tree's
# output passes Debian's `promtool check metrics`, has one nvpeer_check_status series per check
# of `nvpeer check --json` and the paths per GPU-NIC pair with the verdict (issue 35), and bad
# usage is one line and exit 2; then the textfile of the ready
# fixture is scraped from a real prometheus-node-exporter (textfile collector only) on loopback
# and every nvpeer_ series must arrive with its value. The comparison is run once more with a
# planted series that is not in the file, which it must report as missing.
# Needs the built CLI (userspace/target/release/nvpeer, or $NVPEER_BIN) and the Debian packages
# prometheus (promtool) and prometheus-node-exporter (tests/setup/deps.sh).
# shellcheck disable=SC2015  # `a && b || fail`: fail is what should run when either fails
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin=${NVPEER_BIN:-$repo/userspace/target/release/nvpeer}
fixtures=$repo/tests/fixtures
promtool=${PROMTOOL:-/usr/bin/promtool}
exporter=${NODE_EXPORTER:-/usr/bin/prometheus-node-exporter}
fail() { echo "test-metrics: $*" >&2; exit 1; }
tmp=$(mktemp -d)
exporter_pid=
cleanup() {
    if [ -n "$exporter_pid" ]; then
        kill "$exporter_pid" 2>/dev/null
        wait "$exporter_pid" 2>/dev/null
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
for tool in "$bin" "$promtool" "$exporter"; do
    [ -x "$tool" ] || fail "$tool is missing (build the CLI; apt-get install prometheus prometheus-node-exporter)"
done
on() { local f=$1; shift; "$bin" --sysfs-root "$fixtures/$f/sys" --procfs-root "$fixtures/$f/proc" "$@"; }
no_panic() { ! grep -q 'panicked' "$1" || fail "$2 panicked: $(cat "$1")"; }
# one_line_exit2 WHAT CMD...: the command must exit 2 with exactly one line on stderr.
one_line_exit2() {
    local what=$1; shift
    "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
    no_panic "$tmp/err" "$what"
    [ $rc -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "$what: exit $rc, stderr '$(cat "$tmp/err")' (want exit 2, one line)"
}

# 1. Every fixture: promtool accepts the exposition, one check series per check, no timestamps.
n=0
for dir in "$fixtures"/*/sys; do
    f=$(basename "$(dirname "$dir")")
    on "$f" stats --format prometheus >"$tmp/$f.prom" 2>"$tmp/$f.err"; rc=$?
    no_panic "$tmp/$f.err" "stats --format prometheus on $f"
    if [ "$f" = malformed ]; then
        # Unreadable counters: one line naming the file, exit 2, the rest still written.
        [ $rc -eq 2 ] && [ "$(wc -l <"$tmp/$f.err")" -eq 1 ] && grep -q 'registrations: unexpected content' "$tmp/$f.err" \
            || fail "malformed: exit $rc, '$(cat "$tmp/$f.err")'"
        grep -qx 'nvpeer_stats_readable 0' "$tmp/$f.prom" || fail "malformed: no nvpeer_stats_readable 0"
    else
        [ $rc -eq 0 ] || fail "stats --format prometheus on $f exited $rc: $(cat "$tmp/$f.err")"
    fi
    "$promtool" check metrics <"$tmp/$f.prom" >"$tmp/promtool.out" 2>&1 \
        || fail "promtool check metrics rejects $f: $(cat "$tmp/promtool.out")"
    on "$f" check --json >"$tmp/$f.json" 2>/dev/null
    python3 - "$tmp/$f.prom" "$tmp/$f.json" <<'EOF' || fail "the exposition of $f does not match its checks"
import json, re, sys
text = open(sys.argv[1]).read()
report = json.load(open(sys.argv[2]))
sample = re.compile(r'^(nvpeer_[a-zA-Z0-9_]*)(\{.*\})? ([0-9]+)$')
series = []
for line in text.splitlines():
    if line.startswith("#"):
        continue
    m = sample.match(line)
    assert m, f"not a sample without timestamp: {line!r}"
    series.append((m.group(1), m.group(2) or "", int(m.group(3))))
want = {c["id"]: {"ok": 0, "info": 0, "warn": 1, "fail": 2, "unknown": 3}[c["status"]] for c in report["checks"]}
got = {}
for name, labels, value in series:
    if name == "nvpeer_check_status":
        got[re.fullmatch(r'\{check="(.*)"\}', labels).group(1)] = value
assert got == want, (got, want)
assert sum(1 for s in series if s[0] == "nvpeer_info") >= 1
assert len(set(s[:2] for s in series)) == len(series), "duplicate series"
assert ("nvpeer_ready", "", int(report["ready"])) in series
EOF
    n=$((n + 1))
done
[ "$n" -ge 8 ] || fail "only $n fixtures"
grep -qx 'nvpeer_module_registrations_total 12' "$tmp/pix.prom" || fail "pix: no registrations counter"
grep -q '^nvpeer_info{implementation="nvpeer",module="nvidia_peermem",version="0.1.0",core="5x-unmaps",clients="",' "$tmp/doca.prom" \
    || fail "doca: nvpeer_info does not name the detected core: $(grep '^nvpeer_info' "$tmp/doca.prom")"
grep -q '^nvpeer_memory_peers_reg_bytes_total{client="nv_mem"} ' "$tmp/pix.prom" || fail "pix: no memory_peers counter per client"
grep -q '^nvpeer_gpu_bar1_bytes{gpu="0",pci_bus_id="00000000:03:00.0"} ' "$tmp/pix.prom" || fail "pix: no per-GPU series with DCGM's labels"
grep -q '^nvpeer_rdma_port_active{device="mlx5_0",port="1"} 1$' "$tmp/pix.prom" || fail "pix: no per-device series with node_exporter's labels"
# The paths per pair and the verdict (issue 35).
grep -qx 'nvpeer_gdr_path{gpu="0",device="mlx5_0",path="dmabuf"} 1' "$tmp/inbox-dmabuf.prom" \
    && grep -qx 'nvpeer_gdr_path{gpu="0",device="mlx5_0",path="peer_memory"} 0' "$tmp/inbox-dmabuf.prom" \
    || fail "inbox-dmabuf: nvpeer_gdr_path is not dmabuf 1, peer_memory 0: $(grep '^nvpeer_gdr_path' "$tmp/inbox-dmabuf.prom")"
grep -qx 'nvpeer_verdict_info{state="ready",blocking="",paths="dmabuf"} 1' "$tmp/inbox-dmabuf.prom" || fail "inbox-dmabuf: no verdict series"
grep -qx 'nvpeer_gdr_path{gpu="0",device="rdmap83s0",path="efa"} 1' "$tmp/efa.prom" || fail "efa: no efa path series"
grep -qx 'nvpeer_verdict_info{state="not_ready",blocking="paths",paths=""} 1' "$tmp/topo-refused.prom" \
    || fail "topo-refused: verdict series: $(grep '^nvpeer_verdict_info' "$tmp/topo-refused.prom")"
! grep -q 'path="efa"' "$tmp/pix.prom" || fail "pix has no EFA device, yet an efa path series"
# Pinned bytes per GPU next to BAR1 (issue 37): the module's nvpeer/gpus/<UUID>/pinned_bytes, the
# UUID mapped to its PCI function through /proc/driver/nvidia/gpus/*/information.
mkdir -p "$tmp/gpu"
cp -a "$fixtures/pix/sys" "$fixtures/pix/proc" "$tmp/gpu/"
uuid=GPU-d09b8d4e-daef-237f-dd2d-1f194bd911ab
g=$tmp/gpu/sys/module/nvidia_peermem/nvpeer/gpus/$uuid
mkdir -p "$g" "$tmp/gpu/proc/driver/nvidia/gpus/0000:03:00.0"
echo 4194304 >"$g/pinned_bytes"; echo 2 >"$g/pins"; echo 3 >"$g/registrations"
printf 'GPU UUID: \t %s\nBus Location: \t 0000:03:00.0\n' "$uuid" >"$tmp/gpu/proc/driver/nvidia/gpus/0000:03:00.0/information"
"$bin" --sysfs-root "$tmp/gpu/sys" --procfs-root "$tmp/gpu/proc" stats --format prometheus >"$tmp/gpu.prom" 2>"$tmp/gpu.err" \
    || fail "stats --format prometheus with per-GPU totals: $(cat "$tmp/gpu.err")"
"$promtool" check metrics <"$tmp/gpu.prom" >"$tmp/promtool.out" 2>&1 || fail "promtool rejects the per-GPU series: $(cat "$tmp/promtool.out")"
grep -qx "nvpeer_gpu_pinned_bytes{gpu=\"0\",pci_bus_id=\"00000000:03:00.0\",UUID=\"$uuid\"} 4194304" "$tmp/gpu.prom" \
    || fail "no nvpeer_gpu_pinned_bytes with DCGM's labels: $(grep pinned "$tmp/gpu.prom")"
grep -q '^nvpeer_gpu_bar1_bytes{gpu="0",pci_bus_id="00000000:03:00.0"} ' "$tmp/gpu.prom" || fail "no BAR1 series beside it"
# The checker is not blind: a timestamp and a duplicate TYPE are rejected by promtool.
sed 's/^nvpeer_ready 1$/nvpeer_ready 1 1700000000000/' "$tmp/pix.prom" >"$tmp/bad.prom"
printf '# TYPE nvpeer_ready gauge\n' >>"$tmp/bad.prom"
! "$promtool" check metrics <"$tmp/bad.prom" >/dev/null 2>&1 || fail "promtool accepted a broken exposition"
# The table and JSON stay as they were.
cmp -s <(on pix stats) <(on pix stats --format table) || fail "stats --format table differs from stats"
on pix stats --format json | python3 -c 'import json,sys; s=json.load(sys.stdin); assert s["schema"]=="nvpeer.stats/1"' \
    || fail "stats --format json"

# 2. Bad usage and unwritable directories: one line, exit 2, nothing left behind.
one_line_exit2 "--format bogus" on pix stats --format bogus
grep -q 'unknown --format "bogus"' "$tmp/err" || fail "--format bogus: $(cat "$tmp/err")"
one_line_exit2 "--json --format prometheus" on pix stats --json --format prometheus
one_line_exit2 "--textfile --watch" on pix stats --textfile "$tmp" --watch 1
one_line_exit2 "--textfile --format table" on pix stats --textfile "$tmp" --format table
one_line_exit2 "--textfile missing dir" on pix stats --textfile "$tmp/missing"
grep -q "^nvpeer stats: --textfile $tmp/missing: No such file or directory" "$tmp/err" || fail "missing dir: $(cat "$tmp/err")"
[ ! -e "$tmp/missing" ] || fail "--textfile created the missing directory"
: >"$tmp/plainfile"
one_line_exit2 "--textfile on a file" on pix stats --textfile "$tmp/plainfile"
grep -q 'not a directory' "$tmp/err" || fail "--textfile on a file: $(cat "$tmp/err")"
mkdir -p "$tmp/blocked/nvpeer.prom/inside"      # the rename cannot replace a non-empty directory
one_line_exit2 "--textfile, rename blocked" on pix stats --textfile "$tmp/blocked"
[ "$(ls -A "$tmp/blocked")" = nvpeer.prom ] || fail "temporary file left behind: $(ls -A "$tmp/blocked")"
if [ "$(id -u)" -ne 0 ]; then
    mkdir "$tmp/ro" && chmod 555 "$tmp/ro"
    one_line_exit2 "--textfile unwritable" on pix stats --textfile "$tmp/ro"
    [ -z "$(ls -A "$tmp/ro")" ] || fail "unwritable dir: left $(ls -A "$tmp/ro")"
fi

# 3. The textfile, atomically replaced, through a real node_exporter.
mkdir "$tmp/textfile"
on doca stats --textfile "$tmp/textfile" || fail "stats --textfile (first write) exited $?"
on pix stats --textfile "$tmp/textfile" || fail "stats --textfile exited $?"
[ "$(ls -A "$tmp/textfile")" = nvpeer.prom ] || fail "textfile dir holds $(ls -A "$tmp/textfile")"
cmp -s "$tmp/textfile/nvpeer.prom" "$tmp/pix.prom" || fail "--textfile differs from --format prometheus"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$exporter" --web.listen-address="127.0.0.1:$port" --collector.disable-defaults --collector.textfile \
    --collector.textfile.directory="$tmp/textfile" >"$tmp/exporter.log" 2>&1 &
exporter_pid=$!
python3 - "http://127.0.0.1:$port/metrics" "$tmp/scrape.txt" <<'EOF' || fail "no scrape from node_exporter: $(tail -n5 "$tmp/exporter.log")"
import sys, time, urllib.request
for _ in range(100):
    try:
        body = urllib.request.urlopen(sys.argv[1], timeout=2).read()
        open(sys.argv[2], "wb").write(body)
        sys.exit(0)
    except OSError:
        time.sleep(0.1)
sys.exit(1)
EOF
kill "$exporter_pid"; wait "$exporter_pid" 2>/dev/null; exporter_pid=

# compare FILE SCRAPE [PLANTED]: every sample of FILE (and PLANTED) is in SCRAPE with its value;
# node_exporter rewrites the label order, so series are compared as (name, label set).
compare() {
    python3 - "$@" <<'EOF'
import re, sys
def samples(text):
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$', line)
        assert m, line
        labels = frozenset(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out
want = samples(open(sys.argv[1]).read() + "".join(a + "\n" for a in sys.argv[3:]))
got = samples(open(sys.argv[2]).read())
assert got.get(("node_textfile_scrape_error", frozenset())) == 0, "node_textfile_scrape_error is not 0"
missing = [f"{n}{sorted(l)} {v}" for (n, l), v in want.items() if got.get((n, l)) != v]
if missing:
    print("missing or different in the scrape:", *missing, sep="\n  ", file=sys.stderr)
    sys.exit(1)
print(f"{len(want)} nvpeer series scraped")
EOF
}
compare "$tmp/textfile/nvpeer.prom" "$tmp/scrape.txt" || fail "node_exporter did not serve every nvpeer series"
! compare "$tmp/textfile/nvpeer.prom" "$tmp/scrape.txt" 'nvpeer_planted_series{device="mlx9_9"} 1' 2>/dev/null \
    || fail "the comparison did not notice a missing series"
! compare "$tmp/textfile/nvpeer.prom" "$tmp/scrape.txt" 'nvpeer_ready 0' 2>/dev/null \
    || fail "the comparison did not notice a wrong value"
echo "test-metrics: ok ($n fixtures through promtool; textfile scraped from node_exporter)"
