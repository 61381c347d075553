# SPDX-License-Identifier: GPL-2.0
# stock-basic.sh RELEASE KO_DIR: the reduced conformance scenario on Debian's own kernel
# (tests/vm/run.sh --stock RELEASE; modules built by kmod/scripts/stock-kbuild.sh build --stand-ins).
exec python3 -u "$(dirname "$0")/stock_basic.py" "$@"
