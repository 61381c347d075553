#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# test-detector.sh KDIR PLANT KIND: the VM runner must FAIL a run whose guest loads a module
# planting PLANT, and its message must name KIND. KDIR=stock:RELEASE: on Debian's own kernel of
# that release, with the plant module kmod/scripts/stock-kbuild.sh built into build/stock/RELEASE.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kdir=$1 plant=$2 kind=$3
case "$kdir" in
stock:*) r=${kdir#stock:}
    msg=$(env -u NVPEER_SUMMARY_DIR "$here/run.sh" --stock "$r" plant "$plant" "$here/../../build/stock/$r/nvpeer_plant.ko" 2>&1) ;;
*) msg=$(env -u NVPEER_SUMMARY_DIR "$here/run.sh" --kdir "$kdir" plant "$plant" 2>&1) ;;
esac
rc=$?
echo "$msg" | tail -n 5
if [ $rc -eq 0 ]; then echo "detector: the run with plant=$plant passed; it must fail" >&2; exit 1; fi
if ! echo "$msg" | grep -q "the guest kernel reported: .*$kind"; then
    echo "detector: the failure does not name $kind" >&2; exit 1
fi
echo "detector: plant=$plant failed the run as $kind, as it must"
