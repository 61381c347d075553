# SPDX-License-Identifier: GPL-2.0
# stress.sh [seconds] [threads] [seed]: threads registering, using, revoking and deregistering
# random buffers for a bounded time on every core generation (stress.py).
exec python3 -u "$(dirname "$0")/stress.py" "$@"
