// SPDX-License-Identifier: GPL-2.0
/*
 * peer_core_sim_abi2.ko: the stand-in as a 5x-unmaps core whose struct ib_umem grew a field
 * (pcs.h, PCS_UMEM_ABI2): same peer-memory ABI, another CRC for
 * ib_umem_stop_invalidation_notifier under CONFIG_MODVERSIONS.
 */
#define PCS_BUILD PCS_BUILD_5X_UNMAPS
#define PCS_UMEM_ABI2
#include "single.c"
