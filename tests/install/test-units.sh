#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# test-units.sh: re-attach and rebuild (issue 37) as `make install` installs them, on temp trees.
#  1. kmod/packaging/nvpeer-install with DESTDIR installs 90-nvpeer.rules, nvpeer-attach.service,
#     nvpeer-rebuild.path/.service and nvpeer-rebuild with every placeholder filled, lists them in
#     the manifest, and uninstall removes exactly them;
#  2. systemd-analyze verify accepts the three units (a planted relative path must be reported);
#  3. udevadm test, in a private mount namespace whose /etc/udev/rules.d holds only our rule: a
#     module "add" uevent of the core's module gets TAG systemd and SYSTEMD_WANTS=
#     nvpeer-attach.service, a remove and another module do not (the rule's module is ib_uverbs
#     only, never ib_core: see the rule; this host has not loaded it, so the event is replayed on
#     a loaded module with the rule's name extended by that module: everything else is the rule);
#  4. nvpeer-rebuild with fake dkms, make and nvpeer: DKMS rebuild then attach; a ready
#     containerised MOFED passes OFA_DIR; one that is there but not ready (the path unit fires
#     on the ready file's removal too) rebuilds nothing, exit 0; a make-install checkout rebuilds
#     from it; nothing to rebuild from, a moved checkout, a failed build: one line, exit 1, no
#     attach.
# Needs root (unshare -m) and systemd's udevadm/systemd-analyze.
# shellcheck disable=SC2015  # `a && ok || bad`: bad is what should run when either fails
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
pk=$repo/kmod/packaging
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok    $*"; }
bad() { fail=$((fail + 1)); echo "FAIL  $*"; }
expect() { local d=$1; shift; if "$@" >"$t/out" 2>&1; then ok "$d"; else bad "$d"; sed 's/^/      /' "$t/out" | tail -n 20; fi; }
expect_fail() { local d=$1; shift; if "$@" >"$t/out" 2>&1; then bad "$d (succeeded)"; else ok "$d"; fi; }
expect_eq() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1: expected '$2', got '$3'"; fi; }

# --- 1. make install / uninstall (DESTDIR) ----------------------------------------------------
: >"$t/fake.ko"; printf '#!/bin/sh\n' >"$t/cli"; chmod +x "$t/cli"
root=$t/root
inst() { DESTDIR=$root KVER=7.2.0-test KO=$t/fake.ko CLI=$t/cli PREFIX=/usr/local MOFED_ARCH=aarch64 \
    MODULE_NAME=${MODULE_NAME:-nvidia_peermem} "$pk/nvpeer-install" "$@"; }
expect "nvpeer-install install (DESTDIR)" inst install
new="/etc/udev/rules.d/90-nvpeer.rules
/etc/systemd/system/nvpeer-attach.service
/etc/systemd/system/nvpeer-rebuild.path
/etc/systemd/system/nvpeer-rebuild.service
/usr/local/lib/nvpeer/nvpeer-rebuild"
for f in $new; do
    expect "installed and in the manifest: $f" bash -c "test -f '$root$f' && grep -qx '$f' '$root/var/lib/nvpeer/manifest'"
done
expect "nvpeer-rebuild is executable" test -x "$root/usr/local/lib/nvpeer/nvpeer-rebuild"
expect "the rule is kmod/packaging/90-nvpeer.rules" cmp "$pk/90-nvpeer.rules" "$root/etc/udev/rules.d/90-nvpeer.rules"
u=$root/etc/systemd/system
expect_fail "no @PLACEHOLDER@ left in the units" grep -l '@[A-Z]*@' "$u/nvpeer-attach.service" "$u/nvpeer-rebuild.path" "$u/nvpeer-rebuild.service"
expect "attach unit: ExecStart=/usr/local/bin/nvpeer attach --module nvidia_peermem" grep -qx 'ExecStart=/usr/local/bin/nvpeer attach --module nvidia_peermem' "$u/nvpeer-attach.service"
expect "attach unit: static (no [Install]), oneshot without RemainAfterExit" \
    bash -c "! grep -q '^\[Install\]' '$u/nvpeer-attach.service' && grep -qx 'Type=oneshot' '$u/nvpeer-attach.service' && ! grep -q ^RemainAfterExit '$u/nvpeer-attach.service'"
expect "path unit watches MOFED's Module.symvers (arch dir filled) and the container's ready file" \
    bash -c "grep -qx 'PathChanged=/usr/src/ofa_kernel/aarch64/%v/Module.symvers' '$u/nvpeer-rebuild.path' && grep -qx 'PathChanged=/run/mellanox/drivers/.driver-ready' '$u/nvpeer-rebuild.path'"
