/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What differs between the kernels the stand-ins build for (6.12 ... 7.3), decided by each
 * stand-in's Kbuild from the tree's own headers (sim_compat.mk), not from its version:
 * 7.x renamed zap_vma_ptes() to zap_special_vma_range(), and dropped mm_get_unmapped_area()'s
 * mm argument (6.12 has it). Debian 12's 6.1 (the stand-ins built for our runtime's boots there)
 * has no kzalloc_obj() (a macro since 6.12's stable updates), no vm_flags_set() (6.3) and no
 * mm_get_unmapped_area() (its mm's own get_unmapped_area pointer instead).
 */
#ifndef NVPEER_SIM_COMPAT_H
#define NVPEER_SIM_COMPAT_H

#include <linux/mm.h>
#include <linux/sched.h>
#include <linux/sched/mm.h>
#include <linux/slab.h>

#ifdef SIM_HAVE_ZAP_SPECIAL_VMA_RANGE
#define SIM_ZAP_VMA zap_special_vma_range
#else
#define SIM_ZAP_VMA zap_vma_ptes
#endif

#if defined(SIM_UNMAPPED_AREA_TAKES_MM)
#define SIM_GET_UNMAPPED_AREA(...) mm_get_unmapped_area(current->mm, __VA_ARGS__)
#elif defined(SIM_HAVE_MM_GET_UNMAPPED_AREA)
#define SIM_GET_UNMAPPED_AREA(...) mm_get_unmapped_area(__VA_ARGS__)
#else
/* The mm's own allocator (6.1 ... 6.8): get_unmapped_area() would call our f_op hook again. */
#define SIM_GET_UNMAPPED_AREA(...) current->mm->get_unmapped_area(__VA_ARGS__)
#endif

#ifndef kzalloc_obj
#define kzalloc_obj(P) kzalloc(sizeof(P), GFP_KERNEL)
#endif

#ifndef SIM_HAVE_VM_FLAGS_SET
static inline void vm_flags_set(struct vm_area_struct *vma, vm_flags_t flags)
{
	vma->vm_flags |= flags;
}
#endif

#endif
