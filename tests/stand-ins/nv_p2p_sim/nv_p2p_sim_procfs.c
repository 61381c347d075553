// SPDX-License-Identifier: GPL-2.0
/*
 * nv_p2p_sim.ko's /proc/driver/nvidia: the two files of a real driver that `nvpeer check` reads
 * to judge the dma-buf path, in the layouts of a 580 driver (kernel-open/nvidia/nv-procfs.c;
 * verbatim lines of a real host in ../shared/REAL-HOST-H200.txt):
 *
 *   version  "NVRM version: NVIDIA UNIX Open Kernel Module for <arch>  <release>  Release Build ..."
 *            (open kernel modules, which export GPU memory as dma-buf) or the proprietary line;
 *   params   one "Name: value" a line, GrdmaPciTopoCheckOverride and CoherentGPUMemoryMode among
 *            them.
 *
 * The stand-in exports no dma-buf itself; these files let the CLI's rules meet the rest of the
 * dma-buf facts (the kernel's ib_umem_dmabuf_get, libibverbs, the NIC's answer to NCCL's probe)
 * on a real kernel. When /proc/driver/nvidia already exists (a real driver), nothing is shown.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/module.h>
#include <linux/proc_fs.h>
#include <linux/seq_file.h>
#include <linux/utsname.h>

#include "nv_p2p_sim_procfs.h"

static char *nvidia_version = "580.159.04";
module_param(nvidia_version, charp, 0444);
MODULE_PARM_DESC(nvidia_version, "The driver release /proc/driver/nvidia/version shows (default 580.159.04)");

static bool nvidia_open = true;
module_param(nvidia_open, bool, 0444);
MODULE_PARM_DESC(nvidia_open, "Y (default): /proc/driver/nvidia/version says \"Open Kernel Module\"; N: the proprietary modules' line");

static int grdma_override;
module_param(grdma_override, int, 0444);
MODULE_PARM_DESC(grdma_override, "The GrdmaPciTopoCheckOverride value params shows (0 default, 1 allow, 2 deny)");

/* The 580 driver's params in file order; GrdmaPciTopoCheckOverride is printed from the parameter. */
static const char *const sim_params_before[] = {
	"ResmanDebugLevel: 4294967295", "RmLogonRC: 1", "ModifyDeviceFiles: 1", "DeviceFileUID: 0",
	"DeviceFileGID: 0", "DeviceFileMode: 438", "InitializeSystemMemoryAllocations: 1",
	"UsePageAttributeTable: 4294967295", "EnableMSI: 1", "EnablePCIeGen3: 0", "MemoryPoolSize: 0",
	"KMallocHeapMaxSize: 0", "VMallocHeapMaxSize: 0", "IgnoreMMIOCheck: 0", "EnableStreamMemOPs: 0",
	"EnableUserNUMAManagement: 1", "NvLinkDisable: 1", "RmProfilingAdminOnly: 0",
	"PreserveVideoMemoryAllocations: 0", "EnableS0ixPowerManagement: 0",
	"S0ixPowerManagementVideoMemoryThreshold: 256", "DynamicPowerManagement: 3",
	"DynamicPowerManagementVideoMemoryThreshold: 200", "RegisterPCIDriver: 1",
	"EnablePCIERelaxedOrderingMode: 0", "EnableResizableBar: 0", "EnableGpuFirmware: 18",
	"EnableGpuFirmwareLogs: 2", "RmNvlinkBandwidthLinkCount: 0", "EnableDbgBreakpoint: 0",
	"OpenRmEnableUnsupportedGpus: 1", "DmaRemapPeerMmio: 1", "ImexChannelCount: 2048",
	"CreateImexChannel0: 0",
};
static const char *const sim_params_after[] = {
	"CoherentGPUMemoryMode: \"\"", "RegistryDwords: \"\"", "RegistryDwordsPerDevice: \"\"",
	"RmMsg: \"\"", "GpuBlacklist: \"\"", "TemporaryFilePath: \"\"", "ExcludedGpus: \"\"",
};

static struct proc_dir_entry *sim_proc_dir;

static int sim_version_show(struct seq_file *m, void *v)
{
	if (nvidia_open)
		seq_printf(m, "NVRM version: NVIDIA UNIX Open Kernel Module for %s  %s  Release Build  (nv_p2p_sim stand-in)  \n",
			   utsname()->machine, nvidia_version);
	else
		seq_printf(m, "NVRM version: NVIDIA UNIX %s Kernel Module  %s  (nv_p2p_sim stand-in)\n",
			   utsname()->machine, nvidia_version);
	seq_puts(m, "GCC version:  (nv_p2p_sim stand-in)\n");
	return 0;
}

static int sim_params_show(struct seq_file *m, void *v)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(sim_params_before); i++)
		seq_printf(m, "%s\n", sim_params_before[i]);
	seq_printf(m, "GrdmaPciTopoCheckOverride: %d\n", grdma_override);
	for (i = 0; i < ARRAY_SIZE(sim_params_after); i++)
		seq_printf(m, "%s\n", sim_params_after[i]);
	return 0;
}

int nv_sim_procfs_init(void)
{
	sim_proc_dir = proc_mkdir("driver/nvidia", NULL);
	if (!sim_proc_dir) {
		pr_info("/proc/driver/nvidia exists already (a real driver?): not shown\n");
		return 0;
	}
	if (!proc_create_single("version", 0444, sim_proc_dir, sim_version_show) ||
	    !proc_create_single("params", 0444, sim_proc_dir, sim_params_show)) {
		nv_sim_procfs_remove();
		return -ENOMEM;
	}
	return 0;
}

/* Also the error path of the module's init (nv_p2p_sim_main.c): not __exit. */
void nv_sim_procfs_remove(void)
{
	proc_remove(sim_proc_dir);
	sim_proc_dir = NULL;
}
