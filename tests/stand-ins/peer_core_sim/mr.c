// SPDX-License-Identifier: GPL-2.0
/*
 * /dev/peer_core_sim: "MRs" over user VAs and "NIC DMA" through them (nvpeer_sim_uapi.h).
 * An MR belongs to the open file that created it; closing the file (process exit) deregisters
 * what is left, as uverbs does. The MR's mutex dma_lock stands for its mkey: DMA runs under it
 * and revocation takes it, so no DMA is in flight once an MR is revoked.
 *
 * Host memory is pinned like ib_umem_get does (FOLL_LONGTERM); nothing is charged against
 * RLIMIT_MEMLOCK (MOFED charges pinned_vm for host and peer umems alike): the tests run as root
 * and the accounting is not what they look at.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/dma-direct.h>
#include <linux/fs.h>
#include <linux/highmem.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/pfn.h>
#include <linux/slab.h>
#include <linux/timekeeping.h>
#include <linux/uaccess.h>
#include <linux/workqueue.h>
#include "pcs.h"

#define PCS_DMA_CHUNK SZ_64K

static DEFINE_XARRAY_ALLOC1(pcs_mrs);	/* id -> MR, for every open file */

/* ------------------------------------------------------------------ host memory */

int pcs_pin_host(struct pcs_mr *mr)
{
	unsigned long start = ALIGN_DOWN(mr->addr, PAGE_SIZE);
	unsigned long npages = (ALIGN(mr->addr + mr->size, PAGE_SIZE) - start) >> PAGE_SHIFT;
	unsigned int gup = FOLL_LONGTERM | (mr->writable ? FOLL_WRITE : 0);
	unsigned long done = 0;
	struct page **pages;
	struct page *probe;
	int ret;

	if (!npages || npages > UINT_MAX)
		return -EINVAL;
	/*
	 * MOFED pins in bounded chunks; probe the first page so a GPU VA (or any unpinnable range)
	 * fails here, before a page array for the whole range is allocated.
	 */
	ret = pin_user_pages_fast(start, 1, gup, &probe);
	if (ret <= 0)
		return ret ?: -EFAULT;
	unpin_user_page(probe);
	pages = kvcalloc(npages, sizeof(*pages), GFP_KERNEL | __GFP_NOWARN);
	if (!pages)
		return -ENOMEM;
	while (done < npages) {
		ret = pin_user_pages_fast(start + (done << PAGE_SHIFT),
					  min_t(unsigned long, npages - done, SZ_64K), gup,
					  pages + done);
		if (ret <= 0) {
			unpin_user_pages(pages, done);
			kvfree(pages);
			return ret ?: -EFAULT;
		}
		done += ret;
	}
	mr->pages = pages;
	mr->npages = npages;
	return 0;
}

static void pcs_unpin_host(struct pcs_mr *mr)
{
	unpin_user_pages_dirty_lock(mr->pages, mr->npages, mr->writable);
	kvfree(mr->pages);
	mr->pages = NULL;
}

/* ------------------------------------------------------------------ MR objects */

static struct pcs_mr *pcs_mr_alloc(const struct peer_core_sim_reg *r, struct file *owner)
{
	struct pcs_mr *mr = kzalloc(sizeof(*mr), GFP_KERNEL);

	if (!mr)
		return NULL;
	kref_init(&mr->ref);
	mr->owner = owner;
	mr->addr = r->addr;
	mr->size = r->size;
	mr->kind = r->kind;
	mr->inject = r->inject;
	mr->writable = r->access & PEER_CORE_SIM_ACCESS_WRITE;
	mutex_init(&mr->dma_lock);
	atomic_set(&mr->invalidated, 0);
	init_completion(&mr->inval_done);
	return mr;
}

static void pcs_mr_free(struct kref *ref)
{
	struct pcs_mr *mr = container_of(ref, struct pcs_mr, ref);

	if (mr->umem)
		pcs_umem_put(mr->umem);
	mutex_destroy(&mr->dma_lock);
	kfree(mr);
}

