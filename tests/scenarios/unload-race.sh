# SPDX-License-Identifier: GPL-2.0
# unload-race.sh ours|reference: rmmod racing an in-flight acquire, then cudaFree (unload_race.py).
exec python3 -u "$(dirname "$0")/unload_race.py" "$@"
