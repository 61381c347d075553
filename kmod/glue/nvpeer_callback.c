// SPDX-License-Identifier: GPL-2.0
/*
 * NVIDIA's free callback, as NVIDIA calls it (REVIEW-KMOD C5): a module reference is taken on
 * entry and dropped by the callback's last instruction, a tail jump into module_put in the
 * kernel's text, so that no instruction of this module runs after the reference that keeps it
 * loaded is dropped. The pin NVIDIA holds keeps the module loaded on entry (its ModuleRef), and
 * the body (pin.rs, nvpeer_free_callback) may hand that last pin reference to the module's work
 * item, which may run at once on another CPU: without this reference, an rmmod could then free
 * the module while this thread still returns through it.
 *
 * The tail jump is a sibling call, which the kernel turns off with frame pointers (arm64, x86
 * with the frame-pointer unwinder): this file alone is built with them on (Kbuild), and
 * check-tail-call.sh refuses a build whose nvpeer_glue_free_callback does not end in a jump to
 * module_put with no return of its own.
 */
#include <linux/delay.h>
#include <linux/module.h>
#include "nvpeer_glue.h"

void nvpeer_glue_free_callback(void *data)
{
#ifndef NVPEER_PLANT_CALLBACK_UNHELD
	__module_get(THIS_MODULE);
#endif
	nvpeer_free_callback(data);
#ifndef NVPEER_PLANT_CALLBACK_UNHELD
	module_put(THIS_MODULE);
#endif
}

#ifdef NVPEER_PLANT_CALLBACK_STALL
/*
 * Test only (tests/compat/test-callback-stall.sh): the free callback stops for 3 s after it
 * handed its pin to the work item, the window in which an rmmod must still be refused.
 */
void nvpeer_glue_plant_callback_stall(void)
{
	pr_info("plant: the free callback stalls for 3 s after handing off its pin\n");
	msleep(3000);
	pr_info("plant: the free callback goes on\n");
}
#endif
