// SPDX-License-Identifier: GPL-2.0
/*
 * peer_core_sim_4x.ko: the stand-in as a MOFED 4.1 ... 5.0 core (generation 4x), exporting
 * ib_get_peer_private_data as those cores do (pcs.h).
 */
#define PCS_BUILD PCS_BUILD_4X
#include "single.c"
