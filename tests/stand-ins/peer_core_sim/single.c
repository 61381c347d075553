// SPDX-License-Identifier: GPL-2.0
/*
 * The whole stand-in as one translation unit, for the builds that are a single object each
 * (peer_core_sim_4x.c, peer_core_sim_5x.c, ib_uverbs.c): a Kbuild object belongs to one module,
 * so the builds cannot share core.o and the others. The includer defines PCS_BUILD first.
 */
#include "core.c"
#include "sysfs.c"
#include "umem5.c"
#include "umem4.c"
#include "mr.c"
#include "nic.c"