static void pcs_mr_put(struct pcs_mr *mr)
{
	kref_put(&mr->ref, pcs_mr_free);
}

/* The "mkey" stops translating: DMA in flight finishes first, later DMA gets -EIO. */
void pcs_mr_revoke(struct pcs_mr *mr)
{
	mutex_lock(&mr->dma_lock);
	mr->revoked = true;
	mutex_unlock(&mr->dma_lock);
}

/* Deregisters an MR already taken out of pcs_mrs. */
static void pcs_mr_destroy(struct pcs_mr *mr)
{
	if (mr->umem) {
		pcs_ops->dereg(mr);
	} else {
		pcs_mr_revoke(mr);
		pcs_unpin_host(mr);
	}
	atomic_dec(&pcs_counters.live_mrs);
	pcs_mr_put(mr);
}

/* A reference on the MR id of this file, or NULL. */
static struct pcs_mr *pcs_mr_get(struct file *f, u32 id)
{
	struct pcs_mr *mr;

	xa_lock(&pcs_mrs);
	mr = xa_load(&pcs_mrs, id);
	if (mr && mr->owner == f)
		kref_get(&mr->ref);
	else
		mr = NULL;
	xa_unlock(&pcs_mrs);
	return mr;
}

/* Takes the MR id of this file out of pcs_mrs: whoever gets it deregisters it. */
static struct pcs_mr *pcs_mr_take(struct file *f, u32 id)
{
	struct pcs_mr *mr;

	xa_lock(&pcs_mrs);
	mr = xa_load(&pcs_mrs, id);
	if (mr && mr->owner == f)
		__xa_erase(&pcs_mrs, id);
	else
		mr = NULL;
	xa_unlock(&pcs_mrs);
	return mr;
}

/* ------------------------------------------------------------------ ioctls */

static int pcs_check_reg(const struct peer_core_sim_reg *r)
{
	if (!r->size || r->addr + r->size < r->addr ||
	    PAGE_ALIGN(r->addr + r->size) < r->addr + r->size)
		return -EINVAL;
	if (r->access & ~PEER_CORE_SIM_ACCESS_WRITE || r->inject & ~PEER_CORE_SIM_REG_INJECT_ALL)
		return -EINVAL;
	if (r->kind != PEER_CORE_SIM_UMEM_MR && r->kind != PEER_CORE_SIM_UMEM_CQ)
		return -EINVAL;
	return 0;
}

static long pcs_ioctl_reg(struct file *f, struct peer_core_sim_reg __user *arg)
{
	struct peer_core_sim_reg r;
	struct pcs_mr *mr;
	u64 t0;
	int ret;

	if (copy_from_user(&r, arg, sizeof(r)))
		return -EFAULT;
	ret = pcs_check_reg(&r);
	if (ret)
		return ret;
	mr = pcs_mr_alloc(&r, f);
	if (!mr)
		return -ENOMEM;
	t0 = ktime_get_ns();
	ret = pcs_ops->reg(mr);
	atomic64_set(&pcs_counters.last_reg_ns, ktime_get_ns() - t0);
	if (ret) {
		pcs_mr_put(mr);
		return ret;
	}
	atomic_inc(&pcs_counters.live_mrs);
	ret = xa_alloc(&pcs_mrs, &mr->id, mr, xa_limit_31b, GFP_KERNEL);
	if (ret) {
		pcs_mr_destroy(mr);
		return ret;
	}
	r.id = mr->id;
	r.peer = !!mr->umem;
	memset(r.client, 0, sizeof(r.client));
	if (mr->umem)
		memcpy(r.client, mr->umem->client->ops->name, sizeof(r.client) - 1);
	if (copy_to_user(arg, &r, sizeof(r))) {
		mr = pcs_mr_take(f, r.id);
		if (mr)
			pcs_mr_destroy(mr);
		return -EFAULT;
	}
	return 0;
}

