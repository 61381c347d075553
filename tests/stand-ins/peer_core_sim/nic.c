// SPDX-License-Identifier: GPL-2.0
/*
 * The "RDMA NIC": QEMU's edu device (1234:11e8, tests/vm/run.sh adds -device edu). Its struct
 * device is the dma_device handed to dma_map/dma_unmap, set up as mlx5 sets up its own:
 * 64-bit DMA mask, 2 GiB maximum segment. The edu device's own DMA engine is never used (the
 * "NIC DMA" is done by the CPU through the DMA addresses, see mr.c); the guest has no IOMMU,
 * so a DMA address of this device is a physical address (dma_to_phys).
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/dma-mapping.h>
#include <linux/pci.h>
#include <linux/sizes.h>
#include "pcs.h"

static DEFINE_MUTEX(pcs_nic_lock);
static struct device *pcs_nic;	/* referenced; the first edu device bound */

/* A reference on the NIC's device, or NULL when there is none. */
struct device *pcs_nic_get(void)
{
	struct device *dev;

	mutex_lock(&pcs_nic_lock);
	dev = get_device(pcs_nic);
	mutex_unlock(&pcs_nic_lock);
	return dev;
}

static int pcs_nic_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	int ret = pcim_enable_device(pdev);

	if (ret)
		return ret;
	pci_set_master(pdev);
	ret = dma_set_mask_and_coherent(&pdev->dev, DMA_BIT_MASK(64));
	if (ret)
		return ret;
	dma_set_max_seg_size(&pdev->dev, SZ_2G);
	mutex_lock(&pcs_nic_lock);
	if (!pcs_nic)
		pcs_nic = get_device(&pdev->dev);
	mutex_unlock(&pcs_nic_lock);
	dev_info(&pdev->dev, "peer_core_sim NIC (dma_device for peer clients)\n");
	return 0;
}

static void pcs_nic_remove(struct pci_dev *pdev)
{
	mutex_lock(&pcs_nic_lock);
	if (pcs_nic == &pdev->dev) {
		put_device(pcs_nic);
		pcs_nic = NULL;
	}
	mutex_unlock(&pcs_nic_lock);
}

static const struct pci_device_id pcs_nic_ids[] = {
	{ PCI_DEVICE(0x1234, 0x11e8) },
	{ }
};
/* No MODULE_DEVICE_TABLE: the stand-in is loaded by hand, never by udev. */

static struct pci_driver pcs_nic_driver = {
	.name = "peer_core_sim_nic",
	.id_table = pcs_nic_ids,
	.probe = pcs_nic_probe,
	.remove = pcs_nic_remove,
};

int pcs_nic_init(void)
{
	int ret = pci_register_driver(&pcs_nic_driver);
	struct device *nic;

	if (ret)
		return ret;
	nic = pcs_nic_get();
	if (!nic)
		pr_warn("no edu device (1234:11e8): registrations reaching dma_map fail with -ENODEV\n");
	put_device(nic);
	return 0;
}

void pcs_nic_exit(void)
{
	pci_unregister_driver(&pcs_nic_driver);
}
