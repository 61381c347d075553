// SPDX-License-Identifier: GPL-2.0
/*
 * What Rust-for-Linux 7.2 cannot express, kept tiny: modinfo tags that `module!` lacks
 * (version, softdep) and parameters visible under /sys/module/<name>/parameters (mode 0444, as
 * NVIDIA's), which 7.2's Rust parameters do not create. Values are validated in Rust.
 */
#include <linux/kobject.h>
#include <linux/module.h>
#include <linux/sysfs.h>
#include <linux/moduleparam.h>
#include "nvpeer_glue.h"

MODULE_VERSION(NVPEER_VERSION);
/* Load after the providers of the symbols we use; modprobe ignores missing soft dependencies. */
MODULE_SOFTDEP("pre: nvidia ib_core");

static int peerdirect_support;
module_param(peerdirect_support, int, 0444);
MODULE_PARM_DESC(peerdirect_support,
		 "Set level of support for Peer-direct, 0 [default] or 1 [legacy, for example MLNX_OFED 4.9 LTS]");

static int persistent_api_support = 1;
module_param(persistent_api_support, int, 0444);
MODULE_PARM_DESC(persistent_api_support,
		 "Set level of support for persistent APIs, 0 [legacy] or 1 [default]");

int nvpeer_glue_peerdirect_support(void)
{
	return peerdirect_support;
}

int nvpeer_glue_persistent_api_support(void)
{
	return persistent_api_support;
}

const char *nvpeer_glue_version(void)
{
	return NVPEER_VERSION;
}

static ssize_t implementation_show(struct kobject *kobj, struct kobj_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "nvpeer %s\n", NVPEER_VERSION);
}
static struct kobj_attribute implementation_attr = __ATTR_RO(implementation);

static struct attribute *nvpeer_attrs[] = {
	&implementation_attr.attr,
	NULL,
};
ATTRIBUTE_GROUPS(nvpeer);

static struct kobject *nvpeer_kobj;

int nvpeer_glue_sysfs_init(void)
{
	int ret;

	nvpeer_kobj = kobject_create_and_add("nvpeer", &THIS_MODULE->mkobj.kobj);
	if (!nvpeer_kobj)
		return -ENOMEM;
	ret = sysfs_create_groups(nvpeer_kobj, nvpeer_groups);
	if (ret) {
		kobject_put(nvpeer_kobj);
		nvpeer_kobj = NULL;
	}
	return ret;
}

void nvpeer_glue_sysfs_exit(void)
{
	if (!nvpeer_kobj)
		return;
	sysfs_remove_groups(nvpeer_kobj, nvpeer_groups);
	kobject_put(nvpeer_kobj);
	nvpeer_kobj = NULL;
}
