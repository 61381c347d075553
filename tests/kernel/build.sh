#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# build.sh [SERIES [ARCH]]: builds (once) a test kernel: Debian's linux-source-SERIES (7.2 by
# default; 6.12 and 7.3 are the other series of `make KDIR=test:SERIES`), tinyconfig +
# nvpeer.config + nvpeer-ARCH.config, with the host's rustup toolchain, for ARCH x86_64 (default)
# or arm64 (cross-built with Debian's gcc-aarch64-linux-gnu; the kernel compiles its own `core`
# for the target, so no rustup target is needed). The tree is cached under
# $NVPEER_CACHE/kernel/<key>, where the key covers the series, the architecture, the source
# package version, the fragments, this script and every toolchain version, so a warm cache skips
# the build. Prints the tree's path (usable as KDIR) on stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../setup/env.sh"
log() { printf 'kernel: %s\n' "$*" >&2; }

# Each series is pinned; the exact version is preferred, a newer patch release of the series is
# accepted (Debian's archive drops superseded versions) and recorded in the key and the log.
SERIES=${1:-${NVPEER_TEST_SERIES:-7.2}}
ARCH=${2:-${NVPEER_TEST_ARCH:-x86_64}}
case "$SERIES" in
7.2)  PINNED=7.2.12-1~bpo13+1 ;;   # trixie-backports
7.3)  PINNED=7.3.4-1~bpo13+1 ;;    # trixie-backports
6.12) PINNED=6.12.117-1 ;;         # trixie (the LTS series of Debian 13)
*) log "FATAL: no test kernel series '$SERIES' (known: 6.12 7.2 7.3)"; exit 2 ;;
esac
PINNED=${NVPEER_LINUX_SOURCE_VERSION:-$PINNED}
case "$ARCH" in
x86_64) CROSS= ;;
arm64)  CROSS=aarch64-linux-gnu-
        command -v ${CROSS}gcc >/dev/null || { log "FATAL: ${CROSS}gcc missing (Debian package gcc-aarch64-linux-gnu; tests/setup/deps.sh installs it)"; exit 1; } ;;
*) log "FATAL: no test kernel architecture '$ARCH' (known: x86_64 arm64)"; exit 2 ;;
esac
deb=$("$here/../setup/debian-fetch.sh" "linux-source-$SERIES" "$PINNED" 2>/dev/null) || {
    log "pinned linux-source-$SERIES $PINNED is gone from the archive; taking the newest $SERIES"
    deb=$("$here/../setup/debian-fetch.sh" "linux-source-$SERIES") || {
        log "FATAL: no linux-source-$SERIES in the Debian suites searched; the series is gone, pick a new one in $0"
        exit 1; }
}
version=$(dpkg-deb -f "$deb" Version)

key_input() {
    echo "linux-source-$SERIES $version $ARCH"
    cat "$here/nvpeer.config" "$here/nvpeer-$ARCH.config" "$0"
    rustc -vV; bindgen --version; ${CROSS}gcc --version | head -n1
    echo "libclang $LIBCLANG_PATH"; ls "$LIBCLANG_PATH"
}
key=$(key_input | sha256sum | cut -c1-16)
dir=$NVPEER_CACHE/kernel/$key
tree=$dir/linux-source-$SERIES
if [ -f "$dir/built" ]; then
    log "cached: linux-source-$SERIES $version, key $key ($tree)"
    echo "$tree"; exit 0
fi

log "building linux-source-$SERIES $version for $ARCH (key $key); about 10 minutes on 2 cores"
rm -rf "$dir"; mkdir -p "$dir"
dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$dir" --wildcards '*/linux-source-*.tar.xz'
tar -xf "$dir"/usr/src/linux-source-$SERIES.tar.xz -C "$dir"
rm -rf "$dir/usr"
key_input > "$dir/key-input.txt"

cd "$tree"
export LIBCLANG_PATH
mk() { make -s -j"$(nproc)" ARCH="$ARCH" ${CROSS:+CROSS_COMPILE=$CROSS} "$@"; }
# The fragment names options as 7.2 spells them; a series that renamed one gets the new name
# (OLD:NEW, applied only where the tree has no `config OLD`), and the check below holds it to that.
RENAMED="PROC_SYSCTL:SYSCTL"   # 7.3 folded /proc/sys's option into SYSCTL
fragment=$dir/fragment.config
cat "$here/nvpeer.config" "$here/nvpeer-$ARCH.config" > "$fragment"
for r in $RENAMED; do
    grep -rqx --include='Kconfig*' "config ${r%%:*}" . && continue
    log "series $SERIES has no CONFIG_${r%%:*}: using CONFIG_${r#*:}"
    sed -i "s/CONFIG_${r%%:*}\b/CONFIG_${r#*:}/" "$fragment"
done
mk tinyconfig >/dev/null
ARCH=$ARCH scripts/kconfig/merge_config.sh -m .config "$fragment" >/dev/null
mk olddefconfig >/dev/null

# Every option of the fragment must have survived (e.g. RUST needs bindgen+libclang, VIRTIO_PCI
# needs VIRTIO_MENU): a dropped one would silently weaken the tests.
bad=0
while IFS= read -r line; do
    case "$line" in
    CONFIG_*=*)  grep -qx -- "$line" .config || { log "option not set: $line (got: $(grep -E "^(# )?${line%%=*}[= ]" .config || echo absent))"; bad=1; } ;;
    "# CONFIG_"*" is not set") opt=${line#\# }; opt=${opt%% *}
                  ! grep -q "^$opt=" .config || { log "option should be off: $opt"; bad=1; } ;;
    esac
done < "$fragment"
if [ $bad -ne 0 ]; then
    [ "$(grep -c '^CONFIG_RUST=y' .config)" = 0 ] && mk rustavailable >&2 || true
    log "FATAL: the fragment did not apply; see above"; exit 1
fi

case "$ARCH" in x86_64) mk bzImage modules ;; arm64) mk Image modules ;; esac
mk modules_install INSTALL_MOD_PATH="$dir/modroot" >/dev/null
touch "$dir/built"
log "built $tree"
echo "$tree"
