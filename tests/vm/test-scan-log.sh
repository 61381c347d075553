#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# scan-log.sh must name each kind of kernel report in real report text, and find nothing in a
# clean boot log.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
bad=0
check() { # check KIND TEXT
    printf '[    1.000000] booting\n%s\n' "$2" > "$tmp/log"
    local got; got=$("$here/scan-log.sh" "$tmp/log")
    case ",$got," in *",$1,"*) ;; *) echo "scan-log: '$2' not reported as $1 (got '$got')"; bad=1 ;; esac
}
check_only() { # check_only KIND TEXT: KIND and no other
    printf '[    1.000000] booting\n%s\n' "$2" > "$tmp/log"
    local got; got=$("$here/scan-log.sh" "$tmp/log")
    [ "$got" = "$1" ] || { echo "scan-log: '$2' not reported as $1 alone (got '$got')"; bad=1; }
}
check WARN '[   12.1] WARNING: CPU: 0 PID: 77 at nvpeer_plant.c:17 nvpeer_plant_init+0x2a/0x50 [nvpeer_plant]'
check BUG '[   12.1] BUG: kernel NULL pointer dereference, address: 0000000000000008'
check BUG '[   12.1] Oops: general protection fault, probably for non-canonical address'
check lockdep '[   12.1] WARNING: possible circular locking dependency detected'
check lockdep '[   12.1] WARNING: inconsistent lock state'
check kmemleak 'unreferenced object 0xffff888003a4c000 (size 4096):'
check kmemleak '[   30.1] kmemleak: 1 new suspected memory leaks (see /sys/kernel/debug/kmemleak)'
check KFENCE '[   12.1] BUG: KFENCE: use-after-free read in nvpeer_put_pages+0x10/0x40'
check_only KFENCE '[   12.1] BUG: KFENCE: use-after-free write in nv_get_p2p_free_callback+0xab/0x108 [nvidia_peermem]'
check_only hung-task '[   60.1] watchdog: BUG: soft lockup - CPU#0 stuck for 26s! [stress:90]'
check BUG $'[   12.1] BUG: KFENCE: out-of-bounds read in f+0x1/0x2\n[   13.1] BUG: unable to handle page fault for address: 0000000000001000'
check SLUB '[   12.1] BUG kmalloc-64 (Not tainted): Poison overwritten'
check hung-task '[  130.1] INFO: task insmod:88 blocked for more than 30 seconds.'
check hung-task '[   60.1] watchdog: BUG: soft lockup - CPU#0 stuck for 26s! [stress:90]'
printf '[    0.0] Linux version 7.2.12\n[    1.0] rdma_rxe: loaded\n[    2.0] nvidia_peermem: nvpeer loaded\n' > "$tmp/clean"
if got=$("$here/scan-log.sh" "$tmp/clean"); then echo "scan-log: clean log reported as '$got'"; bad=1; fi
[ $bad -eq 0 ] && echo "scan-log: every report kind detected, clean log clean"
exit $bad
