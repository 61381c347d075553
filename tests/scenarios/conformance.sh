# SPDX-License-Identifier: GPL-2.0
# conformance.sh ours|reference [--quick]: the peer-memory client against the stand-ins, for
# every core generation and parameter set (tests/scenarios/conformance.py).
exec python3 -u "$(dirname "$0")/conformance.py" "$@"