static long pcs_ioctl_dereg(struct file *f, u32 __user *arg)
{
	struct pcs_mr *mr;
	u64 t0;
	u32 id;

	if (get_user(id, arg))
		return -EFAULT;
	mr = pcs_mr_take(f, id);
	if (!mr)
		return -ENOENT;
	t0 = ktime_get_ns();
	pcs_mr_destroy(mr);
	atomic64_set(&pcs_counters.last_dereg_ns, ktime_get_ns() - t0);
	return 0;
}

/* "NIC DMA" of n bytes at a DMA address: it must be RAM (not a BAR address). */
static int pcs_dma_phys(struct device *dev, dma_addr_t dma, void *buf, size_t n, bool to_mr)
{
	while (n) {
		phys_addr_t phys = dma_to_phys(dev, dma);
		size_t chunk = min_t(size_t, n, PAGE_SIZE - offset_in_page(phys));
		void *kaddr;

		if (!pfn_valid(PHYS_PFN(phys))) {
			pr_err("NIC DMA to %pad: not RAM (a BAR physical_address used as a DMA address?)\n",
			       &dma);
			return -EFAULT;
		}
		kaddr = kmap_local_page(pfn_to_page(PHYS_PFN(phys)));
		if (to_mr)
			memcpy(kaddr + offset_in_page(phys), buf, chunk);
		else
			memcpy(buf, kaddr + offset_in_page(phys), chunk);
		kunmap_local(kaddr);
		dma += chunk;
		buf += chunk;
		n -= chunk;
	}
	return 0;
}

/*
 * The MR's VA range maps onto the concatenated SG entries from ALIGN_DOWN(addr, iova_page),
 * as the mkey built from the table does.
 */
static int pcs_dma_peer(struct pcs_mr *mr, u64 off, void *buf, size_t n, bool to_mr)
{
	struct pcs_umem *u = mr->umem;
	u64 iova = mr->addr + off - ALIGN_DOWN(mr->addr, u->iova_page);
	struct scatterlist *sg;
	int i, ret;

	for_each_sg(u->sgt.sgl, sg, u->nmap, i) {
		size_t chunk;

		if (iova >= sg_dma_len(sg)) {
			iova -= sg_dma_len(sg);
			continue;
		}
		chunk = min_t(u64, n, sg_dma_len(sg) - iova);
		ret = pcs_dma_phys(u->dma_dev, sg_dma_address(sg) + iova, buf, chunk, to_mr);
		if (ret)
			return ret;
		buf += chunk;
		n -= chunk;
		iova = 0;
		if (!n)
			return 0;
	}
	pr_err("NIC DMA beyond the SG list of MR %u (client %.*s)\n", mr->id,
	       IB_PEER_MEMORY_NAME_MAX, u->client->ops->name);
	return -EFAULT;
}

static void pcs_dma_host(struct pcs_mr *mr, u64 off, void *buf, size_t n, bool to_mr)
{
	unsigned long va = mr->addr + off;

	while (n) {
		struct page *page = mr->pages[(va >> PAGE_SHIFT) - (mr->addr >> PAGE_SHIFT)];
		size_t chunk = min_t(size_t, n, PAGE_SIZE - offset_in_page(va));
		void *kaddr = kmap_local_page(page);

		if (to_mr)
			memcpy(kaddr + offset_in_page(va), buf, chunk);
		else
			memcpy(buf, kaddr + offset_in_page(va), chunk);
		kunmap_local(kaddr);
		va += chunk;
		buf += chunk;
		n -= chunk;
	}
}

/* One chunk under the mkey. */
static int pcs_dma_chunk(struct pcs_mr *mr, u64 off, void *buf, size_t n, bool to_mr)
{
	int ret = 0;

	mutex_lock(&mr->dma_lock);
	if (mr->revoked)
		ret = -EIO;
	else if (mr->umem)
		ret = pcs_dma_peer(mr, off, buf, n, to_mr);
	else
		pcs_dma_host(mr, off, buf, n, to_mr);
	mutex_unlock(&mr->dma_lock);
	return ret;
}

