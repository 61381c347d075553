#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Host-side, fast: kmod/packaging/nvpeer-migrate against fake /etc trees (ROOT=<dir>).
# --dry-run: the plan for nv_peer_mem (SysV, upstart, systemd, ONBOOT) and NVIDIA's nvidia-peermem
# (modules-load.d), options carried over, nothing changed and nothing run. Then a real run with
# stub commands (make, modprobe, rmmod, systemctl, update-rc.d, nvpeer) edits only the fake tree,
# and --revert restores it byte for byte.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
mig=$repo/kmod/packaging/nvpeer-migrate
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok    $*"; }
bad() { fail=$((fail + 1)); echo "FAIL  $*"; }
has() { if grep -qF -- "$2" "$t/out"; then ok "$1"; else bad "$1: no line '$2' in:"; sed 's/^/      /' "$t/out"; fi; }
hasnt() { if grep -qF -- "$2" "$t/out"; then bad "$1: unexpected '$2'"; else ok "$1"; fi; }
snap() { (cd "$1" && find . -type f -o -type l | sort | while read -r f; do echo "$f $(readlink "$f" || md5sum < "$f")"; done); }

# Stubs: every command the script runs on the live system logs its call instead.
mkdir -p "$t/stubs"
for c in make modprobe rmmod systemctl update-rc.d nvpeer; do
    printf '#!/bin/sh\necho "%s $*" >> %s/calls\n' "$c" "$t" > "$t/stubs/$c"; chmod +x "$t/stubs/$c"
done
export PATH=$t/stubs:$PATH KVER=9.9.9-test

# Tree 1: nv_peer_mem the Mellanox way (SysV + upstart + conf ONBOOT), loaded, with enable_dbg.
r1=$t/r1
mkdir -p $r1/etc/init.d $r1/etc/init $r1/etc/infiniband $r1/etc/modprobe.d $r1/sys/module/nv_peer_mem $r1/lib/systemd/system
printf '#!/bin/sh\necho "init.d/nv_peer_mem $*" >> %s/calls\n' "$t" > $r1/etc/init.d/nv_peer_mem; chmod +x $r1/etc/init.d/nv_peer_mem
echo 'start on (startup and started openibd)' > $r1/etc/init/nv_peer_mem.conf
printf '# nv_peer_mem\nONBOOT=yes\n' > $r1/etc/infiniband/nv_peer_mem.conf
echo 'options nv_peer_mem enable_dbg=1' > $r1/etc/modprobe.d/nv_peer_mem.conf
echo '[Service]' > $r1/lib/systemd/system/nv_peer_mem.service

# Tree 2: NVIDIA's nvidia-peermem loaded at boot by modules-load.d, with options.
r2=$t/r2
mkdir -p $r2/etc/modules-load.d $r2/usr/lib/modules-load.d $r2/etc/modprobe.d $r2/sys/module/nvidia_peermem \
    $r2/lib/modules/9.9.9-test/kernel/drivers/video
printf 'nvidia-peermem\n' > $r2/etc/modules-load.d/gpu.conf
printf 'nvidia_peermem\n' > $r2/usr/lib/modules-load.d/nvidia-peermem.conf
printf 'loop\nnvidia-peermem\n' > $r2/etc/modules
printf 'options nvidia-peermem peerdirect_support=1\noptions nvidia_peermem persistent_api_support=0\n' > $r2/etc/modprobe.d/nvidia.conf
touch $r2/lib/modules/9.9.9-test/kernel/drivers/video/nvidia-peermem.ko

# --- dry runs -------------------------------------------------------------------------------------
for r in $r1 $r2; do snap $r > $r.before; done
rm -f $t/calls
ROOT=$r1 "$mig" --dry-run > $t/out 2>&1; rc=$?
[ $rc = 0 ] && ok "dry run (nv_peer_mem) exits 0" || { bad "dry run (nv_peer_mem) exit $rc"; cat $t/out; }
has "finds the SysV script" "found: nv_peer_mem SysV service (/etc/init.d/nv_peer_mem)"
has "plans to stop it" "plan: stop the nv_peer_mem service: $r1/etc/init.d/nv_peer_mem stop"
has "plans to disable it at boot" "plan: disable it at boot: update-rc.d nv_peer_mem disable"
has "finds the upstart job" "found: nv_peer_mem upstart job"
has "plans the upstart override" "plan: disable the upstart job (manual override)"
has "finds the systemd unit" "found: systemd unit /lib/systemd/system/nv_peer_mem.service"
has "plans systemctl disable --now" "plan: stop and disable nv_peer_mem.service: systemctl disable --now nv_peer_mem.service"
has "finds ONBOOT=yes" "found: ONBOOT=yes in /etc/infiniband/nv_peer_mem.conf"
has "plans ONBOOT=no" "plan: set ONBOOT=no in /etc/infiniband/nv_peer_mem.conf"
has "plans to unload nv_peer_mem" "plan: unload nv_peer_mem: rmmod nv_peer_mem"
has "says enable_dbg is not carried over" "enable_dbg=1 (/etc/modprobe.d/nv_peer_mem.conf) is not carried over"
has "plans make install (no options)" "plan: install nvpeer: make -s -C $repo install NVPEER_OPTIONS="
has "plans modprobe nvidia_peermem" "plan: load nvpeer: modprobe nvidia_peermem"
has "plans nvpeer check" "plan: check the host:"
has "says nothing changed" "dry run: nothing changed"

