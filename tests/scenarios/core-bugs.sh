# SPDX-License-Identifier: GPL-2.0
# core-bugs.sh persistent_dereg|failed_activation 5.4-3|24.04: the pre-25.04 MOFED core bug,
# one case per boot (core_bugs.py; tests/stand-ins/peer_core_sim/expect-core-bugs.sh runs them).
exec python3 -u "$(dirname "$0")/core_bugs.py" "$@"