/* User copies happen outside dma_lock, through a bounce buffer, one chunk at a time. */
static int pcs_dma(struct pcs_mr *mr, const struct peer_core_sim_dma *d)
{
	bool to_mr = d->dir == PEER_CORE_SIM_DMA_TO_MR;
	u8 __user *ubuf = u64_to_user_ptr(d->buf);
	u64 done = 0;
	void *bounce;
	int ret = 0;

	if (d->dir != PEER_CORE_SIM_DMA_TO_MR && d->dir != PEER_CORE_SIM_DMA_FROM_MR)
		return -EINVAL;
	if (d->offset >= mr->size || d->len > mr->size - d->offset)
		return -EINVAL;
	/* A read-only MR (pinned without FOLL_WRITE) takes no remote writes. */
	if (to_mr && !mr->writable)
		return -EACCES;
	bounce = kmalloc(PCS_DMA_CHUNK, GFP_KERNEL);
	if (!bounce)
		return -ENOMEM;
	while (done < d->len && !ret) {
		size_t n = min_t(u64, d->len - done, PCS_DMA_CHUNK);

		if (to_mr && copy_from_user(bounce, ubuf + done, n)) {
			ret = -EFAULT;
			break;
		}
		ret = pcs_dma_chunk(mr, d->offset + done, bounce, n, to_mr);
		if (!ret && !to_mr && copy_to_user(ubuf + done, bounce, n))
			ret = -EFAULT;
		done += n;
	}
	kfree(bounce);
	return ret;
}

static long pcs_ioctl_dma(struct file *f, struct peer_core_sim_dma __user *arg)
{
	struct peer_core_sim_dma d;
	struct pcs_mr *mr;
	int ret;

	if (copy_from_user(&d, arg, sizeof(d)))
		return -EFAULT;
	mr = pcs_mr_get(f, d.id);
	if (!mr)
		return -ENOENT;
	ret = pcs_dma(mr, &d);
	pcs_mr_put(mr);
	return ret;
}

/* Fills info and up to max entries of the table as the NIC sees it; returns how many. */
static u32 pcs_mr_info(struct pcs_mr *mr, struct peer_core_sim_mr_info *info,
		       struct peer_core_sim_sge *sge, u32 max)
{
	struct pcs_umem *u = mr->umem;
	struct scatterlist *sg;
	u32 i, n = 0;

	mutex_lock(&mr->dma_lock);
	if (!u) {
		info->state = PEER_CORE_SIM_MR_HOST;
		info->nmap = info->nents = mr->npages;
		info->page_size = PAGE_SIZE;
		info->core_context = 0;
		/* Once revoked, dereg unpins the pages without dma_lock. */
		for (n = 0; !mr->revoked && n < min_t(unsigned long, max, mr->npages); n++) {
			sge[n].dma_address = PFN_PHYS(page_to_pfn(mr->pages[n]));
			sge[n].length = PAGE_SIZE;
		}
	} else {
		info->state = mr->revoked ? PEER_CORE_SIM_MR_INVALIDATED : PEER_CORE_SIM_MR_MAPPED;
		info->nmap = u->nmap;
		info->nents = u->nents;
		info->page_size = u->page_size;
		info->core_context = u->core_context;
		/* After revocation the table belongs to the client again. */
		if (!mr->revoked) {
			for_each_sg(u->sgt.sgl, sg, min_t(u32, max, u->nmap), i) {
				sge[n].dma_address = sg_dma_address(sg);
				sge[n].length = sg_dma_len(sg);
				n++;
			}
		}
	}
	mutex_unlock(&mr->dma_lock);
	return n;
}

