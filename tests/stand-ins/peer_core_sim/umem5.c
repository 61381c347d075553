// SPDX-License-Identifier: GPL-2.0
/*
 * The MOFED 5.x core flow (CONTRACT 1.7): generation 5x (5.1 ... 5.4-2) and 5x-unmaps
 * (5.4-3 and later: the line parameter picks 5.4-3, 24.04 or 25.04, pcs.h). ib_umem_get pins host memory first and only asks the
 * peer clients when that fails; the umem's mapping_lock is held from before get_pages until the
 * "HW driver" activates the invalidation notifier (after the mkey exists), so an invalidation
 * arriving during registration sleeps until then.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/export.h>
#include <linux/log2.h>
#include <linux/slab.h>
#include "pcs.h"

static unsigned long pcs5_kind_flags(u32 kind)
{
	/* mlx5: only user MRs pass IB_PEER_MEM_INVAL_SUPP (CQ/QP/SRQ/DEVX umems do not). */
	return kind == PEER_CORE_SIM_UMEM_MR ? IB_PEER_MEM_ALLOW | IB_PEER_MEM_INVAL_SUPP :
					       IB_PEER_MEM_ALLOW;
}

/*
 * 5.5+: a peer page larger than PAGE_SIZE makes the core trim the first and last SG entries to
 * the PAGE_SIZE-aligned range of the MR; the originals are put back before the client sees the
 * table again. With one entry both trims apply to it, in this order.
 */
static void pcs5_fix_sgls(struct pcs_umem *u, unsigned long peer_page)
{
	unsigned long end = u->addr + u->length;
	struct scatterlist *sg;
	int i;

	for_each_sg(u->sgt.sgl, sg, u->nmap, i) {
		if (i == 0) {
			unsigned long offset = ALIGN_DOWN(u->addr, PAGE_SIZE) -
					       ALIGN_DOWN(u->addr, peer_page);

			u->first_sg = sg;
			u->first_dma_address = sg_dma_address(sg);
			u->first_dma_length = sg_dma_len(sg);
			u->first_length = sg->length;
			sg_dma_address(sg) += offset;
			sg_dma_len(sg) -= offset;
			sg->length -= offset;
		}
		if (i == u->nmap - 1) {
			unsigned long trim = ALIGN(end, peer_page) - ALIGN(end, PAGE_SIZE);

			u->last_sg = sg;
			u->last_dma_length = sg_dma_len(sg);
			u->last_length = sg->length;
			sg_dma_len(sg) -= trim;
			sg->length -= trim;
		}
	}
}

static void pcs5_restore_sgls(struct pcs_umem *u)
{
	if (u->last_sg) {
		sg_dma_len(u->last_sg) = u->last_dma_length;
		u->last_sg->length = u->last_length;
	}
	if (u->first_sg) {
		sg_dma_address(u->first_sg) = u->first_dma_address;
		sg_dma_len(u->first_sg) = u->first_dma_length;
		u->first_sg->length = u->first_length;
	}
	u->first_sg = NULL;
	u->last_sg = NULL;
}

/*
 * ib_unmap_peer_client: leaving MAPPED restores the SG entries and, towards UNMAPPED, calls
 * the client's dma_unmap and put_pages; the core then forgets the table (the client owns and
 * frees it). Reaching UNMAPPED counts the deregistration.
 *
 * MOFED 24.04+ (line 24.04 and 25.04 here) zero the table before adding its nents to
 * num_dereg_pages, so that counter stays 0 there (CONTRACT 1.9); older lines count the nmap
 * of the registration.
 */
static void pcs5_unmap(struct pcs_umem *u, enum pcs_umem_state cur, enum pcs_umem_state to,
		       bool inval)
{
	struct pcs_stats *st = &u->client->stats;

	if (cur == PCS_MAPPED && (to == PCS_UNMAPPED || to == PCS_INVALIDATED)) {
		pcs5_restore_sgls(u);
		if (to == PCS_UNMAPPED) {
			pcs_call_dma_unmap(u, inval);
			pcs_call_put_pages(u, inval);
		}
		memset(&u->sgt, 0, sizeof(u->sgt));
		atomic64_inc(&st->num_dealloc_mrs);
	}
	if ((cur == PCS_MAPPED || cur == PCS_INVALIDATED) && to == PCS_UNMAPPED) {
		if (pcs_counts_dereg_pages())
			atomic64_add(u->nmap, &st->num_dereg_pages);
		atomic64_add(u->length, &st->num_dereg_bytes);
	}
	u->state = to;
}

