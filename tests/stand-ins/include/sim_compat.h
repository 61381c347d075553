/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What differs between the kernels the stand-ins build for (6.12 ... 7.3), decided by each
 * stand-in's Kbuild from the tree's own headers (sim_compat.mk), not from its version:
 * 7.x renamed zap_vma_ptes() to zap_special_vma_range(), and dropped mm_get_unmapped_area()'s
 * mm argument (6.12 has it).
 */
#ifndef NVPEER_SIM_COMPAT_H
#define NVPEER_SIM_COMPAT_H

#include <linux/mm.h>
#include <linux/sched.h>
#include <linux/sched/mm.h>

#ifdef SIM_HAVE_ZAP_SPECIAL_VMA_RANGE
#define SIM_ZAP_VMA zap_special_vma_range
#else
#define SIM_ZAP_VMA zap_vma_ptes
#endif

#ifdef SIM_UNMAPPED_AREA_TAKES_MM
#define SIM_GET_UNMAPPED_AREA(...) mm_get_unmapped_area(current->mm, __VA_ARGS__)
#else
#define SIM_GET_UNMAPPED_AREA(...) mm_get_unmapped_area(__VA_ARGS__)
#endif

#endif
