# SPDX-License-Identifier: GPL-2.0
# faults.sh: every provider call fails with each relevant errno (faults.py).
exec python3 -u "$(dirname "$0")/faults.py" "$@"
