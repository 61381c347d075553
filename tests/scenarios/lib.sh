# SPDX-License-Identifier: GPL-2.0
# Helpers for in-guest suites (sourced). Each check prints one line; `finish` prints the tally
# and returns non-zero when a check failed.
set -u
SUITE_NAME=$(basename "$0" .sh)
PASSED=0
FAILED=0
REPO=${NVPEER_REPO:?run through tests/vm/run.sh}
KO_DIR=${NVPEER_KO_DIR:-$REPO/kmod}
SIM_DIR=$REPO/tests/stand-ins

ok() { PASSED=$((PASSED + 1)); echo "ok    $*"; }
not_ok() { FAILED=$((FAILED + 1)); echo "FAIL  $*"; }
# expect DESCRIPTION COMMAND...: passes when COMMAND succeeds.
expect() { local d=$1; shift; if "$@" >/tmp/expect.out 2>&1; then ok "$d"; else not_ok "$d"; sed 's/^/      /' /tmp/expect.out; fi; }
# expect_fail DESCRIPTION COMMAND...: passes when COMMAND fails.
expect_fail() { local d=$1; shift; if "$@" >/tmp/expect.out 2>&1; then not_ok "$d (unexpectedly succeeded)"; else ok "$d"; fi; }
# expect_eq DESCRIPTION EXPECTED ACTUAL
expect_eq() { if [ "$2" = "$3" ]; then ok "$1"; else not_ok "$1: expected '$2', got '$3'"; fi; }
# dmesg_since MARK: kernel log lines after the marker written by `mark`.
mark() { echo "nvpeer-test-mark $1" > /dev/kmsg; }
dmesg_since() { dmesg | sed -n "/nvpeer-test-mark $1\$/,\$p"; }
finish() { echo "[suite $SUITE_NAME] $PASSED ok, $FAILED failed"; [ "$FAILED" -eq 0 ]; }
