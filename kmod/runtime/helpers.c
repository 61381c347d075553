// SPDX-License-Identifier: GPL-2.0
/*
 * The runtime's calls into the kernel: one line each, so that lockdep, KFENCE, kmemleak and
 * refcount_t's checks see the runtime's locks, allocations and references exactly as they see
 * C's (kmod/runtime/sync.rs, alloc.rs, print.rs).
 */
#include <linux/mutex.h>
#include <linux/printk.h>
#include <linux/refcount.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include "helpers.h"

void *nvpeer_rt_krealloc(const void *ptr, size_t size, gfp_t flags)
{
	return krealloc(ptr, size, flags);
}

void nvpeer_rt_kfree(const void *ptr)
{
	kfree(ptr);
}

void nvpeer_rt_mutex_init(struct mutex *lock, const char *name, struct lock_class_key *key)
{
	__mutex_init(lock, name, key);
}

void nvpeer_rt_mutex_lock(struct mutex *lock)
{
	mutex_lock(lock);
}

void nvpeer_rt_mutex_unlock(struct mutex *lock)
{
	mutex_unlock(lock);
}

void nvpeer_rt_refcount_set(refcount_t *r, int n)
{
	refcount_set(r, n);
}

void nvpeer_rt_refcount_inc(refcount_t *r)
{
	refcount_inc(r);
}

bool nvpeer_rt_refcount_dec_and_test(refcount_t *r)
{
	return refcount_dec_and_test(r);
}

int nvpeer_rt_sg_alloc_table(struct sg_table *table, unsigned int nents, gfp_t gfp)
{
	return sg_alloc_table(table, nents, gfp);
}

void nvpeer_rt_sg_free_table(struct sg_table *table)
{
	sg_free_table(table);
}

void nvpeer_rt_sg_init_table(struct scatterlist *sgl, unsigned int nents)
{
	sg_init_table(sgl, nents);
}

struct scatterlist *nvpeer_rt_sg_next(struct scatterlist *sg)
{
	return sg_next(sg);
}

/* The level as a string argument: printk takes it from the formatted text's start. */
void nvpeer_rt_printk(const char *level, const char *prefix, const char *text, size_t len)
{
	printk("%s%s: %.*s", level, prefix, (int)len, text);
}
