#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# test-deb.sh: `make deb` (dist/debian/make-deb.sh) builds nvpeer and nvpeer-dkms into build/deb/
# (where tests/scenarios/deb.sh, in the VM, takes them from); their contents (dpkg-deb -c/-x):
# the CLI, one man page per subcommand of the packaged binary, the bash/zsh/fish completions, the
# units (nvpeer.service, nvpeer-attach.service, nvpeer-rebuild.path/.service) with their
# placeholders filled, the udev rule 90-nvpeer.rules and nvpeer-rebuild, the NHC and Slurm files, the DKMS source tree with
# kmod/dkms.conf and BUILD_EXCLUSIVE_KERNEL (5.14 and newer: dkms skips an older kernel: exit 77, and
# builds for one without Rust; temp DKMS trees only), the dh_dkms maintainer scripts; lintian
# without errors.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
. "$repo/tests/setup/env.sh"
ver=$(sed -n 's/^NVPEER_VERSION ?= //p' "$repo/kmod/Kbuild")
out=$repo/build/deb
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok    $*"; }
bad() { fail=$((fail + 1)); echo "FAIL  $*"; }
expect() { local d=$1; shift; if "$@" >"$t/out" 2>&1; then ok "$d"; else bad "$d"; sed 's/^/      /' "$t/out" | tail -n 30; fi; }
expect_eq() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1: expected '$2', got '$3'"; fi; }

for tool in dpkg-buildpackage dh_dkms lintian dkms; do
    command -v "$tool" >/dev/null || { echo "FAIL  $tool not installed (tests/setup/deps.sh installs it)"; exit 1; }
done
expect_eq "make deb runs dist/debian/make-deb.sh build/deb" "dist/debian/make-deb.sh build/deb" \
    "$(make -s -n -C "$repo" deb KDIR=unused 2>&1)"
expect "make deb (dist/debian/make-deb.sh)" "$repo/dist/debian/make-deb.sh" "$out"
cli=$out/nvpeer_${ver}_$(dpkg --print-architecture).deb
dk=$out/nvpeer-dkms_${ver}_all.deb
expect "built $(basename "$cli")" test -s "$cli"
expect "built $(basename "$dk")" test -s "$dk"
[ -s "$cli" ] && [ -s "$dk" ] || { echo "[test-deb] $pass ok, $fail failed"; exit 1; }

# dpkg-deb -c: "perms owner size date time ./path".
dpkg-deb -c "$cli" | awk '{print $1, substr($6, 3)}' > "$t/cli.list"
dpkg-deb -c "$dk" | awk '{print $1, substr($6, 3)}' > "$t/dk.list"
has() { grep -qE "^$2 $3\$" "$t/$1.list"; }
mkdir -p "$t/cli" "$t/dk"
dpkg-deb -x "$cli" "$t/cli"; dpkg-deb -e "$cli" "$t/cli/DEBIAN"
dpkg-deb -x "$dk" "$t/dk"; dpkg-deb -e "$dk" "$t/dk/DEBIAN"

# nvpeer: the CLI and its pages, one per subcommand of the binary that was packaged.
expect "nvpeer: usr/bin/nvpeer, executable" has cli '-rwxr-xr-x' usr/bin/nvpeer
expect_eq "packaged nvpeer --version" "nvpeer $ver" "$("$t/cli/usr/bin/nvpeer" --version 2>&1)"
subs=$("$t/cli/usr/bin/nvpeer" --help | sed -n '/^Commands:/,/^$/{s/^  \([a-z][a-z-]*\) .*/\1/p}' | grep -vx help)
expect "the binary lists subcommands (check, stats, ...)" grep -qx check <<<"$subs"
for page in nvpeer $(sed 's/^/nvpeer-/' <<<"$subs"); do
    expect "man page usr/share/man/man1/$page.1.gz" has cli '-rw-r--r--' "usr/share/man/man1/$page.1.gz"
done
pages=$(grep -c 'usr/share/man/man1/.*\.1\.gz$' "$t/cli.list")
expect_eq "one page per subcommand, plus nvpeer.1" "$(($(wc -l <<<"$subs") + 1))" "$pages"
expect "nvpeer-check(1) documents --brief" grep -q 'brief' <(zcat "$t/cli/usr/share/man/man1/nvpeer-check.1.gz")
expect "nvpeer(1) names nvpeer-check(1)" grep -q 'nvpeer\\-check(1)' <(zcat "$t/cli/usr/share/man/man1/nvpeer.1.gz")
expect "nvpeer(1) renders without groff warnings" test -z "$(man --warnings -l "$t/cli/usr/share/man/man1/nvpeer.1.gz" 2>&1 >/dev/null)"
expect_fail_grep() { if grep -q "$2" "$3"; then bad "$1"; else ok "$1"; fi; }
expect_fail_grep "no page for the hidden generator" __generate "$t/cli.list"