/* 5.1-2.3.7.1 ... 5.4-3: page_shift = ilog2(get_page_size()), between get_pages and dma_map. */
static int pcs5_page_shift(struct pcs_umem *u)
{
	u->page_size = pcs_call_get_page_size(u);
	if (!u->client->ops->get_page_size)
		return -EINVAL;	/* reported by the call */
	if (!is_power_of_2(u->page_size)) {
		pcs_violation(u->client, "get_page_size returned %lu", u->page_size);
		return -EINVAL;
	}
	u->iova_page = u->page_size;
	return 0;
}

/* 5.5+: get_page_size after dma_map; the table is checked against the peer page. */
static int pcs5_fix_page_size(struct pcs_umem *u)
{
	u->page_size = pcs_call_get_page_size(u);
	if (!u->client->ops->get_page_size)
		return -EINVAL;	/* reported by the call */
	if (!is_power_of_2(u->page_size) || u->page_size < PAGE_SIZE) {
		pcs_violation(u->client, "get_page_size returned %lu", u->page_size);
		return -EINVAL;
	}
	u->iova_page = u->page_size;
	return 0;
}

/* The fix-up must not eat whole entries: a client whose entries are smaller than its page. */
static int pcs5_check_fixable(struct pcs_umem *u)
{
	unsigned long end = u->addr + u->length;
	unsigned long head = ALIGN_DOWN(u->addr, PAGE_SIZE) - ALIGN_DOWN(u->addr, u->page_size);
	unsigned long tail = ALIGN(end, u->page_size) - ALIGN(end, PAGE_SIZE);
	struct scatterlist *last = sg_last(u->sgt.sgl, u->nmap);

	if (head < sg_dma_len(u->sgt.sgl) && tail < sg_dma_len(last) &&
	    (u->nmap > 1 || head + tail < sg_dma_len(last)))
		return 0;
	pcs_violation(u->client, "SG entries smaller than get_page_size %lu", u->page_size);
	return -EINVAL;
}

/* dma_map and what the core checks and computes right after it. */
static int pcs5_map(struct pcs_umem *u)
{
	/* The sgt_append cores (24.04+) pass umem->sgt_append.sgt.nents itself as nmap; older ones umem->nmap. */
	int *nmap = pcs_line >= PCS_LINE_24_04 ? (int *)&u->sgt.nents : &u->nmap;
	bool fix = pcs_fixes_sgls();
	int ret;

	if (!u->dma_dev) {
		pr_err("no NIC (QEMU edu device 1234:11e8): cannot dma_map\n");
		return -ENODEV;
	}
	ret = pcs_call_dma_map(u, nmap);
	if (ret)
		return ret;
	u->nmap = *nmap;
	u->nents = u->sgt.orig_nents;
	if (fix)
		ret = pcs5_fix_page_size(u);
	if (!ret)
		ret = pcs_check_sgl(u, true);
	if (!ret && fix && u->page_size != PAGE_SIZE)
		ret = pcs5_check_fixable(u);
	if (ret) {
		/* Not a MOFED path: the core refuses a table it cannot use. */
		pcs_call_dma_unmap(u, false);
		return ret;
	}
	if (fix) {
		if (u->page_size != PAGE_SIZE)
			pcs5_fix_sgls(u, u->page_size);
		u->iova_page = PAGE_SIZE;
	}
	return 0;
}

