# SPDX-License-Identifier: GPL-2.0
# callback-stall.sh KO_DIR: REVIEW-KMOD C5 closed. The module in KO_DIR is built with
# NVPEER_PLANT=callback-stall (or, the control, callback-stall-unheld): its free callback stops
# for 3 s after handing its pin to the module's work item. A registration is deregistered from a
# kernel worker (uverbs' disassociate), so the pin, left to NVIDIA's callback, holds the module's
# last reference; then the owner frees the buffer and, while the callback is stalled, rmmod is
# tried every 0.1 s. The callback's own module reference must keep every try refused until it
# returned; the control (no such reference) lets rmmod free the module under the stalled thread,
# which then resumes in freed text: the run fails (tests/compat/test-callback-stall.sh).
. "$(dirname "$0")/lib.sh"
ko_dir=${1:?KO_DIR}
if python3 -u - "$ko_dir" <<'PY'
import os, sys, threading, time
sys.path.insert(0, os.path.join(os.environ["NVPEER_REPO"], "tests", "scenarios"))
import coresim, nvsim
from stack import Stack, loaded, our_stats, sh

st = Stack("5x-unmaps", client_params=["persistent_api_support=0"], ko_dir=sys.argv[1])
st.__enter__()
nv, core = nvsim.NvP2pSim(), coresim.PeerCoreSim()
buf = nv.alloc(64 << 10)
core.reg_mr(buf.va, 64 << 10)
assert core.disassociate() == 1, "deregistered from a kernel worker"
s = our_stats()
assert s["live_contexts"] == 0 and s["unpins_left_to_callback"] == 1 and s["live_pins"] == 1, s
kmsg = coresim.Kmsg()
freed = threading.Event()
threading.Thread(target=lambda: (buf.free(), freed.set()), daemon=True).start()
start = time.monotonic()
while "free callback stalls" not in kmsg.text():
    assert time.monotonic() - start < 30, "the callback did not stall"
    time.sleep(0.05)
stalled, refused = time.monotonic(), 0
while True:
    r = sh("rmmod", "nvidia_peermem", check=False)
    if r.returncode == 0:
        break
    refused += 1
    assert time.monotonic() - stalled < 20, "rmmod still refused 20 s later"
    time.sleep(0.1)
took = time.monotonic() - stalled
text = kmsg.text()
print(f"      rmmod refused {refused} times, succeeded {took:.1f} s into the 3 s stall")
assert "free callback goes on" in text, "rmmod succeeded before the callback went on"
assert took >= 2.5 and refused >= 10, (took, refused)
st.modules.remove("nvidia_peermem")
freed.wait(10)
assert freed.is_set(), "the owner's free returned"
core.close()
nv.close()
st.__exit__(None, None, None)
assert not loaded("nvidia_peermem")
PY
then ok "rmmod refused while the free callback is in the module, then succeeds"
else not_ok "rmmod refused while the free callback is in the module, then succeeds"
fi
finish
