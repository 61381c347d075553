# SPDX-License-Identifier: GPL-2.0
# lifecycle.sh [cycles]: repeated load/unload and malformed registrations (lifecycle.py).
exec python3 -u "$(dirname "$0")/lifecycle.py" "$@"