expect "rebuild unit: rebuilds from this checkout" grep -qx "Environment=NVPEER_MODULE=nvidia_peermem NVPEER=/usr/local/bin/nvpeer NVPEER_SRC=$repo" "$u/nvpeer-rebuild.service"
expect "rebuild unit: ExecStart=/usr/local/lib/nvpeer/nvpeer-rebuild" grep -qx 'ExecStart=/usr/local/lib/nvpeer/nvpeer-rebuild' "$u/nvpeer-rebuild.service"
expect "nvpeer-install uninstall (DESTDIR)" inst uninstall
expect_eq "nothing left after uninstall" "" "$(find "$root" -type f -o -type d -path '*/lib/nvpeer' 2>/dev/null)"
MODULE_NAME=nv_peer_mem expect "MODULE_NAME=nv_peer_mem" inst install
expect "... the attach unit loads nv_peer_mem" grep -qx 'ExecStart=/usr/local/bin/nvpeer attach --module nv_peer_mem' "$u/nvpeer-attach.service"
MODULE_NAME=nv_peer_mem inst uninstall >/dev/null

# --- 2. systemd-analyze verify --------------------------------------------------------------
# The installed units with their paths moved under DESTDIR (verify checks ExecStart exists).
expect "install again for verify" inst install
mkdir -p "$t/units"
for f in nvpeer-attach.service nvpeer-rebuild.path nvpeer-rebuild.service; do
    sed "s|/usr/local/|$root/usr/local/|g" "$u/$f" >"$t/units/$f"
done
verify() { systemd-analyze verify --man=no "$@" 2>&1; }
expect_eq "systemd-analyze verify: no complaint" "" "$(verify "$t/units/nvpeer-attach.service" "$t/units/nvpeer-rebuild.path" "$t/units/nvpeer-rebuild.service")"
sed -i 's|^PathChanged=/run|PathChanged=run|' "$t/units/nvpeer-rebuild.path"
expect "... and it reports a planted relative path" grep -q 'not absolute' <(verify "$t/units/nvpeer-rebuild.path")
inst uninstall >/dev/null

# --- 3. udevadm test ------------------------------------------------------------------------
for m in /sys/module/*; do other=${m##*/}; break; done
rule=$pk/90-nvpeer.rules
grep -qx 'SUBSYSTEM=="module", ACTION=="add", KERNEL=="ib_uverbs", TAG+="systemd", ENV{SYSTEMD_WANTS}+="nvpeer-attach.service"' <(grep -v '^#' "$rule") \
    && ok "the rule matches module add of ib_uverbs (not ib_core) and wants nvpeer-attach.service" \
    || bad "the rule is not the one line this test replays: $(grep -v '^#' "$rule")"
sed "s/KERNEL==\"ib_uverbs\"/KERNEL==\"ib_uverbs|$other\"/" "$rule" >"$t/replay.rules"
# udevadm_test RULE ACTION MODULE: the properties udev gives the uevent with only RULE installed.
udevadm_test() {
    # A private /run/udev too: udevadm test writes the device's database there (its mount point
    # is made where the host has none: a container without udev).
    mkdir -p /run/udev /etc/udev/rules.d
    # shellcheck disable=SC2016  # expanded by the inner sh
    unshare -m sh -c 'mount -t tmpfs none /etc/udev/rules.d && mount -t tmpfs none /run/udev &&
        cp "$1" /etc/udev/rules.d/90-nvpeer.rules &&
        udevadm test --action="$2" "/sys/module/$3" 2>&1' sh "$@"
}
out=$(udevadm_test "$t/replay.rules" add "$other")
grep -q 'Reading rules file: /etc/udev/rules.d/90-nvpeer.rules' <<<"$out" && ! grep -qi 'invalid\|error' <<<"$out" \
    && ok "udevadm reads the rule without complaint" || bad "udevadm on the rule: $(grep -i 'nvpeer\|invalid\|error' <<<"$out" | head -n 5)"
grep -qx 'SYSTEMD_WANTS=nvpeer-attach.service' <<<"$out" && grep -q '^TAGS=.*:systemd:' <<<"$out" \
    && ok "add of a matching module: SYSTEMD_WANTS=nvpeer-attach.service, TAG systemd" \
    || bad "add of a matching module: $(grep -E '^(SYSTEMD_WANTS|TAGS|ACTION)=' <<<"$out")"
out=$(udevadm_test "$t/replay.rules" remove "$other")
! grep -q '^SYSTEMD_WANTS=' <<<"$out" && ok "remove: nothing wanted" || bad "remove wants $(grep SYSTEMD_WANTS <<<"$out")"
out=$(udevadm_test "$rule" add "$other")
! grep -q '^SYSTEMD_WANTS=' <<<"$out" && ok "add of another module ($other): nothing wanted" || bad "$other wants $(grep SYSTEMD_WANTS <<<"$out")"

