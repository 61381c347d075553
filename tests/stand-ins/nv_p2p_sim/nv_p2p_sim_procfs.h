/* SPDX-License-Identifier: GPL-2.0 */
/* nv_p2p_sim.ko's /proc/driver/nvidia (nv_p2p_sim_procfs.c), set up by nv_p2p_sim_main.c. */
#ifndef NV_P2P_SIM_PROCFS_H
#define NV_P2P_SIM_PROCFS_H

int nv_sim_procfs_init(void);
void nv_sim_procfs_remove(void);

#endif
