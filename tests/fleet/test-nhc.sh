#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# dist/nhc/nvpeer.nhc under a harness that stands in for LBNL NHC (not packaged in Debian): NHC's
# variables, a `die` that records its message and returns 1 (as `nhc -a` does), the file sourced
# as NHC sources /etc/nhc/scripts/*.nhc, each check run in a subshell with NHC's minimal PATH.
# A fake `nvpeer` prints a given line and exits with a given code: ready, not ready, a usage
# error, too slow (must be cut off well inside NHC's 5 s), missing; check_nvpeer_bw against a
# CLI without `bench --loopback-all` and with pairs below the limit; the registration path it
# measures (dma-buf where `check --brief` says dma-buf is ready, else ibv_reg_mr; --reg).
# The real CLI (required: missing, the test fails) on fixture trees: a dma-buf-only host passes,
# a host NVIDIA's topology rule refuses fails with its brief line. The harness is checked too: a check that does not call die
# on failure is caught.
# shellcheck disable=SC2015  # `a && b || fail`: fail is what should run when either fails
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
nhc_file=$repo/dist/nhc/nvpeer.nhc
real_bin=${NVPEER_BIN:-$repo/userspace/target/release/nvpeer}
fail() { echo "test-nhc: $*" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -r "$nhc_file" ] || fail "$nhc_file is missing"
bash -n "$nhc_file" || fail "$nhc_file does not parse"

# fake NAME LINE RC [SLEEP]: an nvpeer that sleeps SLEEP seconds (ignoring SIGTERM, so that only
# the kill after the grace second stops it), prints LINE and exits RC; it logs its arguments.
fake() {
    local f=$tmp/$1
    {
        printf '#!/bin/bash\n'
        printf 'printf "%%s\\n" "$*" >>%q\n' "$tmp/$1.args"
        if [ -n "${4:-}" ]; then printf "trap '' TERM\n/bin/sleep %q\n" "$4"; fi
        printf 'printf "%%s\\n" %q\n' "$2"
        printf 'exit %q\n' "$3"
    } >"$f"
    chmod +x "$f"
    echo "$f"
}

# run_check EXPECT_RC EXPECT_DIE NVPEER FUNCTION ARGS...: sources the check file as NHC does and
# runs FUNCTION; it must return EXPECT_RC, and die must have been called with exactly
# EXPECT_DIE ("" = never called, "*" = once, any message). Prints the seconds it took.
run_check() {
    local want_rc=$1 want_die=$2 bin=$3
    shift 3
    rm -f "$tmp/die.log"
    local start=$SECONDS
    (
        # What NHC sets before it runs the checks (nhc: nhcmain_init_env / nhcmain_load_scripts).
        export PATH=/sbin:/usr/sbin:/bin:/usr/bin
        HOSTNAME=node001.cluster.example HOSTNAME_S=node001 NHC_RM=slurm
        NAME=nhc TIMEOUT=30 MARK_OFFLINE=1 NHC_CHECK_ALL=1 FAIL_CNT=0
        export HOSTNAME HOSTNAME_S NHC_RM NAME TIMEOUT MARK_OFFLINE NHC_CHECK_ALL FAIL_CNT
        # shellcheck disable=SC2317  # called by the sourced checks
        die() {
            local rc=1
            if [[ ${1:-} == +([0-9]) ]]; then rc=$1; shift; fi
            printf '%s|%s\n' "$rc" "$*" >>"$tmp/die.log"
            return 1
        }
        # shellcheck disable=SC1090
        . "$nhc_file"
        [ -n "$bin" ] && export NVPEER=$bin
        "$@"
    )
    local rc=$? took=$((SECONDS - start))
    local died=
    [ -f "$tmp/die.log" ] && died=$(cat "$tmp/die.log")
    [ "$rc" -eq "$want_rc" ] || fail "$* (NVPEER=$bin): returned $rc, want $want_rc (die: '$died')"
    if [ "$want_die" = "*" ]; then
        [ -n "$died" ] && [ "$(wc -l <<<"$died")" -eq 1 ] || fail "$* (NVPEER=$bin): die '$died', want one call"
    else
        [ "$died" = "$want_die" ] || fail "$* (NVPEER=$bin): die '$died', want '$want_die'"
    fi
    echo "$took"
}

