// SPDX-License-Identifier: GPL-2.0
/*
 * Test-only module that plants one kernel report, to prove tests/vm/run.sh catches it:
 * plant=warn -> a WARN at load; plant=leak -> PLANTED_LEAKS blocks of 4 KiB lost at load;
 * plant=none -> nothing.
 */
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/string.h>

/*
 * kmemleak reports an object only when no memory it scans still holds its address, and it scans
 * conservatively: a stale copy in a stack, a register save area or a reused buffer hides a leak.
 * A single planted leak went unreported in one CI run; measured here, 4 of 128 planted leaks in 8
 * runs went unreported, at random positions. With 16, the run fails unless all of them hide.
 */
#define PLANTED_LEAKS 16

static char *plant = "none";
module_param(plant, charp, 0444);
MODULE_PARM_DESC(plant, "none, warn or leak");

static int __init nvpeer_plant_init(void)
{
	if (!strcmp(plant, "warn")) {
		WARN(1, "nvpeer_plant: planted warning\n");
	} else if (!strcmp(plant, "leak")) {
		int i;

		for (i = 0; i < PLANTED_LEAKS; i++) {
			void *lost = kmalloc(4096, GFP_KERNEL);

			/* The address leaves this function only as text in the log. */
			pr_info("nvpeer_plant: planted leak %d at %p\n", i, lost);
		}
	} else if (strcmp(plant, "none")) {
		pr_err("nvpeer_plant: unknown plant=%s\n", plant);
		return -EINVAL;
	}
	return 0;
}

static void __exit nvpeer_plant_exit(void)
{
}

module_init(nvpeer_plant_init);
module_exit(nvpeer_plant_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("nvpeer test rig: plants a WARN or a leak");
