# SPDX-License-Identifier: GPL-2.0
# bench-profile.sh [--ko-dir DIR]: perf profile of 64 KiB registrations, ours and NVIDIA's
# (bench_profile.py; also run at the end of `make bench`'s timing boot on Debian's kernel).
exec python3 -u "$(dirname "$0")/bench_profile.py" "$@"
