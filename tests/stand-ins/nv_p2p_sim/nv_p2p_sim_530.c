// SPDX-License-Identifier: GPL-2.0
/*
 * nv_p2p_sim_530.ko: the same stand-in as nv_p2p_sim.ko with the <= 530 API: no
 * nvidia_p2p_get_pages_persistent/put_pages_persistent symbols at all, and the exported
 * capability variable nvidia_p2p_cap_persistent_pages = 1 that such drivers had (a client finds
 * which API it runs against with symbol_get at load time).
 */
#define NV_P2P_SIM_API_530
#include "nv_p2p_sim.c"