ready=$(fake ready 'nvpeer: ready' 0)
notready=$(fake notready 'nvpeer: not ready: module (none loaded), memlock (8 MiB)' 1)
usage=$(fake usage 'nvpeer: --sysfs-root /sys: No such file or directory' 2)
slow=$(fake slow 'nvpeer: ready' 0 10)
: >"$tmp/noexec"

run_check 0 "" "$ready" check_nvpeer >/dev/null
[ "$(cat "$tmp/ready.args")" = "check --brief" ] || fail "check_nvpeer ran '$(cat "$tmp/ready.args")'"
run_check 0 "" "$ready" check_nvpeer --strict >/dev/null
[ "$(tail -n1 "$tmp/ready.args")" = "check --brief --strict" ] || fail "check_nvpeer --strict ran '$(tail -n1 "$tmp/ready.args")'"
run_check 1 "1|check_nvpeer: nvpeer: not ready: module (none loaded), memlock (8 MiB)" "$notready" check_nvpeer >/dev/null
run_check 1 "1|check_nvpeer: $usage check --brief failed (exit 2): nvpeer: --sysfs-root /sys: No such file or directory" \
    "$usage" check_nvpeer >/dev/null
run_check 1 "1|check_nvpeer: $tmp/missing is missing or not executable (set NVPEER)" "$tmp/missing" check_nvpeer >/dev/null
run_check 1 "1|check_nvpeer: $tmp/noexec is missing or not executable (set NVPEER)" "$tmp/noexec" check_nvpeer >/dev/null
took=$(run_check 1 "1|check_nvpeer: $slow check --brief did not finish within 3s" "$slow" check_nvpeer)
[ "$took" -lt 5 ] || fail "check_nvpeer on a hanging CLI took ${took}s, NHC allows 5"
# The default path, when NVPEER is not set: /usr/bin/nvpeer (absent on this machine).
if [ ! -e /usr/bin/nvpeer ]; then
    run_check 1 "1|check_nvpeer: /usr/bin/nvpeer is missing or not executable (set NVPEER)" "" check_nvpeer >/dev/null
fi
# The real CLI is part of the acceptance below: without it the test fails, never skips.
[ -x "$real_bin" ] || fail "$real_bin is missing: build it (cd userspace && cargo build --release)"
# The real CLI on this bare machine: not ready, its own brief line, in well under 5 s.
line=$("$real_bin" check --brief)
took=$(run_check 1 "1|check_nvpeer: $line" "$real_bin" check_nvpeer)
[ "$took" -lt 5 ] || fail "check_nvpeer with the real CLI took ${took}s"

# The real CLI on fixture trees (issue 35): a host ready through dma-buf alone passes (no
# peer-memory module, which the CLI once failed), one NVIDIA's topology rule refuses does not,
# and --require passes through.
{
    fixtures=$repo/tests/fixtures
    dmabuf_only=(--sysfs-root "$fixtures/inbox-dmabuf/sys" --procfs-root "$fixtures/inbox-dmabuf/proc")
    refused=(--sysfs-root "$fixtures/topo-refused/sys" --procfs-root "$fixtures/topo-refused/proc")
    run_check 0 "" "$real_bin" check_nvpeer "${dmabuf_only[@]}" >/dev/null
    line=$("$real_bin" check --brief "${refused[@]}")
    case $line in
        "nvpeer: not ready: paths (GPU0-mlx5_0 has no path)"*) ;;
        *) fail "the topology-refused fixture's brief line is '$line'" ;;
    esac
    run_check 1 "1|check_nvpeer: $line" "$real_bin" check_nvpeer "${refused[@]}" >/dev/null
    line=$("$real_bin" check --brief --require peermem "${dmabuf_only[@]}")
    run_check 1 "1|check_nvpeer: $line" "$real_bin" check_nvpeer --require peermem "${dmabuf_only[@]}" >/dev/null
}

# check_nvpeer_bw over `bench --loopback-all --reg REG --min-gbps X`, REG from `check --brief`.
bw_ok=$(fake bw_ok 'GPU0 mlx5_0 PIX 180.2 Gb/s ok' 0)
run_check 0 "" "$bw_ok" check_nvpeer_bw 150 >/dev/null
[ "$(cat "$tmp/bw_ok.args")" = $'check --brief\nbench --loopback-all --reg mr --min-gbps 150' ] || fail "check_nvpeer_bw ran '$(cat "$tmp/bw_ok.args")'"
# A host check calls ready through dma-buf: the pairs are measured through dma-buf (ibv_reg_mr of
# GPU memory fails without a peer-memory module); --reg chooses.
# shellcheck disable=SC2016  # expanded by the fake when it runs
printf '#!/bin/bash\nprintf "%%s\\n" "$*" >>%q\ncase $1 in check) echo "nvpeer: ready (dma-buf)" ;; *) echo "GPU0 mlx5_0 PIX 180.2 Gb/s ok" ;; esac\n' \
    "$tmp/bw_dmabuf.args" >"$tmp/bw_dmabuf"
