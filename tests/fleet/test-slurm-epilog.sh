#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# dist/slurm/prolog-nvpeer and epilog-nvpeer run as slurmd runs them: `env -i` with only Slurm's
# variables (SLURM_JOB_ID, SLURM_JOB_USER, SLURMD_NODENAME, SLURM_SCRIPT_CONTEXT, ...), plus
# NVPEER_SLURM_CONF standing in for /etc/default/nvpeer-slurm, and a PATH that finds nothing,
# so that any command not called by its absolute path fails. `nvpeer` is the real CLI (the JSON
# it parses is the real schema) reading a copy of the pix fixture whose live_contexts and
# pinned_bytes the test sets; `scontrol` is a fake that records its arguments. Asserts: no leak,
# no scontrol call; a leak that clears after a few reads (teardown lag), none; a leak that
# stays, exactly one drain with the reason (naming the holders when the module's records say);
# nvpeer missing, one clear log line and no retry loop; a shared node is judged only by the last
# job; a prolog problem never fails the job; a host without the module logs check's verdict (a
# dma-buf host: ready) and `who` says nothing is held there (exit 0); a module gone before `who`
# leaves the reason the counters alone.
# Needs the built CLI (userspace/target/release/nvpeer, or $NVPEER_BIN).
# shellcheck disable=SC2015  # `a && b || fail`: fail is what should run when either fails
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
real_bin=${NVPEER_BIN:-$repo/userspace/target/release/nvpeer}
prolog=$repo/dist/slurm/prolog-nvpeer
epilog=$repo/dist/slurm/epilog-nvpeer
fail() { echo "test-slurm-epilog: $*" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -x "$real_bin" ] || fail "$real_bin is missing (build the CLI first)"
[ -x "$prolog" ] && [ -x "$epilog" ] || fail "the prolog and epilog must be executable"

# The host: pix's module and memory_peers directories.
mkdir -p "$tmp/sys" "$tmp/proc"
cp -a "$repo/tests/fixtures/pix/sys/module" "$repo/tests/fixtures/pix/sys/kernel" "$tmp/sys/"
stats=$tmp/sys/module/nvidia_peermem/nvpeer/stats
set_counters() { printf '%s\n' "$1" >"$stats/live_contexts"; printf '%s\n' "$2" >"$stats/pinned_bytes"; }

# nvpeer: the real CLI on that tree. With $tmp/settle-after holding N, the Nth call and later
# first put the counters back to 0 (a teardown that lags the job); with $tmp/unload-at holding N,
# the Nth call first moves the module away (unloaded meanwhile). Bash builtins only (no PATH).
cat >"$tmp/nvpeer" <<EOF
#!/bin/bash
n=0
[[ -f $tmp/calls ]] && read -r n <"$tmp/calls"
n=\$((n + 1))
printf '%s\n' "\$n" >"$tmp/calls"
if [[ -f $tmp/settle-after ]]; then
    read -r after <"$tmp/settle-after"
    if ((n >= after)); then
        printf '0\n' >"$stats/live_contexts"
        printf '0\n' >"$stats/pinned_bytes"
    fi
fi
if [[ -f $tmp/unload-at ]]; then
    read -r at <"$tmp/unload-at"
    if ((n == at)); then
        /bin/mv "$tmp/sys/module/nvidia_peermem" "$tmp/sys/module/unloaded"
    fi
fi
exec "$real_bin" --sysfs-root "$tmp/sys" --procfs-root "$tmp/proc" "\$@"
EOF
cat >"$tmp/scontrol" <<EOF
#!/bin/bash
printf '%s\n' "\$*" >>"$tmp/scontrol.calls"
EOF
chmod +x "$tmp/nvpeer" "$tmp/scontrol"
conf=$tmp/nvpeer-slurm.conf
write_conf() {
    cat >"$conf" <<EOF
NVPEER=${1:-$tmp/nvpeer}
SCONTROL=$tmp/scontrol
STATE_DIR=$tmp/state
RETRY_INTERVAL=${2:-0.2}
LOGGER=
EOF
}
write_conf

