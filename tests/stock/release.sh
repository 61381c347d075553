#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# release.sh: the Debian stock kernel release the suite builds for and boots: the pinned one
# (NVPEER_STOCK_RELEASE, default 7.2.12+deb13-amd64) while its headers are in the archive, else
# the newest 7.2.*+deb13-amd64 there (Debian drops superseded versions), said on stderr.
# -amd64, not -cloud-amd64: the cloud flavour has no 9p (CONFIG_NET_9P unset), which the VM
# runner needs to give the guest the host's root; the module builds for both.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
. "$repo/tests/setup/env.sh"
pinned=${NVPEER_STOCK_RELEASE:-7.2.12+deb13-amd64}
if "$repo/tests/setup/debian-fetch.sh" "linux-headers-$pinned" >/dev/null 2>&1; then echo "$pinned"; exit 0; fi
state=$NVPEER_CACHE/apt
newest=$(apt-cache -o "Dir::Etc::sourcelist=$state/sources.list" -o "Dir::Etc::sourceparts=$state/empty" \
    -o "Dir::State::lists=$state/lists" -o "Dir::Cache=$state/cache" pkgnames linux-headers-7.2. \
    | sed -n 's/^linux-headers-\(7\.2\.[0-9]*+deb13-amd64\)$/\1/p' | sort -V | tail -n1)
[ -n "$newest" ] || { echo "stock: no linux-headers-7.2.*+deb13-amd64 in the archive any more: pick a new series in $0" >&2; exit 1; }
echo "stock: pinned $pinned is gone from the archive; using $newest" >&2
echo "$newest"