bash_c=usr/share/bash-completion/completions/nvpeer
zsh_c=usr/share/zsh/vendor-completions/_nvpeer
fish_c=usr/share/fish/vendor_completions.d/nvpeer.fish
for c in "$bash_c" "$zsh_c" "$fish_c"; do expect "completion $c" has cli '-rw-r--r--' "$c"; done
expect "bash completion: valid bash, complete -F for nvpeer" bash -c "bash -n '$t/cli/$bash_c' && grep -q 'complete -F _nvpeer .*nvpeer' '$t/cli/$bash_c'"
expect "bash completion offers nccl-log" grep -q 'nccl-log' "$t/cli/$bash_c"
expect_eq "zsh completion: #compdef nvpeer" "#compdef nvpeer" "$(head -n1 "$t/cli/$zsh_c")"
expect "fish completion: complete -c nvpeer" grep -q '^complete -c nvpeer' "$t/cli/$fish_c"
expect_fail_grep "completions do not offer the hidden generator" __generate "$t/cli/$bash_c"

unit=$(grep -oE '(usr/)?lib/systemd/system/nvpeer.service$' "$t/cli.list")
expect "systemd unit nvpeer.service" test -n "$unit"
expect "unit: ExecStart=/sbin/modprobe nvidia_peermem" grep -qx 'ExecStart=/sbin/modprobe nvidia_peermem' "$t/cli/$unit"
expect "unit: ExecStartPost=-/usr/bin/nvpeer check" grep -qx 'ExecStartPost=-/usr/bin/nvpeer check' "$t/cli/$unit"
expect_fail_grep "unit: every @PLACEHOLDER@ filled" '@[A-Z]*@' "$t/cli/$unit"
# Opt-in, as with make install (dh_installsystemd --no-enable --no-start).
expect_fail_grep "postinst does not start nvpeer.service" 'deb-systemd-invoke' "$t/cli/DEBIAN/postinst"
# Re-attach and rebuild (issue 37): the udev rule, the static attach unit, the rebuild path unit
# (installed, not enabled) and its script.
rules=$(grep -oE '(usr/)?lib/udev/rules.d/90-nvpeer.rules$' "$t/cli.list")
expect "udev rule 90-nvpeer.rules" test -n "$rules"
expect "udev rule = kmod/packaging/90-nvpeer.rules" cmp "$repo/kmod/packaging/90-nvpeer.rules" "$t/cli/$rules"
for u in nvpeer-attach.service nvpeer-rebuild.path nvpeer-rebuild.service; do
    f=$(grep -oE "(usr/)?lib/systemd/system/$u\$" "$t/cli.list")
    expect "unit $u" test -n "$f"
    expect_fail_grep "$u: every @PLACEHOLDER@ filled" '@[A-Z]*@' "$t/cli/$f"
    cp "$t/cli/$f" "$t/$u"
done
expect "attach unit: ExecStart=/usr/bin/nvpeer attach --module nvidia_peermem" grep -qx 'ExecStart=/usr/bin/nvpeer attach --module nvidia_peermem' "$t/nvpeer-attach.service"
expect "rebuild unit: /usr/lib/nvpeer/nvpeer-rebuild through DKMS (no checkout)" bash -c \
    "grep -qx 'ExecStart=/usr/lib/nvpeer/nvpeer-rebuild' '$t/nvpeer-rebuild.service' && grep -qx 'Environment=NVPEER_MODULE=nvidia_peermem NVPEER=/usr/bin/nvpeer NVPEER_SRC=' '$t/nvpeer-rebuild.service'"
expect "rebuild path unit: this architecture's MOFED directory" grep -qx "PathChanged=/usr/src/ofa_kernel/$(dpkg-architecture -qDEB_HOST_GNU_CPU)/%v/Module.symvers" "$t/nvpeer-rebuild.path"
expect "usr/lib/nvpeer/nvpeer-rebuild, executable" has cli '-rwxr-xr-x' usr/lib/nvpeer/nvpeer-rebuild
expect "NHC file etc/nhc/scripts/nvpeer.nhc = dist/nhc/nvpeer.nhc" cmp "$repo/dist/nhc/nvpeer.nhc" "$t/cli/etc/nhc/scripts/nvpeer.nhc"
expect "NHC file is a conffile" grep -qx /etc/nhc/scripts/nvpeer.nhc "$t/cli/DEBIAN/conffiles"
for s in prolog epilog; do
    expect "usr/lib/nvpeer/slurm/$s-nvpeer, executable" has cli '-rwxr-xr-x' "usr/lib/nvpeer/slurm/$s-nvpeer"
    expect "$s-nvpeer = dist/slurm/$s-nvpeer" cmp "$repo/dist/slurm/$s-nvpeer" "$t/cli/usr/lib/nvpeer/slurm/$s-nvpeer"