/* ib_peer_umem_get: called after pin_user_pages failed with gup_err. */
static int pcs5_umem_get(struct pcs_mr *mr, int gup_err)
{
	struct pcs_client *c;
	struct pcs_umem *u;
	void *ctx;
	int ret;

	c = pcs_get_peer_client(mr->addr, mr->size, pcs5_kind_flags(mr->kind), &ctx);
	if (!c)
		return gup_err;
	pcs_stall_point(mr, PEER_CORE_SIM_REG_STALL_AFTER_ACQUIRE);
	u = pcs_umem_alloc(mr, c, ctx);
	if (!u) {
		pcs_put_peer_client(c, ctx, false);
		return -ENOMEM;
	}

	mutex_lock(&u->mapping_lock);
	if (c->invalidating) {
		ret = xa_alloc_cyclic(&c->umem_xa, &u->xa_id, u,
				      XA_LIMIT(0, PCS_NO_INVALIDATION_ID - 1),
				      &c->xa_cyclic_next, GFP_KERNEL);
		if (ret < 0)
			goto err_umem;
	}
	u->core_context = u->xa_id;
	/* sg_head is "obsolete, always NULL" on 5.x. */
	ret = pcs_call_get_pages(u, NULL);
	if (ret)
		goto err_xa;
	pcs_stall_point(mr, PEER_CORE_SIM_REG_STALL_AFTER_GET_PAGES);
	if (!pcs_fixes_sgls()) {
		ret = pcs5_page_shift(u);
		if (ret)
			goto err_pages;
	}
	ret = pcs5_map(u);
	if (ret)
		goto err_pages;
	pcs_stall_point(mr, PEER_CORE_SIM_REG_STALL_AFTER_MAP);

	u->state = PCS_MAPPED;
	atomic64_add(u->nmap, &c->stats.num_reg_pages);
	atomic64_add(u->length, &c->stats.num_reg_bytes);
	atomic64_inc(&c->stats.num_alloc_mrs);
	/* An invalidating client's umem stays locked until activation (pcs5_activate). */
	if (u->xa_id == PCS_NO_INVALIDATION_ID)
		mutex_unlock(&u->mapping_lock);
	mr->umem = u;	/* the umem's first reference is the MR's */
	return 0;

err_pages:
	/* Error after get_pages: put_pages (no dma_unmap), then release. */
	pcs_call_put_pages(u, false);
	memset(&u->sgt, 0, sizeof(u->sgt));
err_xa:
	if (u->xa_id != PCS_NO_INVALIDATION_ID)
		xa_erase(&c->umem_xa, u->xa_id);
err_umem:
	mutex_unlock(&u->mapping_lock);
	pcs_umem_put(u);
	pcs_put_peer_client(c, ctx, false);
	return ret;
}

/* ib_umem_activate_invalidation_notifier: from here on invalidation may run. */
static void pcs5_activate(struct pcs_umem *u)
{
	if (u->xa_id == PCS_NO_INVALIDATION_ID)
		return;
	u->notifier_active = true;
	mutex_unlock(&u->mapping_lock);
}

/*
 * ib_umem_stop_invalidation_notifier, as fixed in 25.04 (cccf5314). MOFED 5.4-3 ... 24.10
 * test xa_id != PEER_NO_INVALIDATION_ID in the middle branch (stop_bug=1 here, CONTRACT 1.7
 * item 7): they re-lock the mutex this thread still holds when an invalidating client's
 * registration fails before activation (lockdep "possible recursive locking", then a hung
 * task), and unlock an unheld one at every dereg of a persistent client's MR (lockdep "bad
 * unlock balance"). 5.1 ... 5.4-2 have no such function: their ib_umem_release takes the lock
 * and unmaps, which is the old-style branch here.
 */
static void pcs5_stop_notifier(struct pcs_umem *u)
{
	struct pcs_mr *mr = u->mr;
	bool unmaps = pcs_client_unmaps(u->client);
	bool persistent = u->xa_id == PCS_NO_INVALIDATION_ID;
	enum pcs_umem_state cur;

	atomic64_inc(&pcs_counters.stop_calls);
	if (u->notifier_active) {
		mutex_lock(&u->mapping_lock);
		u->notifier_active = false;
	} else if (pcs_stop_bug ? !persistent : persistent) {
		mutex_lock(&u->mapping_lock);
	} /* else: not activated yet, this thread still holds mapping_lock */
	pcs_stall_point(mr, PEER_CORE_SIM_REG_STALL_IN_DEREG);

	if (!unmaps) {
		/* Old-style client: dma_unmap + put_pages under mapping_lock (ref 2696789). */
		pcs5_unmap(u, u->state, PCS_UNMAPPED, false);
		mutex_unlock(&u->mapping_lock);
		return;
	}
	/* UNMAPS: block invalidation, then unmap outside the lock unless it was invalidated. */
	cur = u->state;
	u->state = PCS_UNMAPPED;
	mutex_unlock(&u->mapping_lock);
	pcs_stall_point(mr, PEER_CORE_SIM_REG_STALL_DEREG_UNLOCKED);
	pcs5_unmap(u, cur, PCS_UNMAPPED, false);
}

#if PCS_BUILD == PCS_BUILD_5X_UNMAPS
/*
 * The export clients tell an UNMAPS-capable core by (CONTRACT 1.1); only mlx5 calls it, here
 * the core's own dereg path. MOFED's takes the struct ib_umem its ib_umem_get returned; the
 * stand-in's umem is a struct pcs_umem.
 */
/* noinline: a lockdep report of the stop bug names this function, as it names MOFED's. */
noinline void ib_umem_stop_invalidation_notifier(struct pcs_umem *umem)
{
	pcs5_stop_notifier(umem);
}
EXPORT_SYMBOL(ib_umem_stop_invalidation_notifier);
#endif