chmod +x "$tmp/bw_dmabuf"
run_check 0 "" "$tmp/bw_dmabuf" check_nvpeer_bw 150 >/dev/null
[ "$(tail -n1 "$tmp/bw_dmabuf.args")" = "bench --loopback-all --reg dmabuf --min-gbps 150" ] || fail "check_nvpeer_bw on a dma-buf host ran '$(cat "$tmp/bw_dmabuf.args")'"
: >"$tmp/bw_dmabuf.args"
run_check 0 "" "$tmp/bw_dmabuf" check_nvpeer_bw 150 --reg mr >/dev/null
[ "$(cat "$tmp/bw_dmabuf.args")" = "bench --loopback-all --reg mr --min-gbps 150" ] || fail "check_nvpeer_bw --reg mr ran '$(cat "$tmp/bw_dmabuf.args")'"
run_check 1 "1|check_nvpeer_bw: usage: check_nvpeer_bw MIN_GBPS [--reg mr|dmabuf] (got --reg 'peermem')" "$bw_ok" check_nvpeer_bw 150 --reg peermem >/dev/null
# The real CLI on the dma-buf-only fixture: its brief line is what selects dma-buf.
case $("$real_bin" check --brief --sysfs-root "$repo/tests/fixtures/inbox-dmabuf/sys" --procfs-root "$repo/tests/fixtures/inbox-dmabuf/proc") in
    "nvpeer: ready (dma-buf)") ;;
    *) fail "the dma-buf-only fixture's brief line no longer selects --reg dmabuf" ;;
esac
bw_low=$(fake bw_low $'GPU0 mlx5_0 PIX 180.2 Gb/s ok\nGPU1 mlx5_1 PIX 42.0 Gb/s below 150 Gb/s\n1 of 2 pairs below 150 Gb/s' 1)
run_check 1 "1|check_nvpeer_bw: below 150 Gb/s: GPU1 mlx5_1 PIX 42.0 Gb/s below 150 Gb/s" "$bw_low" check_nvpeer_bw 150 >/dev/null
old=$(fake old "error: unexpected argument '--loopback-all' found" 2)
run_check 1 "1|check_nvpeer_bw: $old does not support bench --loopback-all --min-gbps (a newer nvpeer is needed)" \
    "$old" check_nvpeer_bw 150 >/dev/null
run_check 1 "1|check_nvpeer_bw: usage: check_nvpeer_bw MIN_GBPS [--reg mr|dmabuf] (a number, got 'fast')" "$bw_ok" check_nvpeer_bw fast >/dev/null
run_check 1 "1|check_nvpeer_bw: usage: check_nvpeer_bw MIN_GBPS [--reg mr|dmabuf] (a number, got '')" "$bw_ok" check_nvpeer_bw >/dev/null
run_check 1 "1|check_nvpeer_bw: $tmp/missing is missing or not executable (set NVPEER)" "$tmp/missing" check_nvpeer_bw 100 >/dev/null
nodev=$(fake nodev 'nvpeer bench: no RDMA device' 2)
run_check 1 "1|check_nvpeer_bw: $nodev bench --loopback-all failed (exit 2): nvpeer bench: no RDMA device" \
    "$nodev" check_nvpeer_bw 100 >/dev/null
# The real CLI has `bench --loopback-all`; this machine has no RDMA device: a failure that is not
# the "does not support" one.
run_check 1 "*" "$real_bin" check_nvpeer_bw 1 >/dev/null
! grep -q 'does not support' "$tmp/die.log" || fail "check_nvpeer_bw: the real CLI has --loopback-all but the check says it does not"

# The harness itself: a check that fails without calling die, or calls it with another text,
# is caught.
( run_check 1 "1|check_nvpeer: something else" "$notready" check_nvpeer >/dev/null 2>&1 ) \
    && fail "the harness accepted a wrong die message"
( run_check 0 "" "$notready" check_nvpeer >/dev/null 2>&1 ) && fail "the harness accepted a failing check as healthy"
echo "test-nhc: ok"
