#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Builds (once) the test kernel: Debian's linux-source-7.2, tinyconfig + nvpeer.config, with the
# host's rustup toolchain. The tree is cached under $NVPEER_CACHE/kernel/<key>, where the key
# covers the source package version, the fragment, this script and every toolchain version, so a
# warm cache skips the build. Prints the tree's path (usable as KDIR) on stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../setup/env.sh"
log() { printf 'kernel: %s\n' "$*" >&2; }

# The 7.2 series is pinned; the exact version is preferred, a newer patch release of the series is
# accepted (Debian's archive drops superseded versions) and recorded in the key and the log.
SERIES=7.2
PINNED=${NVPEER_LINUX_SOURCE_VERSION:-7.2.12-1~bpo13+1}
deb=$("$here/../setup/debian-fetch.sh" "linux-source-$SERIES" "$PINNED" 2>/dev/null) || {
    log "pinned linux-source-$SERIES $PINNED is gone from the archive; taking the newest $SERIES"
    deb=$("$here/../setup/debian-fetch.sh" "linux-source-$SERIES") || {
        log "FATAL: no linux-source-$SERIES in the Debian suites searched; the series is gone, pick a new one in $0"
        exit 1; }
}
version=$(dpkg-deb -f "$deb" Version)

key_input() {
    echo "linux-source-$SERIES $version"
    cat "$here/nvpeer.config" "$0"
    rustc -vV; bindgen --version; gcc --version | head -n1
    echo "libclang $LIBCLANG_PATH"; ls "$LIBCLANG_PATH"
}
key=$(key_input | sha256sum | cut -c1-16)
dir=$NVPEER_CACHE/kernel/$key
tree=$dir/linux-source-$SERIES
if [ -f "$dir/built" ]; then
    log "cached: linux-source-$SERIES $version, key $key ($tree)"
    echo "$tree"; exit 0
fi

log "building linux-source-$SERIES $version (key $key); about 10 minutes on 2 cores"
rm -rf "$dir"; mkdir -p "$dir"
dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$dir" --wildcards '*/linux-source-*.tar.xz'
tar -xf "$dir"/usr/src/linux-source-$SERIES.tar.xz -C "$dir"
rm -rf "$dir/usr"
key_input > "$dir/key-input.txt"

cd "$tree"
export LIBCLANG_PATH
mk() { make -s -j"$(nproc)" ARCH=x86_64 "$@"; }
mk tinyconfig >/dev/null
scripts/kconfig/merge_config.sh -m .config "$here/nvpeer.config" >/dev/null
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
done < "$here/nvpeer.config"
if [ $bad -ne 0 ]; then
    [ "$(grep -c '^CONFIG_RUST=y' .config)" = 0 ] && make ARCH=x86_64 rustavailable >&2 || true
    log "FATAL: the fragment did not apply; see above"; exit 1
fi

mk bzImage modules
mk modules_install INSTALL_MOD_PATH="$dir/modroot" >/dev/null
touch "$dir/built"
log "built $tree"
echo "$tree"
