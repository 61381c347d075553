# SPDX-License-Identifier: GPL-2.0
# core-detect.sh [4x|5x|5x-unmaps|doca]...: our module detects the core generation at load from
# the core's exports, for each generation's build of the core stand-in and each
# peerdirect_support form (a contradicting value: one line, the module follows the core), then
# the DOCA-OFED 24.07+ layout (the core in module ib_uverbs, loaded by `modprobe nvidia_peermem`
# through our softdep). tests/scenarios/core_detect.py.
exec python3 -u "$(dirname "$0")/core_detect.py" "$@"
