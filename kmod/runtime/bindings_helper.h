/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What bindgen turns into the runtime's bindings (kmod/runtime/bindings.rs, see kmod/Kbuild):
 * the target kernel's own declarations of what the runtime and the client touch.
 */
#include <linux/errno.h>
#include <linux/gfp.h>
#include <linux/lockdep.h>
#include <linux/mutex.h>
#include <linux/refcount.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include "helpers.h"

/* Macros bindgen cannot evaluate by themselves, as constants it can. */
const gfp_t NVPEER_RT_GFP_KERNEL = GFP_KERNEL;
const gfp_t NVPEER_RT_GFP_NOWAIT = GFP_NOWAIT;
const unsigned long NVPEER_RT_KMALLOC_MAX_SIZE = KMALLOC_MAX_SIZE;