ROOT=$r2 "$mig" --dry-run > $t/out 2>&1; rc=$?
[ $rc = 0 ] && ok "dry run (nvidia-peermem) exits 0" || { bad "dry run (nvidia-peermem) exit $rc"; cat $t/out; }
has "finds modules-load.d entry" "found: boot loading in /etc/modules-load.d/gpu.conf: nvidia-peermem"
has "plans to comment it out" "plan: comment out the entry in /etc/modules-load.d/gpu.conf"
has "finds /etc/modules entry" "found: boot loading in /etc/modules: nvidia-peermem"
has "finds the package's modules-load.d file" "found: boot loading in /usr/lib/modules-load.d/nvidia-peermem.conf (a package's file)"
has "plans to mask it" "plan: mask /usr/lib/modules-load.d/nvidia-peermem.conf with /etc/modules-load.d/nvidia-peermem.conf -> /dev/null"
has "plans to unload NVIDIA's nvidia_peermem" "plan: unload nvidia_peermem: rmmod nvidia_peermem"
has "names NVIDIA's module file" "note: NVIDIA's module file(s) /lib/modules/9.9.9-test/kernel/drivers/video/nvidia-peermem.ko"
has "carries both options over" "options carried over: peerdirect_support=1 persistent_api_support=0"
has "passes them to make install" "install NVPEER_OPTIONS=peerdirect_support=1 persistent_api_support=0"
hasnt "no SysV plan here" "init.d"

mkdir -p $t/r3/sys/module/nvidia_peermem/nvpeer
ROOT=$t/r3 "$mig" --dry-run > $t/out 2>&1
has "clean host: says nothing found" "found: neither nv_peer_mem nor nvidia-peermem is set up here"
has "clean host: nvpeer already loaded is not unloaded" "nvpeer is already loaded as nvidia_peermem"
hasnt "clean host: no rmmod" "rmmod"
ROOT=$t/r3 "$mig" --dry-run --revert > $t/out 2>&1 && bad "--revert without a migration succeeded" || has "--revert without a migration refused" "nothing was migrated here"

for r in $r1 $r2; do snap $r > $r.after; cmp -s $r.before $r.after && ok "dry run changed nothing in $(basename $r)" || bad "dry run changed $(basename $r)"; done
[ ! -e $t/calls ] && ok "dry runs ran no command" || { bad "dry runs ran:"; cat $t/calls; }

# --- real run and revert, with stubs, on the fake trees ---------------------------------------------
ROOT=$r1 "$mig" > $t/out 2>&1 && ok "migrate (nv_peer_mem tree, stubs)" || { bad "migrate r1"; cat $t/out; }
grep -q '^ONBOOT=no$' $r1/etc/infiniband/nv_peer_mem.conf && ok "ONBOOT=no written" || bad "ONBOOT not changed"
[ "$(cat $r1/etc/init/nv_peer_mem.override 2>/dev/null)" = manual ] && ok "upstart override written" || bad "no upstart override"
for c in "init.d/nv_peer_mem stop" "update-rc.d nv_peer_mem disable" "systemctl disable --now nv_peer_mem.service" \
         "rmmod nv_peer_mem" "make -s -C $repo install NVPEER_OPTIONS=" "modprobe nvidia_peermem" "nvpeer check"; do
    grep -qxF -- "$c" $t/calls && ok "ran: $c" || { bad "did not run: $c"; cat $t/calls; }
done
ROOT=$r1 "$mig" --dry-run > $t/out 2>&1 && bad "second migration not refused" || has "second migration refused" "already migrated"
rm -f $t/calls
ROOT=$r1 "$mig" --revert > $t/out 2>&1 && ok "revert (nv_peer_mem tree)" || { bad "revert r1"; cat $t/out; }
for c in "make -s -C $repo uninstall" "update-rc.d nv_peer_mem enable" "init.d/nv_peer_mem start" \
         "systemctl enable --now nv_peer_mem.service" "modprobe nv_peer_mem"; do
    grep -qxF -- "$c" $t/calls && ok "revert ran: $c" || { bad "revert did not run: $c"; cat $t/calls; }
done
snap $r1 > $r1.reverted; cmp -s $r1.before $r1.reverted && ok "revert restored the nv_peer_mem tree exactly" || { bad "tree differs after revert"; diff $r1.before $r1.reverted; }

ROOT=$r2 "$mig" > $t/out 2>&1 && ok "migrate (nvidia-peermem tree, stubs)" || { bad "migrate r2"; cat $t/out; }
grep -qx '#nvpeer-migrate# nvidia-peermem' $r2/etc/modules-load.d/gpu.conf && ok "modules-load.d entry commented out" || bad "gpu.conf not edited"
grep -qx 'loop' $r2/etc/modules && grep -qx '#nvpeer-migrate# nvidia-peermem' $r2/etc/modules && ok "/etc/modules: only the entry commented out" || bad "/etc/modules wrong"
[ "$(readlink $r2/etc/modules-load.d/nvidia-peermem.conf)" = /dev/null ] && ok "package's modules-load.d file masked" || bad "not masked"
grep -qxF "make -s -C $repo install NVPEER_OPTIONS=peerdirect_support=1 persistent_api_support=0" $t/calls && ok "make install got the options" || bad "options not passed"
ROOT=$r2 "$mig" --revert > $t/out 2>&1 && ok "revert (nvidia-peermem tree)" || { bad "revert r2"; cat $t/out; }
snap $r2 > $r2.reverted; cmp -s $r2.before $r2.reverted && ok "revert restored the nvidia-peermem tree exactly" || { bad "tree differs after revert"; diff $r2.before $r2.reverted; }

echo "[test-migrate] $pass ok, $fail failed"
[ $fail = 0 ]
