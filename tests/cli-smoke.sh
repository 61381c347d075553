#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# The built CLI: --version and --help, usage errors exit 2, `check` on this bare machine fails (1)
# and explains each missing piece, `topo` gives each fixture's expected matrix, `stats` and the
# JSON schemas, no ANSI codes through a pipe, no panic anywhere.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=$repo/userspace/target/release/nvpeer
fixtures=$repo/tests/fixtures
fail() { echo "cli-smoke: $*" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# on FIXTURE ARGS...: the CLI against a fixture tree.
on() { local f=$1; shift; "$bin" --sysfs-root "$fixtures/$f/sys" --procfs-root "$fixtures/$f/proc" "$@"; }
no_panic() { ! grep -q 'panicked' "$1" || fail "$2 panicked: $(cat "$1")"; }

"$bin" --version | grep -qE '^nvpeer [0-9]+\.[0-9]+\.[0-9]+$' || fail "--version"
help=$("$bin" --help)
for cmd in check topo stats bench selftest; do
    grep -q "^  $cmd" <<<"$help" || fail "--help does not list $cmd"
done
"$bin" no-such-command >/dev/null 2>&1; [ $? -eq 2 ] || fail "usage error must exit 2"
"$bin" stats --count 2 >/dev/null 2>&1; [ $? -eq 2 ] || fail "stats --count without --watch must exit 2"
"$bin" stats --watch 0 >/dev/null 2>&1; [ $? -eq 2 ] || fail "stats --watch 0 must exit 2"
# A mistyped root is an error (one line, exit 2), not an empty host.
for cmd in check topo stats bench selftest; do
    "$bin" --sysfs-root "$tmp/missing" $cmd >/dev/null 2>"$tmp/root.err"; rc=$?
    [ $rc -eq 2 ] && [ "$(wc -l <"$tmp/root.err")" -eq 1 ] && grep -q "^nvpeer: --sysfs-root $tmp/missing: No such file" "$tmp/root.err" \
        || fail "$cmd with a missing --sysfs-root: exit $rc, '$(cat "$tmp/root.err")'"
done
"$bin" --procfs-root /etc/hostname check >/dev/null 2>"$tmp/root.err"; rc=$?
[ $rc -eq 2 ] && grep -q "not a directory" "$tmp/root.err" || fail "--procfs-root on a file: exit $rc"

# This machine has no module, GPU or RDMA device: check must fail (1) and explain each piece.
"$bin" check >"$tmp/check.txt" 2>"$tmp/check.err"; rc=$?
no_panic "$tmp/check.err" "check"
[ $rc -eq 1 ] || fail "check on a bare host exited $rc, expected 1"
# A row that follows from a root cause is folded under it ("also from this cause: module
# (fail)"); --all prints every row on its own line.
"$bin" check --all >"$tmp/check-all.txt" 2>&1
for id in module nvidia_driver rdma_devices gpus; do
    grep -qE "^fail +$id " "$tmp/check-all.txt" || fail "check --all does not fail $id on a bare host"
done
tr '\n' ' ' <"$tmp/check.txt" | tr -s ' ' | grep -q "also from this cause: [^:]*module (fail)" \
    || fail "check does not fold module under its cause on a bare host"
python3 - "$tmp/check.txt" <<'EOF' || fail "a warn or fail line of check has no fix line under it"
import sys
lines = open(sys.argv[1]).read().splitlines()
for i, line in enumerate(lines):
    if line.startswith(("warn ", "unknown ", "fail ")) and not line.split()[1].startswith("GPU"):
        # The row's block: its line and the indented lines under it (the text is wrapped).
        block = [line]
        for more in lines[i + 1:]:
            if not more.startswith(" "):
                break
            block.append(more)
        assert any("fix: " in b for b in block[1:]) or "fix: " in line, line
assert all(len(l) <= 100 for l in lines), [l for l in lines if len(l) > 100]
EOF
! grep -q $'\x1b' "$tmp/check.txt" || fail "check wrote ANSI codes into a pipe"
grep -qE '^rows: [0-9]+ ok, [0-9]+ info, [0-9]+ warn, [0-9]+ unknown, [0-9]+ fail' "$tmp/check.txt" || fail "check has no counts line"
[ "$(tail -n1 "$tmp/check.txt")" = "not ready: gpus (none)" ] || fail "check's last line is not its verdict"
"$bin" check --json >"$tmp/check.json"; [ $? -eq 1 ] || fail "check --json on a bare host must exit 1"
python3 - "$tmp/check.json" <<'EOF' || fail "check --json is not the documented JSON"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["schema"] == "nvpeer.check/2" and r["ready"] is False and r["status"] == "fail"
assert r["verdict"]["text"] == "not ready: gpus (none)" and r["pairs"] == [], r["verdict"]
for c in r["checks"]:
    assert set(c) >= {"id", "status", "detail"} and c["status"] in ("ok", "info", "warn", "unknown", "fail")
    assert c["status"] == "ok" or c["fix"]
for key in ("modules", "memory_peers", "nvidia", "nvidia_proc", "ib_core", "rdma_devices", "gpus", "pairs", "nccl", "ucx", "dmabuf"):
    assert key in r["facts"], key
EOF

# Fixtures: the ready host passes, two implementations fail, broken files are named.
on pix check >"$tmp/pix.txt" 2>&1 || fail "check on the ready fixture failed: $(cat "$tmp/pix.txt")"
on two-loaded check --json >"$tmp/two.json" 2>"$tmp/two.err"; rc=$?
no_panic "$tmp/two.err" "check two-loaded"
[ $rc -eq 1 ] || fail "check with two implementations exited $rc, expected 1"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); m=[c for c in r["checks"] if c["id"]=="module"][0]; assert m["status"]=="fail", m' "$tmp/two.json" \
    || fail "two implementations are not a module failure"
