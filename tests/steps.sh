# SPDX-License-Identifier: GPL-2.0
# Sourced by tests/run.sh (make test) and tests/run-matrix.sh (make test-matrix): test steps with
# their result and duration, and the summary that ends a run ("tests: N passed, N failed").
passed=0 failed=0
# Every VM run leaves a record here for the reliability table at the end (tests/summary.py).
NVPEER_SUMMARY_DIR=$(mktemp -d /tmp/nvpeer-summary.XXXXXX)
export NVPEER_SUMMARY_DIR
# Each step's output is also kept, so the summary can end with the tail of every failed step: a CI
# log is often read from its end only.
step_logs=$(mktemp -d /tmp/nvpeer-steps.XXXXXX)
timings=() failures=() failure_logs=()
# step NAME COMMAND...: runs one test step, records its result and duration.
step() {
    local name=$1; shift
    local t0=$SECONDS log
    log=$step_logs/$(( ${#timings[@]} + 1 )).log
    echo "=== $name"
    "$@" 2>&1 | tee "$log"
    if [ "${PIPESTATUS[0]}" -eq 0 ]; then passed=$((passed + 1)); echo "=== $name: ok ($((SECONDS - t0)) s)"
    else
        failed=$((failed + 1)); failures+=("$name"); failure_logs+=("$log")
        echo "=== $name: FAILED ($((SECONDS - t0)) s)"
    fi
    timings+=("$(printf '%-34s %5d s' "$name" $((SECONDS - t0)))")
}
# fatal NAME COMMAND...: a set-up step that everything after it needs.
fatal() { local before=$failed; step "$@"; if [ $failed -gt $before ]; then summary; exit 1; fi; }
summary() {
    echo; echo "== phase times"; printf '%s\n' "${timings[@]}"; echo "   total $SECONDS s"
    local i
    for i in "${!failures[@]}"; do
        echo "== the last 25 lines of: ${failures[$i]}"; tail -n 25 "${failure_logs[$i]}"
    done
    [ $failed -eq 0 ] || { echo "== failed:"; printf '   %s\n' "${failures[@]}"; }
    echo "tests: $passed passed, $failed failed"
}