static long pcs_ioctl_mr_info(struct file *f, struct peer_core_sim_mr_info __user *arg)
{
	struct peer_core_sim_mr_info info;
	struct peer_core_sim_sge *sge = NULL;
	struct pcs_mr *mr;
	u32 n;
	int ret = 0;

	if (copy_from_user(&info, arg, sizeof(info)))
		return -EFAULT;
	if (!info.sg)
		info.sg_max = 0;
	if (info.sg_max > SZ_1M)
		return -EINVAL;
	mr = pcs_mr_get(f, info.id);
	if (!mr)
		return -ENOENT;
	if (info.sg_max) {
		sge = kvcalloc(info.sg_max, sizeof(*sge), GFP_KERNEL);
		if (!sge) {
			ret = -ENOMEM;
			goto out;
		}
	}
	n = pcs_mr_info(mr, &info, sge, info.sg_max);
	if (n && copy_to_user(u64_to_user_ptr(info.sg), sge, n * sizeof(*sge)))
		ret = -EFAULT;
	else if (copy_to_user(arg, &info, sizeof(info)))
		ret = -EFAULT;
	kvfree(sge);
out:
	pcs_mr_put(mr);
	return ret;
}

/*
 * Test stalls (PEER_CORE_SIM_REG_STALL_*), per channel (pcs.h). The stalled thread waits
 * interruptibly, with a bound, so a test that never resumes it cannot hang the VM. STALL_WAIT
 * and STALL_RESUME take the channel as their argument; 0 means any channel (wait) or every
 * stalled one (resume).
 */
static DECLARE_WAIT_QUEUE_HEAD(pcs_stall_wq);
static atomic_t pcs_stalled[PCS_STALL_CHANNELS] = { ATOMIC_INIT(0), ATOMIC_INIT(0) };
static atomic_t pcs_resume[PCS_STALL_CHANNELS] = { ATOMIC_INIT(0), ATOMIC_INIT(0) };

void pcs_stall_point(struct pcs_mr *mr, u32 point)
{
	if (mr->inject & point)
		pcs_stall(PCS_STALL_CORE);
}

void pcs_stall(unsigned int channel)
{
	unsigned int c = channel - 1;

	atomic_set(&pcs_stalled[c], 1);
	wake_up_all(&pcs_stall_wq);
	if (wait_event_interruptible_timeout(pcs_stall_wq, atomic_read(&pcs_resume[c]), 60 * HZ) <= 0)
		pr_warn("peer_core_sim: stalled call not resumed within 60 s, going on\n");
	atomic_set(&pcs_resume[c], 0);
	atomic_set(&pcs_stalled[c], 0);
}

static bool pcs_any_stalled(unsigned long channel)
{
	return channel ? atomic_read(&pcs_stalled[channel - 1]) :
			 atomic_read(&pcs_stalled[0]) || atomic_read(&pcs_stalled[1]);
}

static long pcs_ioctl_stall_wait(unsigned long channel)
{
	long r;

	if (channel > PCS_STALL_CHANNELS)
		return -EINVAL;
	r = wait_event_interruptible_timeout(pcs_stall_wq, pcs_any_stalled(channel), 10 * HZ);
	if (r < 0)
		return r;
	return r ? 0 : -ETIMEDOUT;
}

static long pcs_ioctl_stall_resume(unsigned long channel)
{
	unsigned int c;

	if (channel > PCS_STALL_CHANNELS)
		return -EINVAL;
	if (!pcs_any_stalled(channel))
		return -ESRCH;
	for (c = 0; c < PCS_STALL_CHANNELS; c++)
		if ((!channel || c == channel - 1) && atomic_read(&pcs_stalled[c]))
			atomic_set(&pcs_resume[c], 1);
	wake_up_all(&pcs_stall_wq);
	return 0;
}

/*
 * What uverbs does to a device's user contexts when the device goes away (mlx5 firmware-fatal
 * recovery, devlink reload, driver unbind, hot-unplug): ib_unregister_device ->
 * uverbs_destroy_ufile_hw(RDMA_REMOVE_DRIVER_REMOVE) deregisters every MR of the file from the
 * unregistering thread, a kworker for the health recovery, while the process keeps its fd. Here
 * a work item on the unbound workqueue deregisters every MR of this file; returns how many.
 */
