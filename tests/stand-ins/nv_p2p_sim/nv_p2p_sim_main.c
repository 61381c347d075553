// SPDX-License-Identifier: GPL-2.0
/*
 * nv_p2p_sim.ko's entry points: the stand-in itself (nv_p2p_sim.c, included here unchanged, its
 * module_init/module_exit taken as functions) and its /proc/driver/nvidia files
 * (nv_p2p_sim_procfs.c, a second object of the module: Kbuild). The procfs files come first and
 * go last, so that a failed start of the stand-in removes them without calling __exit code from
 * __init code.
 */
/* nv_p2p_sim.c's own, defined before the kernel headers define the default. */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/init.h>
#include <linux/module.h>

#include "nv_p2p_sim_procfs.h"

#pragma push_macro("module_init")
#pragma push_macro("module_exit")
#undef module_init
#undef module_exit
#define module_init(fn) static int __init sim_core_init(void) { return fn(); }
#define module_exit(fn) static void __exit sim_core_exit(void) { fn(); }
#include "nv_p2p_sim.c"
#pragma pop_macro("module_init")
#pragma pop_macro("module_exit")

static int __init sim_module_init(void)
{
	int rc = nv_sim_procfs_init();

	if (rc)
		return rc;
	rc = sim_core_init();
	if (rc)
		nv_sim_procfs_remove();
	return rc;
}

static void __exit sim_module_exit(void)
{
	sim_core_exit();
	nv_sim_procfs_remove();
}

module_init(sim_module_init);
module_exit(sim_module_exit);
