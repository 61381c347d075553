// SPDX-License-Identifier: GPL-2.0
/*
 * peer_core_sim_5x.ko: the stand-in as a MOFED 5.1-0.6.6.0 ... 5.4-2 core (generation 5x),
 * exporting neither generation marker, as those cores (pcs.h).
 */
#define PCS_BUILD PCS_BUILD_5X
#include "single.c"