# --- 4. nvpeer-rebuild ----------------------------------------------------------------------
mkdir -p "$t/bin"
for tool in dkms make nvpeer; do
    cat >"$t/bin/$tool" <<EOF
#!/bin/bash
echo "$tool \$* OFA_DIR=\${OFA_DIR:-}" >>"$t/calls"
case "$tool \$1" in
"dkms status") [ -f "$t/dkms-status" ] && cat "$t/dkms-status" ;;
"dkms install") [ ! -f "$t/dkms-fails" ] ;;
esac
EOF
    chmod +x "$t/bin/$tool"
done
rebuild() { rm -f "$t/calls"; env -i PATH=/usr/bin:/bin KVER=7.2.0-test NVPEER_MODULE=nvidia_peermem DKMS="$t/bin/dkms" MAKE="$t/bin/make" \
    NVPEER="$t/bin/nvpeer" MOFED_ROOT="$t/mofed" MOFED_READY="$t/ready" MOFED_CONTAINER_OFA="$t/ofa" "$@" "$pk/nvpeer-rebuild" >"$t/rb.out" 2>&1; }
calls() { grep "^$1 " "$t/calls" 2>/dev/null; }
echo "nvpeer/0.1.0, 7.2.0-test, x86_64: installed" >"$t/dkms-status"
rebuild; rc=$?
expect_eq "DKMS: exit 0" 0 "$rc"
expect_eq "DKMS: dkms install --force nvpeer/0.1.0 -k 7.2.0-test" "dkms install --force nvpeer/0.1.0 -k 7.2.0-test OFA_DIR=" "$(calls 'dkms install')"
expect_eq "... then nvpeer attach --module nvidia_peermem" "nvpeer attach --module nvidia_peermem OFA_DIR=" "$(calls nvpeer)"
touch "$t/ready"; mkdir -p "$t/ofa"
rebuild
expect_eq "containerised MOFED ready: the build gets OFA_DIR" "dkms install --force nvpeer/0.1.0 -k 7.2.0-test OFA_DIR=$t/ofa" "$(calls 'dkms install')"
rebuild OFA_DIR=/opt/ofa
expect_eq "... an OFA_DIR from the caller wins" "OFA_DIR=/opt/ofa" "$(calls 'dkms install' | grep -o 'OFA_DIR=.*')"
rm -f "$t/ready"
# The path unit fires when the ready file goes too: a containerised MOFED there but not ready.
mkdir -p "$t/mofed"
rebuild; rc=$?
expect_eq "containerised MOFED not ready: exit 0, one line, nothing built or attached" "0 1 0" "$rc $(wc -l <"$t/rb.out") $( (cat "$t/calls" 2>/dev/null || true) | wc -l)"
expect "... saying so" grep -q "^nvpeer-rebuild: containerised MOFED at $t/mofed is not ready" "$t/rb.out"
rmdir "$t/mofed"
mkdir -p "$t/src/kmod"; : >"$t/src/Makefile"
rebuild NVPEER_SRC="$t/src"; rc=$?
expect_eq "make install checkout: make -C kmod clean, then make install" \
    "make -s -C $t/src/kmod KDIR=/lib/modules/7.2.0-test/build MODULE_NAME=nvidia_peermem clean OFA_DIR=
make -s -C $t/src install KDIR=/lib/modules/7.2.0-test/build MODULE_NAME=nvidia_peermem OFA_DIR=" "$(calls make)"
expect_eq "... no DKMS, exit 0, attach" "0 1" "$rc $(calls nvpeer | wc -l)"
rebuild NVPEER_SRC="$t/moved"; rc=$?
expect_eq "moved checkout: exit 1, one line, no build" "1 1 0" "$rc $(wc -l <"$t/rb.out") $( (cat "$t/calls" 2>/dev/null || true) | wc -l)"
expect "... naming it" grep -q "NVPEER_SRC=$t/moved is not the nvpeer checkout" "$t/rb.out"
rm -f "$t/dkms-status"
rebuild; rc=$?
expect_eq "nothing to rebuild from: exit 1, one line, no attach" "1 1 0" "$rc $(wc -l <"$t/rb.out") $(calls nvpeer | wc -l)"
echo "nvpeer/0.1.0: added" >"$t/dkms-status"; touch "$t/dkms-fails"
rebuild; rc=$?
expect_eq "a failed dkms build: exit 1, one line, no attach" "1 1 0" "$rc $(wc -l <"$t/rb.out") $(calls nvpeer | wc -l)"
expect "... naming the command" grep -qx "nvpeer-rebuild: dkms install --force nvpeer/0.1.0 -k 7.2.0-test failed" "$t/rb.out"
echo "[test-units] $pass ok, $fail failed"
[ "$fail" = 0 ]
