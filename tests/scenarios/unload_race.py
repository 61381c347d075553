# SPDX-License-Identifier: GPL-2.0
"""rmmod racing an in-flight acquire (REVIEW-KMOD C1, issue 14): a registration stops inside the
pin that the client's acquire makes (nv_p2p_sim's STALL_IN_GET_PAGES, the core's
peer_memory_mutex held), rmmod of the client starts, the pin goes on, then the buffer is freed.
Whatever the client does about the rmmod (refuse it, decline the registration, or wait for it),
the MR must never be left mapped after the cudaFree: either the registration failed, or the free
revoked it through the core (the NIC's DMA fails, the MR reads "invalidated").

Before the fix, ours took its module reference with __module_get on a module already going,
the MR was created, rmmod cleared the core handle while it waited in unregister, and the free
callback could not tell the core: the NIC kept DMA access to freed GPU memory.

Run against NVIDIA's module too (client "reference"): its outcome is recorded, and held to the
same rule.

Then, ours only, the other end of the module's life (REVIEW-KMOD-2 T3-4): init registers nv_mem,
then nv_mem_nc, whose registration the core stand-in stalls and then refuses (its fail_register
knob, as MOFED refuses a clashing name); meanwhile a GPU buffer is registered. No client may take
it before init is done: a registration through nv_mem would make the failing init's unregister
wait for it, so insmod would hang until the application deregistered.

Usage (in the VM): unload_race.py ours|reference"""

import errno
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stack import OURS, Stack, Tally, loaded, our_stats, sh  # noqa: E402
import coresim  # noqa: E402
import nvsim  # noqa: E402
from revocation import dma_fails  # noqa: E402

MIB = 1 << 20
HANG_S = 20


def race(t, st, label):
    nv = nvsim.NvP2pSim()
    core = coresim.PeerCoreSim()
    nv.reset()
    a = nv.alloc(2 * MIB)
    nv.stall_at(a.va, "in_get_pages")
    res = {}

    def register():
        try:
            res["reg"] = core.reg(a.va, 2 * MIB)
        except OSError as e:
            res["err"] = e.errno

    reg_th = threading.Thread(target=register)
    reg_th.start()
    nv.stall_wait()
    rmmod = {}

    def unload():
        rmmod["rc"], rmmod["err"] = st.unload_client()

    rm_th = threading.Thread(target=unload)
    rm_th.start()
    rm_th.join(2)  # rmmod either answers at once or waits in the core's unregister
    rmmod_waited = rm_th.is_alive()
    nv.stall_resume()
    reg_th.join(HANG_S)
    if not t.check(f"{label} the stalled registration returns", not reg_th.is_alive()):
        raise RuntimeError("registration hung: the VM cannot go on")
    reg = res.get("reg")
    outcome = ("rmmod waited for the MR" if rmmod_waited else
               f"rmmod answered at once ({'refused: ' + rmmod.get('err', '') if rmmod.get('rc') else 'unloaded'})")
    print(f"info  {label} outcome: {outcome}; registration "
          f"{'made MR ' + str(reg['id']) + ' by ' + reg['client'] if reg else 'failed: ' + errno.errorcode.get(res.get('err'), '?')}",
          flush=True)
    if reg:
        a.free()
        info = core.mr_info(reg["id"])
        t.check(f"{label} after the cudaFree the MR is revoked through the core, not left mapped",
                info["state"] == "invalidated" and dma_fails(core, reg["id"]), info)
        core.dereg_mr(reg["id"])
    else:
        t.check(f"{label} the registration was refused cleanly (EFAULT)", res.get("err") == errno.EFAULT,
                res.get("err"))
        a.free()
    rm_th.join(HANG_S)
    if not t.check(f"{label} rmmod returns once the MR is gone", not rm_th.is_alive()):
        raise RuntimeError("rmmod hung: the VM cannot go on")
    if st.client == "ours":
        # Ours takes its module reference before it pins, so the in-flight acquire makes rmmod
        # refuse at once (EBUSY) rather than wait; a module already going declines instead.
        t.check(f"{label} ours: rmmod refused while the acquire was in flight, or the MR was declined",
                (not rmmod_waited and rmmod.get("rc") != 0) or reg is None, (outcome, reg))
    c = nv.counters()
    t.check(f"{label} nothing pinned or mapped afterwards",
            c["pins"] == 0 and c["persistent_pins"] == 0 and c["mappings"] == 0, c)
    t.eq(f"{label} no stale page-table use", 0, c["stale_table_uses"])
    if st.client == "ours" and os.path.exists("/sys/module/nvidia_peermem"):
        t.eq(f"{label} our live contexts back to 0", 0, our_stats()["live_contexts"])
    core.close()
    nv.close()


def init_race(t, gen):
    label = f"[ours {gen} init]"
    with Stack(gen, client="ours", pt_version=0x00020000,
               client_params=["persistent_api_support=0"]) as st:
        st.unload_client()
        nv = nvsim.NvP2pSim()
        core = coresim.PeerCoreSim()
        nv.reset()
        knob = f"/sys/module/{st.core_module}/parameters/fail_register"
        with open(knob, "w") as f:
            f.write("nv_mem_nc")
        res = {}

        def insmod():
            res["rc"] = sh("insmod", OURS, "persistent_api_support=0", check=False).returncode

        ins_th = threading.Thread(target=insmod)
        ins_th.start()
        core.stall_wait(coresim.STALL_CORE)  # init registered nv_mem and waits in nv_mem_nc's
        a = nv.alloc(2 * MIB)
        try:
            reg = core.reg(a.va, 2 * MIB)
            err = 0
        except OSError as e:
            reg, err = None, e.errno
        core.stall_resume(coresim.STALL_CORE)
        ins_th.join(5)
        returned = not ins_th.is_alive()
        if reg:
            core.dereg_mr(reg["id"])  # lets a hanging init go on
        ins_th.join(HANG_S)
        with open(knob, "w") as f:
            f.write("")
        if not t.check(f"{label} insmod returns", not ins_th.is_alive()):
            raise RuntimeError("insmod hung: the VM cannot go on")
        t.check(f"{label} insmod failed at once (the refused nv_mem_nc), waiting for no registration",
                returned and res.get("rc") != 0 and not loaded("nvidia_peermem"), (returned, res))
        t.eq(f"{label} the registration made while init waited was taken by no client (EFAULT)",
             errno.EFAULT, err)
        a.free()
        c = nv.counters()
        t.check(f"{label} nothing pinned or mapped afterwards",
                c["pins"] == 0 and c["persistent_pins"] == 0 and c["mappings"] == 0, c)
        core.close()
        nv.close()


def main():
    client = sys.argv[1] if len(sys.argv) > 1 else "ours"
    t = Tally(f"unload-race-{client}")
    gens = ("4x", "5x", "5x-unmaps") if client == "ours" else ("5x", "5x-unmaps")
    for gen in gens:
        label = f"[{client} {gen}]"
        if client == "ours":
            params = ["persistent_api_support=0"]
        else:
            params = ["peerdirect_support=0"]
        try:
            # A client the race unloaded is off the stack's list (unload_client), so the stack
            # unloads only what is left.
            with Stack(gen, client=client, pt_version=0x00020000, client_params=params) as st:
                race(t, st, label)
        except Exception as e:
            t.check(f"{label}: ran to the end", False, repr(e))
    if client == "ours":
        try:
            init_race(t, "5x-unmaps")  # the same on every generation: the core is not involved
        except Exception as e:
            t.check("[ours 5x-unmaps init]: ran to the end", False, repr(e))
    return t.finish()


if __name__ == "__main__":
    sys.exit(main())
