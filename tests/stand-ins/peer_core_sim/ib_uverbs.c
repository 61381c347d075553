// SPDX-License-Identifier: GPL-2.0
/*
 * ib_uverbs.ko: peer_core_sim.ko (generation 5x-unmaps) under the name of the module that
 * exports the peer-memory core from DOCA-OFED 24.07 on (CONTRACT 1.1), so that loading a client
 * by modprobe can be tested on that layout. Its log lines start "ib_uverbs:"; its device and
 * debugfs files keep the peer_core_sim names.
 */
#define PCS_BUILD PCS_BUILD_5X_UNMAPS
#include "single.c"
