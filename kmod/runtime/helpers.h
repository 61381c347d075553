/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The runtime's calls into the kernel (kmod/runtime/helpers.c): what C has as inline functions
 * or macros (mutex_lock under lockdep, kmalloc, refcount_t, printk). Bindgen declares them for
 * the runtime's Rust (kmod/runtime/bindings_helper.h).
 */
#ifndef NVPEER_RT_HELPERS_H
#define NVPEER_RT_HELPERS_H

#include <linux/types.h>
#include <linux/refcount.h>

struct mutex;
struct lock_class_key;
struct scatterlist;
struct sg_table;

void *nvpeer_rt_krealloc(const void *ptr, size_t size, gfp_t flags);
void nvpeer_rt_kfree(const void *ptr);

void nvpeer_rt_mutex_init(struct mutex *lock, const char *name, struct lock_class_key *key);
void nvpeer_rt_mutex_lock(struct mutex *lock);
void nvpeer_rt_mutex_unlock(struct mutex *lock);

void nvpeer_rt_refcount_set(refcount_t *r, int n);
void nvpeer_rt_refcount_inc(refcount_t *r);
bool nvpeer_rt_refcount_dec_and_test(refcount_t *r);

/* The scatterlist API, exported or inline depending on the kernel (7.x inlines sg_next). */
int nvpeer_rt_sg_alloc_table(struct sg_table *table, unsigned int nents, gfp_t gfp);
void nvpeer_rt_sg_free_table(struct sg_table *table);
void nvpeer_rt_sg_init_table(struct scatterlist *sgl, unsigned int nents);
struct scatterlist *nvpeer_rt_sg_next(struct scatterlist *sg);

void nvpeer_rt_printk(const char *level, const char *prefix, const char *text, size_t len);

#endif
