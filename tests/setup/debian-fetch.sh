#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# debian-fetch.sh PACKAGE [VERSION]: downloads one .deb from a newer Debian suite into
# $NVPEER_CACHE/debs and prints its path. It uses a private apt state (nothing is installed and
# the host's apt configuration is untouched) whose sources reuse the Debian mirror URI already
# configured on this machine: no host name is written anywhere.
# Without VERSION the newest version found in the suites below is taken.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"
pkg=$1 want=${2:-}
SUITES=${NVPEER_DEBIAN_SUITES:-"trixie trixie-backports sid"}
# NVPEER_DEBIAN_ARCH: another architecture's packages (arm64 headers for a cross build), from a
# state of their own (with NVPEER_DEBIAN_SUITES, other suites: bookworm's).
ARCH=${NVPEER_DEBIAN_ARCH:-}
state=$NVPEER_CACHE/apt${ARCH:+-$ARCH-$(echo "$SUITES" | tr ' ' _)}
mkdir -p "$state/lists/partial" "$state/cache/archives/partial" "$state/empty" "$NVPEER_CACHE/debs"

# mirror_uri [security]: the URI of the Debian archive (or, with "security", of its security
# archive, whose suites are <release>-security) configured on this machine.
mirror_uri() {
    local f uri sec=${1:-}
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        # deb822 stanzas: the first URI of a stanza signed by Debian's archive key that is (not)
        # the security archive.
        uri=$(awk -v sec="$sec" 'BEGIN{RS="";FS="\n"} /debian-archive-keyring/ && ((sec == "") == !/-security/) {
                 for(i=1;i<=NF;i++) if ($i ~ /^URIs:/) { split($i,a," "); print a[2]; exit } }' "$f")
        [ -n "$uri" ] && { echo "$uri"; return; }
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        uri=$(awk -v sec="$sec" '$1=="deb" && ((sec == "") == ($0 !~ /security/)) && $0 ~ /debian/ {for(i=2;i<=NF;i++) if ($i ~ /:\/\//) {print $i; exit}}' "$f")
        [ -n "$uri" ] && { echo "$uri"; return; }
    done
    return 1
}

APT=(apt-get -qq -o "Dir::Etc::sourcelist=$state/sources.list" -o "Dir::Etc::sourceparts=$state/empty"
     -o "Dir::State::lists=$state/lists" -o "Dir::Cache=$state/cache" -o "Acquire::Languages=none"
     -o "Dir::Etc::preferencesparts=$state/empty" -o "Dir::Etc::preferences=/dev/null"
     -o "APT::Sandbox::User=root" ${ARCH:+-o "APT::Architecture=$ARCH" -o "APT::Architectures=$ARCH"})
if [ ! -f "$state/sources.list" ] || [ -n "$(find "$state/lists" -maxdepth 0 -mmin +720)" ] \
   || ! ls "$state"/lists/*Packages* >/dev/null 2>&1; then
    uri=$(mirror_uri) || { echo "debian-fetch: no Debian mirror URI found in /etc/apt" >&2; exit 1; }
    : > "$state/sources.list"
    for s in $SUITES; do
        u=$uri
        case $s in *-security) u=$(mirror_uri security) || { echo "debian-fetch: no Debian security archive URI found in /etc/apt" >&2; exit 1; } ;; esac
        echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $u $s main contrib" >> "$state/sources.list"
    done
    "${APT[@]}" update >&2
    touch "$state/lists"
fi
if [ -z "$want" ]; then
    want=$(apt-cache -o "Dir::Etc::sourcelist=$state/sources.list" -o "Dir::Etc::sourceparts=$state/empty" \
        -o "Dir::State::lists=$state/lists" -o "Dir::Cache=$state/cache" \
        ${ARCH:+-o "APT::Architecture=$ARCH" -o "APT::Architectures=$ARCH"} madison "$pkg" \
        | awk -F'|' '{gsub(/ /,"",$2); print $2}' | sort -V | tail -n1)
    [ -n "$want" ] || { echo "debian-fetch: package $pkg is not in any of: $SUITES" >&2; exit 1; }
fi
deb=$(ls "$NVPEER_CACHE/debs/${pkg}_${want//:/%3a}_"*.deb 2>/dev/null | head -n1 || true)
if [ -z "$deb" ]; then
    (cd "$NVPEER_CACHE/debs" && "${APT[@]}" download "$pkg=$want" >&2) || {
        echo "debian-fetch: $pkg version $want is not downloadable from $SUITES (Debian keeps only current versions)" >&2; exit 1; }
    deb=$(ls "$NVPEER_CACHE/debs/${pkg}_${want//:/%3a}_"*.deb | head -n1)
fi
echo "$deb"
