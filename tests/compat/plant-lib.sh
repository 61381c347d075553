# shellcheck shell=bash
# SPDX-License-Identifier: GPL-2.0
# plant-lib.sh: what the planted-build tests share (test-wrong-shard.sh, test-callback-stall.sh).
# Sourced after `repo`, `kdir` and `plant_name` are set; defines check, stop, stand_ins (the
# stand-ins built for KDIR by tests/build-all.sh, checked) and plant_build.
# shellcheck disable=SC2154  # repo, kdir and plant_name: the sourcing script's
fails=0
check() {  # check DESCRIPTION COMMAND...
    if "${@:2}"; then echo "ok    $1"; else echo "FAIL  $1"; fails=$((fails + 1)); fi
}
stop() { echo "FAIL  $1"; echo "$plant_name plant: cannot run"; exit 1; }
release=$(cat "$kdir/include/config/kernel.release") || stop "no kernel release in $kdir"
stand_ins=("$repo"/tests/stand-ins/nv_p2p_sim/nv_p2p_sim.ko "$repo"/tests/stand-ins/peer_core_sim/peer_core_sim.ko)
for ko in "${stand_ins[@]}"; do
    [ "$(modinfo -F vermagic "$ko" 2>/dev/null | cut -d' ' -f1)" = "$release" ] ||
        stop "$ko is not built for $release (tests/build-all.sh $kdir)"
done
# plant_build DIR PLANT: a copy of kmod/ and include/ (side by side, as the module's build
# expects, without the main tree's build outputs) in DIR/src, built with NVPEER_PLANT=PLANT; the
# module and the stand-ins in DIR/ko.
plant_build() {
    local dir=$1 plant=$2
    mkdir -p "$dir/src" "$dir/ko"
    cp -r "$repo/include" "$dir/src/include"
    cp -r "$repo/kmod" "$dir/src/kmod"
    rm -rf "$dir/src/kmod/build" "$dir"/src/kmod/*.ko
    make -s -C "$dir/src/kmod" KDIR="$kdir" NVPEER_PLANT="$plant" >"$dir/build.log" 2>&1 ||
        { cat "$dir/build.log"; stop "the $plant module builds"; }
    echo "ok    the $plant module builds"
    cp "$dir/src/kmod/nvidia_peermem.ko" "${stand_ins[@]}" "$dir/ko/" || stop "the modules copied to $dir/ko"
}