# slurm CONTEXT SCRIPT JOB: the script as slurmd runs it, stderr into $tmp/log; returns its status.
slurm() {
    env -i PATH=/nonexistent/no-path SLURM_JOB_ID="$3" SLURM_JOBID="$3" SLURM_JOB_USER=alice SLURM_JOB_UID=1000 \
        SLURM_JOB_GID=1000 SLURM_JOB_PARTITION=gpu SLURM_CLUSTER_NAME=test SLURMD_NODENAME=node001 \
        SLURM_SCRIPT_CONTEXT="$1" SLURM_CONF=/etc/slurm/slurm.conf NVPEER_SLURM_CONF="$conf" \
        "$2" 2>>"$tmp/log"
    local rc=$?
    # A command called without its absolute path is not found without PATH.
    ! grep -q 'command not found' "$tmp/log" || fail "$(basename "$2") ran a command by name: $(cat "$tmp/log")"
    return $rc
}
reset() { rm -rf "$tmp/state" "$tmp/calls" "$tmp/settle-after" "$tmp/unload-at" "$tmp/scontrol.calls" "$tmp/log"; set_counters 0 0; }
calls() { [ -f "$tmp/calls" ] && cat "$tmp/calls" || echo 0; }
drains() { [ -f "$tmp/scontrol.calls" ] && wc -l <"$tmp/scontrol.calls" || echo 0; }
# job ID LIVE PINNED: prolog, the job leaves LIVE/PINNED behind, epilog; both must exit 0.
job() {
    slurm prolog_slurmd "$prolog" "$1" || fail "prolog of job $1 exited $?: $(cat "$tmp/log")"
    set_counters "$2" "$3"
    slurm epilog_slurmd "$epilog" "$1" || fail "epilog of job $1 exited $?: $(cat "$tmp/log")"
}

# 1. No leak: no scontrol call, the state goes away, nothing logged.
reset
set_counters 2 131072                  # another registration alive before the job: the baseline
job 101 2 131072
[ "$(drains)" -eq 0 ] || fail "no leak, yet scontrol ran: $(cat "$tmp/scontrol.calls")"
[ ! -e "$tmp/state/101" ] || fail "the epilog left its state behind"
[ ! -s "$tmp/log" ] || fail "no leak, yet a log: $(cat "$tmp/log")"
[ "$(calls)" -eq 2 ] || fail "no leak: nvpeer ran $(calls) times, want 2 (prolog, epilog once)"

# 2. Teardown lag: the counters come back on the third read of the epilog: no drain.
reset
echo 4 >"$tmp/settle-after"            # call 1 is the prolog's
job 102 3 196608
[ "$(drains)" -eq 0 ] || fail "a lagging teardown drained the node: $(cat "$tmp/scontrol.calls")"
[ "$(calls)" -eq 4 ] || fail "lag: nvpeer ran $(calls) times, want 4"

# 3. A leak that stays: exactly one drain, with the reason, after RETRIES reads; exit 0.
reset
start=$SECONDS
job 103 3 196608
took=$((SECONDS - start))
[ "$(drains)" -eq 1 ] || fail "a leak gave $(drains) scontrol calls, want 1"
want='update nodename=node001 state=drain reason=nvpeer: leak after job 103: live_contexts +3 pinned_bytes +196608'
[ "$(cat "$tmp/scontrol.calls")" = "$want" ] || fail "scontrol ran '$(cat "$tmp/scontrol.calls")', want '$want'"
[ "$(calls)" -eq 7 ] || fail "leak: nvpeer ran $(calls) times, want 7 (prolog, 5 epilog reads, who)"
[ "$took" -lt 10 ] || fail "the epilog took ${took}s"
[ "$(cat "$tmp/log")" = "nvpeer-epilog: drained node001: nvpeer: leak after job 103: live_contexts +3 pinned_bytes +196608" ] \
    || fail "the drain is not logged as one line: $(cat "$tmp/log")"
