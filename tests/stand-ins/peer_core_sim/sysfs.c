// SPDX-License-Identifier: GPL-2.0
/*
 * /sys/kernel/mm/memory_peers/<client name>/{version,num_alloc_mrs,...} as MOFED 4.0 ... 23.x
 * create them (CONTRACT 1.9). With sysfs=0 nothing is created, as MOFED 24.04+ on kernels that
 * no longer export mm_kobj. Called under pcs_peer_mutex.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/kernfs.h>
#include <linux/slab.h>
#include <linux/sysfs.h>
#include "pcs.h"

static struct kobject *pcs_peers_kobj;	/* memory_peers, under pcs_peer_mutex */

struct pcs_attr {
	struct attribute attr;
	ssize_t (*show)(struct pcs_client *c, char *buf);
};

static ssize_t version_show(struct pcs_client *c, char *buf)
{
	return sysfs_emit(buf, "%.*s\n", IB_PEER_MEMORY_VER_MAX, c->ops->version);
}

static ssize_t num_free_callbacks_show(struct pcs_client *c, char *buf)
{
	return sysfs_emit(buf, "%lu\n", READ_ONCE(c->stats.num_free_callbacks));
}

#define PCS_STAT_SHOW(field)							\
static ssize_t field##_show(struct pcs_client *c, char *buf)			\
{										\
	return sysfs_emit(buf, "%llu\n", (u64)atomic64_read(&c->stats.field));	\
}
PCS_STAT_SHOW(num_alloc_mrs)
PCS_STAT_SHOW(num_dealloc_mrs)
PCS_STAT_SHOW(num_reg_pages)
PCS_STAT_SHOW(num_dereg_pages)
PCS_STAT_SHOW(num_reg_bytes)
PCS_STAT_SHOW(num_dereg_bytes)

#define PCS_ATTR(field) \
	static struct pcs_attr pcs_attr_##field = { .attr = { .name = #field, .mode = 0444 }, \
						    .show = field##_show }
PCS_ATTR(version);
PCS_ATTR(num_alloc_mrs);
PCS_ATTR(num_dealloc_mrs);
PCS_ATTR(num_reg_pages);
PCS_ATTR(num_dereg_pages);
PCS_ATTR(num_reg_bytes);
PCS_ATTR(num_dereg_bytes);
PCS_ATTR(num_free_callbacks);

static struct attribute *pcs_client_attrs[] = {
	&pcs_attr_version.attr, &pcs_attr_num_alloc_mrs.attr, &pcs_attr_num_dealloc_mrs.attr,
	&pcs_attr_num_reg_pages.attr, &pcs_attr_num_dereg_pages.attr,
	&pcs_attr_num_reg_bytes.attr, &pcs_attr_num_dereg_bytes.attr,
	&pcs_attr_num_free_callbacks.attr, NULL,
};
ATTRIBUTE_GROUPS(pcs_client);

static ssize_t pcs_attr_show(struct kobject *kobj, struct attribute *attr, char *buf)
{
	struct pcs_attr *a = container_of(attr, struct pcs_attr, attr);

	return a->show(container_of(kobj, struct pcs_client, kobj), buf);
}

static const struct sysfs_ops pcs_sysfs_ops = {
	.show = pcs_attr_show,
};

static void pcs_client_release(struct kobject *kobj)
{
	struct pcs_client *c = container_of(kobj, struct pcs_client, kobj);

	xa_destroy(&c->umem_xa);
	mutex_destroy(&c->lock);
	kfree(c);
}

/* Every client has this kobject; it is only added to sysfs when sysfs=1. */
const struct kobj_type pcs_client_ktype = {
	.sysfs_ops = &pcs_sysfs_ops,
	.release = pcs_client_release,
	.default_groups = pcs_client_groups,
};

/*
 * The kobject of /sys/kernel/mm. mm_kobj is no longer exported ("mm: no need to export
 * mm_kobj", the reason MOFED 24.04+ creates no memory_peers on new kernels), so the stand-in
 * finds it through kernfs: kernel_kobj (/sys/kernel) is exported, and the kernfs node of a
 * kobject's directory carries that kobject in ->priv. /sys/kernel/mm lives as long as the
 * kernel, so the pointer stays valid after the node reference is dropped.
 */
static struct kobject *pcs_mm_kobj(void)
{
	struct kernfs_node *kn = kernfs_find_and_get(kernel_kobj->sd, "mm");
	struct kobject *kobj = NULL;

	if (!kn)
		return NULL;
	if (kernfs_type(kn) == KERNFS_DIR)
		kobj = kn->priv;
	kernfs_put(kn);
	return kobj;
}

int pcs_sysfs_add(struct pcs_client *c)
{
	char name[IB_PEER_MEMORY_NAME_MAX + 1];
	struct kernfs_node *dup;

	snprintf(name, sizeof(name), "%.*s", IB_PEER_MEMORY_NAME_MAX, c->ops->name);
	if (!pcs_peers_kobj) {
		struct kobject *mm = pcs_mm_kobj();

		if (!mm) {
			pr_err("no /sys/kernel/mm kobject: cannot create memory_peers\n");
			return -ENOENT;
		}
		pcs_peers_kobj = kobject_create_and_add("memory_peers", mm);
		if (!pcs_peers_kobj)
			return -ENOMEM;
	}
	/*
	 * MOFED's kobject_add fails on a duplicate name (after sysfs dumps a stack trace);
	 * checking first gives the same NULL registration with a clean log.
	 */
	dup = kernfs_find_and_get(pcs_peers_kobj->sd, name);
	if (dup) {
		kernfs_put(dup);
		pr_err("memory_peers/%s exists: a peer client of that name is registered\n", name);
		return -EEXIST;
	}
	if (kobject_add(&c->kobj, pcs_peers_kobj, "%s", name))
		return -EINVAL;
	c->in_sysfs = true;
	return 0;
}

void pcs_sysfs_del(struct pcs_client *c)
{
	if (!c->in_sysfs)
		return;
	kobject_del(&c->kobj);
	c->in_sysfs = false;
}

/*
 * No client is listed any more (or the first failed): drop memory_peers. Its directory lives
 * on while a client kobject still holds it (5.x removes those at the final put).
 */
void pcs_sysfs_put_root(void)
{
	kobject_put(pcs_peers_kobj);
	pcs_peers_kobj = NULL;
}