/* What mlx5 calls on a registration error after the umem was obtained, and at dereg. */
static void pcs5_hw_stop_notifier(struct pcs_umem *u)
{
#if PCS_BUILD == PCS_BUILD_5X_UNMAPS
	ib_umem_stop_invalidation_notifier(u);
#else
	pcs5_stop_notifier(u);
#endif
}

/*
 * ib_peer_umem_release. What is still mapped here belongs to no invalidating client (a CQ-style
 * umem, never stopped). 5.4-3 and later unmap it without mapping_lock; 5.1 ... 5.4-2 take the
 * lock around the unmap (persistent umems), as their release does for every umem.
 */
static void pcs5_release(struct pcs_umem *u)
{
	struct pcs_client *c = u->client;
	bool lock = pcs_gen == PCS_GEN_5X && u->state == PCS_MAPPED;

	if (lock)
		mutex_lock(&u->mapping_lock);
	pcs5_unmap(u, u->state, PCS_UNMAPPED, false);
	if (lock)
		mutex_unlock(&u->mapping_lock);
	if (u->xa_id != PCS_NO_INVALIDATION_ID)
		xa_erase(&c->umem_xa, u->xa_id);
	pcs_put_peer_client(c, u->ctx, false);
	/* The MR keeps its reference to the umem (for MR_INFO) until it is freed. */
}

/*
 * ib_invalidate_peer_memory, called synchronously by the client (from NVIDIA's free
 * callback). Sleeps on mapping_lock while the umem is being registered or deregistered.
 */
static int pcs5_invalidate(void *reg_handle, u64 core_context)
{
	struct pcs_client *c = reg_handle;
	struct pcs_umem *u;
	bool stall;

	/* The client may be unregistering: keep c until this call returns (MOFED does not). */
	pcs_client_get(c);
	xa_lock(&c->umem_xa);
	c->stats.num_free_callbacks++;
	u = core_context <= PCS_NO_INVALIDATION_ID ? xa_load(&c->umem_xa, core_context) : NULL;
	if (!u) {
		xa_unlock(&c->umem_xa);
		pcs_client_put(c);
		return 0;
	}
	kref_get(&u->kref);
	xa_unlock(&c->umem_xa);

	mutex_lock(&u->mapping_lock);
	/* mlx5_invalidate_umem: revoke the mkey; the MR object lives until dereg. */
	if (u->state == PCS_MAPPED && u->notifier_active)
		pcs_mr_revoke(u->mr);
	if (pcs_client_unmaps(c))
		pcs5_unmap(u, u->state, PCS_INVALIDATED, true);
	else
		pcs5_unmap(u, u->state, PCS_UNMAPPED, true);
	stall = u->inject & PEER_CORE_SIM_REG_STALL_INVALIDATE_RETURN;
	mutex_unlock(&u->mapping_lock);
	pcs_umem_put(u);
	pcs_client_put(c);
	if (stall)
		pcs_stall(PCS_STALL_INVALIDATE);
	return 0;
}

static int pcs5_reg(struct pcs_mr *mr)
{
	int ret = pcs_pin_host(mr);

	if (!ret)
		return 0;
	/* "FIXME: this placement is horrible": the peer path only after GUP failed. */
	ret = pcs5_umem_get(mr, ret);
	if (ret)
		return ret;
	if (mr->inject & PEER_CORE_SIM_REG_FAIL_AFTER_MAP) {
		/* mlx5 mkey creation failed: stop the notifier, release the umem. */
		pcs5_hw_stop_notifier(mr->umem);
		pcs5_release(mr->umem);
		return -ENOMEM;
	}
	pcs5_activate(mr->umem);
	return 0;
}

/*
 * mlx5 dereg of an MR: revoke the mkey, stop the notifier, release the umem. CQ, QP, SRQ,
 * DEVX and doorbell umems are only released (mlx5 never calls stop for them), so the
 * pre-25.04 stop bug never meets them; their client is a persistent one (pcs5_kind_flags).
 */
static void pcs5_dereg(struct pcs_mr *mr)
{
	pcs_mr_revoke(mr);
	if (mr->kind == PEER_CORE_SIM_UMEM_MR)
		pcs5_hw_stop_notifier(mr->umem);
	pcs5_release(mr->umem);
}

const struct pcs_gen_ops pcs_gen_5x_ops = {
	.name = "5x",
	.reg = pcs5_reg,
	.dereg = pcs5_dereg,
	.invalidate = pcs5_invalidate,
};
