# SPDX-License-Identifier: GPL-2.0
# plant.sh KIND: loads the test-only nvpeer_plant module with plant=KIND and unloads it.
# With KIND=warn or leak the VM runner must fail the run (tests/vm/test-detector.sh).
. "$(dirname "$0")/lib.sh"
kind=${1:?kind}
expect "insmod nvpeer_plant plant=$kind" insmod "$REPO/tests/vm/plant/nvpeer_plant.ko" plant="$kind"
expect "rmmod nvpeer_plant" rmmod nvpeer_plant
finish
