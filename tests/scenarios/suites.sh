# shellcheck shell=bash
# SPDX-License-Identifier: GPL-2.0
# suites.sh "SUITE ARGS..." ...: several suites of tests/scenarios in one boot, in order, each as it
# runs alone (its own tally); fails when any of them fails. One boot, not one per suite (about 20 s
# of TCG each): for boots whose kernel or module is the point (our runtime on the test kernel,
# Debian's own kernels) and for suites that leave nothing loaded behind them.
# NVPEER_KO_DIR (from run.sh) points the suites at modules built for that kernel.
rc=0
for s in "$@"; do
    # shellcheck disable=SC2086 # a suite and its arguments, as given
    set -- $s
    name=$1; shift
    echo "=== suites: $name $*"
    # A Python suite by its module's name, a shell one (tests/scenarios/NAME.sh) by its own.
    if [ -f "$(dirname "$0")/$name.py" ]; then
        python3 -u "$(dirname "$0")/$name.py" "$@"
    else
        bash "$(dirname "$0")/$name.sh" "$@"
    fi || { echo "=== suites: $name $* FAILED"; rc=1; }
done
exit $rc