done

# nvpeer-dkms: the source tree `make dkms-install` would give, dkms.conf through dh_dkms.
src=usr/src/nvpeer-$ver
expect "nvpeer-dkms: $src/dkms.conf" has dk '-rw-r--r--' "$src/dkms.conf"
expect "dkms.conf is kmod/dkms.conf" cmp "$repo/kmod/dkms.conf" "$t/dk/$src/dkms.conf"
expect "dkms.conf: BUILD_EXCLUSIVE_KERNEL (5.14 and newer)" grep -qF 'BUILD_EXCLUSIVE_KERNEL="^(5\.(1[4-9]|' "$t/dk/$src/dkms.conf"
expect "dkms.conf: PACKAGE_VERSION=\"$ver\"" grep -qx "PACKAGE_VERSION=\"$ver\"" "$t/dk/$src/dkms.conf"
expect_fail_grep "dkms.conf: signing left to dkms (no SIGN_TOOL)" '^SIGN_TOOL' "$t/dk/$src/dkms.conf"
# Every source of kmod/ (the client, the glue, the runtime, the build scripts), its mode kept: the
# scripts are run, not sourced.
for f in Kbuild Makefile $(cd "$repo/kmod" && git ls-files client glue runtime scripts); do
    mode='-rw-r--r--'; [ -x "$repo/kmod/$f" ] && mode='-rwxr-xr-x'
    expect "$src/kmod/$f ($mode)" has dk "$mode" "$src/kmod/$f"
done
for f in $(cd "$repo/include" && find . -type f | sed 's|^\./||'); do
    expect "$src/include/$f" cmp "$repo/include/$f" "$t/dk/$src/include/$f"
done
expect_fail_grep "no build outputs in the source tree" '\.ko$\|\.o$\|/build/' "$t/dk.list"
expect "Depends: dkms" grep -qE '^Depends:.*\bdkms\b' "$t/dk/DEBIAN/control"
expect_eq "Architecture: all" all "$(dpkg-deb -f "$dk" Architecture)"
expect "postinst: dkms common.postinst for nvpeer $ver" bash -c "grep -qx 'DKMS_NAME=nvpeer' '$t/dk/DEBIAN/postinst' && grep -qx 'DKMS_VERSION=$ver' '$t/dk/DEBIAN/postinst' && grep -q /usr/lib/dkms/common.postinst '$t/dk/DEBIAN/postinst'"
expect "prerm: dkms remove --all" grep -q 'dkms remove -m $DKMS_NAME -v $DKMS_VERSION --all' "$t/dk/DEBIAN/prerm"

# BUILD_EXCLUSIVE_KERNEL in effect: dkms skips (77) a kernel older than 5.14, and does not skip
# a newer one without CONFIG_RUST (temp DKMS trees, a kernel "source" that is only a .config).
mkdir -p "$t/dkms" "$t/inst" "$t/ksrc"
printf 'CONFIG_MODULES=y\n# CONFIG_RUST is not set\n' > "$t/ksrc/.config"
dkt() { local k=$1; shift; dkms --dkmstree "$t/dkms" --sourcetree "$t/dk/usr/src" --installtree "$t/inst" --no-depmod "$@" -k "$k" --kernelsourcedir "$t/ksrc"; }
expect "dkms add (packaged source)" dkt 5.10.0-nvpeer-test add "nvpeer/$ver"
dkt 5.10.0-nvpeer-test build "nvpeer/$ver" >"$t/b1" 2>&1; rc=$?
expect_eq "dkms build for Linux 5.10 (below the floor): skipped (77)" 77 "$rc"
dkt 6.1.0-nvpeer-test add "nvpeer/$ver" >/dev/null 2>&1
dkt 6.1.0-nvpeer-test build "nvpeer/$ver" >"$t/b2" 2>&1; rc=$?
[ "$rc" != 77 ] && ! grep -q BUILD_EXCLUSIVE "$t/b2" && ok "... Linux 6.1 without CONFIG_RUST: not excluded (exit $rc: no kernel tree here)" \
    || bad "Linux 6.1 excluded too (exit $rc): $(head -n2 "$t/b2")"

# lintian: errors fail; warnings and infos are listed.
lintian --fail-on error --display-info "$cli" "$dk" >"$t/lintian" 2>&1; rc=$?
grep -E '^[EWI]: ' "$t/lintian" | sed 's/^/      lintian: /'
errors=$(grep -c '^E: ' "$t/lintian")
expect_eq "lintian: exit 0 and no errors ($(grep -c '^W: ' "$t/lintian") warnings, $(grep -c '^I: ' "$t/lintian") infos)" "0 0" "$rc $errors"
echo "[test-deb] $pass ok, $fail failed"
[ $fail = 0 ]