[ ! -e "$tmp/state/103" ] || fail "the epilog left its state behind after the drain"
# With the module's records readable, the reason names the process and cgroup holding them.
reset
records=$tmp/sys/kernel/debug/nvidia_peermem/registrations
mkdir -p "${records%/*}"
printf '%s\n' '# id tgid comm cgroup gpu va bytes client nic state age_ms pin pin_bytes shares' \
    '9 4242 train /slurm/uid_1000/job_108/step_0 GPU-d09b8d4e-daef-237f-dd2d-1f194bd911ab 0x7f0000000000 196608 nv_mem 0000:04:00.0 mapped 5000 4 196608 1' \
    >"$records"
job 108 1 196608
want='update nodename=node001 state=drain reason=nvpeer: leak after job 108: live_contexts +1 pinned_bytes +196608; held by train[4242] in /slurm/uid_1000/job_108/step_0: 1 registration, 192 KiB'
[ "$(cat "$tmp/scontrol.calls")" = "$want" ] || fail "records: scontrol ran '$(cat "$tmp/scontrol.calls")', want '$want'"
# A truncated records file: who fails, the reason is the counters alone.
reset
printf '# id tgid comm\n9 4242\n' >"$records"
job 109 1 65536
grep -q 'reason=nvpeer: leak after job 109: live_contexts +1 pinned_bytes +65536$' "$tmp/scontrol.calls" \
    || fail "broken records: $(cat "$tmp/scontrol.calls" 2>/dev/null)"
rm -rf "$tmp/sys/kernel/debug"
# The module unloaded between the last read and `who` (which then says "no registrations: no
# peer-memory module loaded" and exits 0): the reason is the counters alone, no "held by".
reset
echo 7 >"$tmp/unload-at"
job 110 1 65536
mv "$tmp/sys/module/unloaded" "$tmp/sys/module/nvidia_peermem" || fail "who ran with the module still there"
[ "$(cat "$tmp/scontrol.calls")" = 'update nodename=node001 state=drain reason=nvpeer: leak after job 110: live_contexts +1 pinned_bytes +65536' ] \
    || fail "module gone before who: $(cat "$tmp/scontrol.calls" 2>/dev/null)"
# Only pinned bytes left behind: drained too, live_contexts +0.
reset
job 104 0 65536
grep -q 'reason=nvpeer: leak after job 104: live_contexts +0 pinned_bytes +65536$' "$tmp/scontrol.calls" \
    || fail "pinned bytes alone: $(cat "$tmp/scontrol.calls" 2>/dev/null)"

# 4. nvpeer missing: one clear line each, no retry loop, no drain, exit 0.
reset
slurm prolog_slurmd "$prolog" 105 || fail "prolog exited $?"
write_conf "$tmp/absent/nvpeer" 1     # a retry loop would take 4 s
set_counters 5 327680
start=$SECONDS
slurm epilog_slurmd "$epilog" 105 || fail "epilog without nvpeer exited $?"
[ $((SECONDS - start)) -lt 2 ] || fail "the epilog without nvpeer waited (a retry loop?)"
[ "$(drains)" -eq 0 ] || fail "nvpeer missing, yet scontrol ran"
[ "$(cat "$tmp/log")" = "nvpeer-epilog: $tmp/absent/nvpeer is missing or not executable: job 105 not checked" ] \
    || fail "nvpeer missing: log '$(cat "$tmp/log")'"
rm -f "$tmp/log"
slurm prolog_slurmd "$prolog" 106 || fail "prolog without nvpeer exited $?"
[ "$(cat "$tmp/log")" = "nvpeer-prolog: $tmp/absent/nvpeer is missing or not executable: job 106 not tracked" ] \
    || fail "prolog, nvpeer missing: log '$(cat "$tmp/log")'"
[ ! -e "$tmp/state/106" ] || fail "the prolog saved state without nvpeer"
rm -f "$tmp/log"
slurm epilog_slurmd "$epilog" 106 || fail "epilog without a prolog state exited $?"
grep -q "^nvpeer-epilog: no pre-job values for job 106 " "$tmp/log" || fail "no state: log '$(cat "$tmp/log")'"
[ "$(drains)" -eq 0 ] || fail "no state, yet scontrol ran"
write_conf

