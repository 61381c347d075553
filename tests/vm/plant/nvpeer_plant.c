// SPDX-License-Identifier: GPL-2.0
/*
 * Test-only module that plants one kernel report, to prove tests/vm/run.sh catches it:
 * plant=warn -> a WARN at load; plant=leak -> 4 KiB lost at load; plant=none -> nothing.
 */
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/string.h>

static char *plant = "none";
module_param(plant, charp, 0444);
MODULE_PARM_DESC(plant, "none, warn or leak");

static int __init nvpeer_plant_init(void)
{
	if (!strcmp(plant, "warn")) {
		WARN(1, "nvpeer_plant: planted warning\n");
	} else if (!strcmp(plant, "leak")) {
		void *lost = kmalloc(4096, GFP_KERNEL);

		/* Only the pointer's hash leaves this function: kmemleak finds no reference. */
		pr_info("nvpeer_plant: planted leak %p\n", lost);
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
