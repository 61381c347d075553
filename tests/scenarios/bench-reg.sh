# SPDX-License-Identifier: GPL-2.0
# bench-reg.sh [pin_cost_ns]: registration benchmark, ours vs NVIDIA's reference (bench-reg.py).
exec python3 -u "$(dirname "$0")/bench-reg.py" "$@"