struct pcs_disassociate {
	struct work_struct work;
	struct file *file;
	long count;
};

static void pcs_disassociate_fn(struct work_struct *work)
{
	struct pcs_disassociate *d = container_of(work, struct pcs_disassociate, work);
	struct pcs_mr *mr;
	unsigned long id;

	xa_for_each(&pcs_mrs, id, mr) {
		mr = pcs_mr_take(d->file, id);
		if (mr) {
			pcs_mr_destroy(mr);
			d->count++;
		}
	}
}

static long pcs_ioctl_disassociate(struct file *f)
{
	struct pcs_disassociate d = { .file = f };

	INIT_WORK_ONSTACK(&d.work, pcs_disassociate_fn);
	queue_work(system_unbound_wq, &d.work);
	flush_work(&d.work);
	destroy_work_on_stack(&d.work);
	return d.count;
}

static long pcs_ioctl_peer_private_data(void __user *arg)
{
	struct peer_core_sim_peer_info info;

	if (copy_from_user(&info, arg, sizeof(info)))
		return -EFAULT;
	if (strnlen(info.name, sizeof(info.name)) == sizeof(info.name))
		return -EINVAL;
#if PCS_BUILD == PCS_BUILD_4X
	/* uverbs passes the caller's ucontext; the stand-in has none (core.c). */
	return ib_get_peer_private_data(NULL, info.peer_id, info.name);
#else
	return -EOPNOTSUPP;
#endif
}

static long pcs_ioctl(struct file *f, unsigned int cmd, unsigned long arg)
{
	void __user *uarg = (void __user *)arg;

	switch (cmd) {
	case PEER_CORE_SIM_IOC_REG_MR:
		return pcs_ioctl_reg(f, uarg);
	case PEER_CORE_SIM_IOC_DEREG_MR:
		return pcs_ioctl_dereg(f, uarg);
	case PEER_CORE_SIM_IOC_DMA:
		return pcs_ioctl_dma(f, uarg);
	case PEER_CORE_SIM_IOC_MR_INFO:
		return pcs_ioctl_mr_info(f, uarg);
	case PEER_CORE_SIM_IOC_STALL_WAIT:
		return pcs_ioctl_stall_wait(arg);
	case PEER_CORE_SIM_IOC_STALL_RESUME:
		return pcs_ioctl_stall_resume(arg);
	case PEER_CORE_SIM_IOC_DISASSOCIATE:
		return pcs_ioctl_disassociate(f);
	case PEER_CORE_SIM_IOC_PEER_PRIVATE_DATA:
		return pcs_ioctl_peer_private_data(uarg);
	}
	return -ENOTTY;
}

static int pcs_open(struct inode *inode, struct file *f)
{
	return capable(CAP_SYS_ADMIN) ? 0 : -EPERM;
}

/* Process exit: deregister what the file still owns, as uverbs' cleanup does. */
static int pcs_release(struct inode *inode, struct file *f)
{
	struct pcs_mr *mr;
	unsigned long id;

	xa_for_each(&pcs_mrs, id, mr) {
		mr = pcs_mr_take(f, id);
		if (mr)
			pcs_mr_destroy(mr);
	}
	return 0;
}

static const struct file_operations pcs_fops = {
	.owner = THIS_MODULE,
	.open = pcs_open,
	.release = pcs_release,
	.unlocked_ioctl = pcs_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
};

static struct miscdevice pcs_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "peer_core_sim",
	.fops = &pcs_fops,
	.mode = 0600,
};

int pcs_dev_init(void)
{
	return misc_register(&pcs_misc);
}

void pcs_dev_exit(void)
{
	struct pcs_mr *mr;
	unsigned long id;

	misc_deregister(&pcs_misc);
	/* Open files pin the module, so nothing is left; deregister whatever is, all the same. */
	xa_for_each(&pcs_mrs, id, mr) {
		xa_erase(&pcs_mrs, id);
		pcs_mr_destroy(mr);
	}
	xa_destroy(&pcs_mrs);
}