on malformed topo >/dev/null 2>"$tmp/bad.err"; rc=$?
no_panic "$tmp/bad.err" "topo malformed"
[ $rc -eq 2 ] && grep -q 'numa_node: unexpected content "zero"' "$tmp/bad.err" || fail "topo on a broken numa_node: rc $rc, $(cat "$tmp/bad.err")"
on malformed stats >/dev/null 2>"$tmp/bad.err"; rc=$?
no_panic "$tmp/bad.err" "stats malformed"
[ $rc -eq 2 ] && grep -q 'registrations: unexpected content "many"' "$tmp/bad.err" || fail "stats on a broken counter: rc $rc"
on malformed check >/dev/null 2>"$tmp/bad.err"
no_panic "$tmp/bad.err" "check malformed"

# topo: every fixture's matrix, and the JSON schema.
n=0
for matrix in "$fixtures"/*/expected-matrix; do
    f=$(basename "$(dirname "$matrix")")
    grep -qv '^#' "$matrix" || continue
    on "$f" topo --json >"$tmp/topo.json" || fail "topo on $f exited $?"
    python3 - "$tmp/topo.json" "$matrix" <<'EOF' || fail "topo on $f does not match $matrix"
import json, sys
t = json.load(open(sys.argv[1]))
assert t["schema"] == "nvpeer.topo/1"
got = sorted((l["gpu"], l["nic"], l["class"]) for l in t["links"])
want = sorted(tuple(l.split()) for l in open(sys.argv[2]) if l.strip() and not l.startswith("#"))
assert got == want, (got, want)
EOF
    on "$f" topo >"$tmp/topo.txt" || fail "topo (table) on $f"
    head -n1 "$tmp/topo.txt" | grep -q 'CPU Affinity' || fail "topo on $f has no matrix header"
    n=$((n + 1))
done
[ "$n" -ge 6 ] || fail "only $n fixtures with a matrix"
"$bin" topo >/dev/null 2>"$tmp/topo.err" || fail "topo on this machine exited $?"
no_panic "$tmp/topo.err" "topo"

# stats: JSON, a bounded watch, and a closed pipe.
on pix stats --json | python3 -c 'import json,sys; s=json.load(sys.stdin); assert s["schema"]=="nvpeer.stats/1" and s["counters"]["registrations"]==12' \
    || fail "stats --json"
[ "$(on pix stats --watch 1 --count 2 | grep -c '^Every 1s, refresh')" -eq 2 ] || fail "stats --watch 1 --count 2 did not refresh twice"
[ "$(on pix stats --watch 1 --count 2 --json | wc -l)" -eq 2 ] || fail "stats --watch --json is not one object per line"
timeout 10 bash -c "set -o pipefail; '$bin' --sysfs-root '$fixtures/pix/sys' stats --watch 1 2>'$tmp/pipe.err' | head -n1 >/dev/null"
rc=$?
[ $rc -eq 0 ] || fail "stats --watch into a closed pipe: rc $rc"
no_panic "$tmp/pipe.err" "stats --watch | head"
"$bin" stats >/dev/null 2>"$tmp/stats.err" || fail "stats on this machine exited $?"

# check --brief: one line (this bare machine: not ready, exit 1; the root causes only, `module`
# folded under nvidia_driver); nccl-log on a fixture log.
[ "$(on pix check --brief)" = "nvpeer: ready (dma-buf and peer memory)" ] || fail "check --brief on pix"
[ "$(on inbox-dmabuf check --brief)" = "nvpeer: ready (dma-buf)" ] || fail "check --brief on the dma-buf-only fixture"
"$bin" check --brief >"$tmp/brief.txt" 2>&1; rc=$?
[ $rc -eq 1 ] && [ "$(wc -l <"$tmp/brief.txt")" -eq 1 ] && grep -q '^nvpeer: not ready: gpus (none), nvidia_driver (not loaded)' "$tmp/brief.txt" \
    && ! grep -q 'module (' "$tmp/brief.txt" \
    || fail "check --brief on this machine: exit $rc, '$(cat "$tmp/brief.txt")'"
# Issue 36: a pod's process under an 8 MiB limit (the job-starters fixture's /proc/self is a
# containerd pod without CAP_IPC_LOCK): the 8 MiB and containerd's fix.
prlimit --memlock=8388608 "$bin" --sysfs-root "$fixtures/job-starters/sys" --procfs-root "$fixtures/job-starters/proc" \
    check --as-job >"$tmp/job.txt" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -qE '^fail +memlock .*--as-job: RLIMIT_MEMLOCK 8 MiB \(hard 8 MiB\)' "$tmp/job.txt" \
    && grep -q 'fix: containerd: `systemctl edit' "$tmp/job.txt" && [ "$(tail -n1 "$tmp/job.txt")" = "not ready: memlock (8 MiB)" ] \
    || fail "check --as-job under prlimit 8 MiB: exit $rc, $(cat "$tmp/job.txt")"
"$bin" nccl-log "$fixtures/nccl-logs/v2.18-all.log" | tail -n1 | grep -q 'GPU Direct RDMA used on all network connections' \
    || fail "nccl-log on v2.18-all.log"
echo "cli-smoke: ok"