# 5. A CLI that fails (exit 2) after the job: retried, then logged, never a drain.
reset
slurm prolog_slurmd "$prolog" 107 || fail "prolog exited $?"
printf 'lots\n' >"$stats/registrations"
slurm epilog_slurmd "$epilog" 107 || fail "epilog with a failing CLI exited $?"
cp "$repo/tests/fixtures/pix/sys/module/nvidia_peermem/nvpeer/stats/registrations" "$stats/registrations"
[ "$(drains)" -eq 0 ] || fail "a failing CLI drained the node"
grep -q "stats --json failed (exit 2): nvpeer stats: .*registrations: unexpected content \"lots\".*: job 107 not checked" "$tmp/log" \
    || fail "failing CLI: log '$(cat "$tmp/log")'"

# 6. A shared node: the first job to end is not judged while another is on the node.
reset
slurm prolog_slurmd "$prolog" 201 || fail "prolog 201"
slurm prolog_slurmd "$prolog" 202 || fail "prolog 202"
set_counters 1 65536
slurm epilog_slurmd "$epilog" 201 || fail "epilog 201"
[ "$(drains)" -eq 0 ] || fail "job 201 was judged while job 202 was on the node"
grep -q "job(s) 202 still on this node: job 201 not judged" "$tmp/log" || fail "shared node: log '$(cat "$tmp/log")'"
slurm epilog_slurmd "$epilog" 202 || fail "epilog 202"
[ "$(drains)" -eq 1 ] && grep -q 'leak after job 202: live_contexts +1 pinned_bytes +65536' "$tmp/scontrol.calls" \
    || fail "the last job's leak did not drain: $(cat "$tmp/scontrol.calls" 2>/dev/null)"

# 7. Not a job id, and an unloaded module: logged, exit 0, nothing saved or drained.
reset
slurm prolog_slurmd "$prolog" "../etc" || fail "prolog with a bad job id exited $?"
grep -q "SLURM_JOB_ID is '../etc', not a job id" "$tmp/log" || fail "bad job id: log '$(cat "$tmp/log")'"
[ ! -e "$tmp/state" ] || fail "a bad job id created state"
mv "$tmp/sys/module/nvidia_peermem" "$tmp/sys/module/gone"
slurm prolog_slurmd "$prolog" 301 || fail "prolog without the module exited $?"
grep -q "the nvpeer module is not loaded (nvpeer check --brief: nvpeer: not ready: gpus (none), .*): nothing of ours to track: job 301 not tracked" "$tmp/log" \
    || fail "no module: log '$(cat "$tmp/log")'"
mv "$tmp/sys/module/gone" "$tmp/sys/module/nvidia_peermem"
# A host ready through dma-buf alone (no module): the verdict is logged, nothing fails.
printf '#!/bin/bash\nexec %q --sysfs-root %q --procfs-root %q "$@"\n' "$real_bin" \
    "$repo/tests/fixtures/inbox-dmabuf/sys" "$repo/tests/fixtures/inbox-dmabuf/proc" >"$tmp/nvpeer-dmabuf"
chmod +x "$tmp/nvpeer-dmabuf"
write_conf "$tmp/nvpeer-dmabuf"
slurm prolog_slurmd "$prolog" 302 || fail "prolog on a dma-buf host exited $?"
grep -q "the nvpeer module is not loaded (nvpeer check --brief: nvpeer: ready (dma-buf)): nothing of ours to track: job 302 not tracked" "$tmp/log" \
    || fail "dma-buf host: log '$(cat "$tmp/log")'"
[ ! -e "$tmp/state/302" ] || fail "a dma-buf host saved state"
# There `nvpeer who` says nothing is held (no peer-memory module can hold any) and exits 0.
held=$("$tmp/nvpeer-dmabuf" who --brief 2>&1) || fail "who on a dma-buf host exited $?: $held"
[ "$held" = "no registrations: no peer-memory module loaded" ] || fail "who on a dma-buf host: '$held'"
write_conf

# The harness is not blind: the fake scontrol records calls, the PATH finds nothing.
"$tmp/scontrol" probe && [ "$(drains)" -eq 1 ] || fail "the fake scontrol does not record"
! env -i PATH=/nonexistent/no-path /bin/bash -c 'cat /dev/null' 2>/dev/null || fail "the test PATH finds commands"
echo "test-slurm-epilog: ok"
