/* SPDX-License-Identifier: GPL-2.0 */
/* The C side of the module (nvpeer_glue.c), called from Rust. */
#ifndef NVPEER_GLUE_H
#define NVPEER_GLUE_H

/* Module parameters: declared in C so they appear read-only under /sys/module/<name>/parameters. */
int nvpeer_glue_peerdirect_support(void);
int nvpeer_glue_persistent_api_support(void);
/* The module's version string (NVPEER_VERSION, also MODULE_VERSION), NUL-terminated. */
const char *nvpeer_glue_version(void);

/*
 * /sys/module/<name>/nvpeer/: the directory that tells our module apart from NVIDIA's
 * nvidia-peermem and Mellanox's nv_peer_mem, which share its names. Returns 0 or -errno.
 */
int nvpeer_glue_sysfs_init(void);
void nvpeer_glue_sysfs_exit(void);

#endif
