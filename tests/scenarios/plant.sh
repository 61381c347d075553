# SPDX-License-Identifier: GPL-2.0
# plant.sh KIND [KO]: loads the test-only nvpeer_plant module (KO: one built for a stock kernel)
# with plant=KIND and unloads it.
# With KIND=warn or leak the VM runner must fail the run (tests/vm/test-detector.sh).
. "$(dirname "$0")/lib.sh"
kind=${1:?kind}
ko=${2:-$REPO/tests/vm/plant/nvpeer_plant.ko}
expect "insmod nvpeer_plant plant=$kind" insmod "$ko" plant="$kind"
expect "rmmod nvpeer_plant" rmmod nvpeer_plant
finish
