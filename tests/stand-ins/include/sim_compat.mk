# SPDX-License-Identifier: GPL-2.0
# Included by the stand-ins' Kbuild files: the kernel differences sim_compat.h bridges, probed
# in the tree's headers.
ccflags-y += $(shell grep -qs 'zap_special_vma_range' $(srctree)/include/linux/mm.h && echo -DSIM_HAVE_ZAP_SPECIAL_VMA_RANGE)
ccflags-y += $(shell grep -qs 'mm_get_unmapped_area.struct mm_struct' $(srctree)/include/linux/sched/mm.h && echo -DSIM_UNMAPPED_AREA_TAKES_MM)
ccflags-y += $(shell grep -qs 'mm_get_unmapped_area' $(srctree)/include/linux/sched/mm.h && echo -DSIM_HAVE_MM_GET_UNMAPPED_AREA)
ccflags-y += $(shell grep -qs 'void vm_flags_set' $(srctree)/include/linux/mm.h && echo -DSIM_HAVE_VM_FLAGS_SET)
