// SPDX-License-Identifier: GPL-2.0
/*
 * The MOFED 4.x core flow (CONTRACT 1.8): 4.0 ... 4.9 LTS and 5.0. Every registration asks the
 * peer clients first (host memory too) and pins host pages only when none takes the range.
 * Invalidation holds the per-client mutex for the whole call and, once the MR is complete,
 * destroys the MR's umem inside the call: dma_unmap, put_pages and release.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/log2.h>
#include <linux/slab.h>
#include "pcs.h"

/* ib_peer_insert_context: tickets count from 1, under the per-client mutex. */
static void pcs4_insert_ticket(struct pcs_umem *u)
{
	struct pcs_client *c = u->client;

	mutex_lock(&c->lock);
	u->core_context = c->last_ticket++;
	u->ticketed = true;
	list_add_tail(&u->ticket_node, &c->tickets);
	mutex_unlock(&c->lock);
}

/* Caller holds c->lock. A dereg waiting in pcs4_invalidate is let go. */
static void pcs4_remove_ticket_locked(struct pcs_umem *u)
{
	lockdep_assert_held(&u->client->lock);
	list_del_init(&u->ticket_node);
	u->ticketed = false;
	if (u->inflight)
		complete_all(&u->ticket_gone);	/* every invalidation waiting on this ticket */
}

static void pcs4_remove_ticket(struct pcs_umem *u)
{
	mutex_lock(&u->client->lock);
	pcs4_remove_ticket_locked(u);
	mutex_unlock(&u->client->lock);
}

static struct pcs_umem *pcs4_find_ticket(struct pcs_client *c, u64 ticket)
{
	struct pcs_umem *u;

	list_for_each_entry(u, &c->tickets, ticket_node)
		if (u->core_context == ticket)
			return u;
	return NULL;
}

/* get_page_size, then dma_map into the umem's table (4.x passes &umem->nmap). */
static int pcs4_map(struct pcs_umem *u)
{
	long page_size;
	int ret;

	page_size = pcs_call_get_page_size(u);
	if (page_size <= 0 || !is_power_of_2(page_size)) {
		pcs_violation(u->client, "get_page_size returned %ld", page_size);
		return -EINVAL;
	}
	u->page_size = page_size;
	u->iova_page = page_size;
	if (!u->dma_dev) {
		pr_err("no NIC (QEMU edu device 1234:11e8): cannot dma_map\n");
		return -ENODEV;
	}
	ret = pcs_call_dma_map(u, &u->nmap);
	if (ret)
		return ret;
	u->nents = u->sgt.orig_nents;
	ret = pcs_check_sgl(u, false);
	if (ret)
		pcs_call_dma_unmap(u, false); /* not a MOFED path: a table the NIC cannot use */
	return ret;
}

/* peer_umem_get */
static int pcs4_umem_get(struct pcs_mr *mr, struct pcs_client *c, void *ctx)
{
	struct pcs_stats *st = &c->stats;
	struct pcs_umem *u;
	int ret;

	pcs_stall_point(mr, PEER_CORE_SIM_REG_STALL_AFTER_ACQUIRE);
	u = pcs_umem_alloc(mr, c, ctx);
	if (!u) {
		pcs_put_peer_client(c, ctx, false);
		return -ENOMEM;
	}
	/* The ticket follows the umem's IB_PEER_MEM_INVAL_SUPP (user MRs), not the client. */
	if (mr->kind == PEER_CORE_SIM_UMEM_MR)
		pcs4_insert_ticket(u);
	/* 4.x hands the client a real sg_table (it may fill it here). */
	ret = pcs_call_get_pages(u, &u->sgt);
	if (ret)
		goto err_ticket;
	pcs_stall_point(mr, PEER_CORE_SIM_REG_STALL_AFTER_GET_PAGES);
	ret = pcs4_map(u);
	if (ret)
		goto err_pages;
	pcs_stall_point(mr, PEER_CORE_SIM_REG_STALL_AFTER_MAP);
	u->state = PCS_MAPPED;
	atomic64_add(u->nmap, &st->num_reg_pages);
	atomic64_add((u64)u->nmap * u->page_size, &st->num_reg_bytes);
	atomic64_inc(&st->num_alloc_mrs);
	mr->umem = u;	/* the umem's first reference is the MR's */
	return 0;

err_pages:
	pcs_call_put_pages(u, false);
err_ticket:
	if (u->ticketed)
		pcs4_remove_ticket(u);
	pcs_umem_put(u);
	pcs_put_peer_client(c, ctx, false);
	return ret;
}

/*
 * peer_umem_release: the ticket goes first, then dma_unmap, put_pages, the counters and
 * release(). inval: called from pcs4_invalidate, which holds c->lock.
 */
static void pcs4_release(struct pcs_umem *u, bool inval)
{
	struct pcs_client *c = u->client;
	struct pcs_stats *st = &c->stats;

	if (u->ticketed) {
		if (inval)
			pcs4_remove_ticket_locked(u);
		else
			pcs4_remove_ticket(u);
	}
	pcs_call_dma_unmap(u, inval);
	pcs_call_put_pages(u, inval);
	atomic64_add(u->nmap, &st->num_dereg_pages);
	atomic64_add((u64)u->nmap * u->page_size, &st->num_dereg_bytes);
	atomic64_inc(&st->num_dealloc_mrs);
	u->state = PCS_UNMAPPED;
	pcs_put_peer_client(c, u->ctx, inval);
}

/* ib_umem_activate_invalidation_notifier (4.x): fails if the peer invalidated meanwhile. */
static int pcs4_activate(struct pcs_umem *u)
{
	int ret = 0;

	if (!u->ticketed)
		return 0;
	mutex_lock(&u->client->lock);
	if (u->peer_invalidated) {
		pr_err("ib_umem_activate_invalidation_notifier: pages were invalidated by peer\n");
		ret = -EINVAL;
	} else {
		u->activated = true;
	}
	mutex_unlock(&u->client->lock);
	return ret;
}

/*
 * ib_invalidate_peer_memory (4.x) with mlx5_invalidate_umem: the per-client mutex is held for
 * the whole call. Not yet activated: only marked (the registration then fails). Otherwise the
 * MR is revoked and its umem destroyed here, unless a dereg got there first, in which case the
 * call waits until that dereg has removed the ticket (MOFED's inflight_invalidation).
 */
static int pcs4_invalidate(void *reg_handle, u64 core_context)
{
	struct pcs_client *c = reg_handle;
	struct pcs_umem *u;
	struct pcs_mr *mr;
	bool stall = false;

	/* MOFED 4.x unlocks c->lock after the last release may have let unregister free c. */
	pcs_client_get(c);
	mutex_lock(&c->lock);
	c->stats.num_free_callbacks++;
	u = pcs4_find_ticket(c, core_context);
	if (!u)
		goto out;
	if (!u->activated) {
		u->peer_invalidated = true;
		goto out;
	}
	mr = u->mr;
	if (atomic_inc_return(&mr->invalidated) > 1) {
		u->inflight = true;
		kref_get(&u->kref);
		mutex_unlock(&c->lock);
		wait_for_completion(&u->ticket_gone);
		pcs_umem_put(u);
		pcs_client_put(c);
		return 0;
	}
	stall = u->inject & PEER_CORE_SIM_REG_STALL_INVALIDATE_RETURN;
	pcs_mr_revoke(mr);
	pcs4_release(u, true);
	complete_all(&mr->inval_done);
out:
	mutex_unlock(&c->lock);
	pcs_client_put(c);
	if (stall)
		pcs_stall(PCS_STALL_INVALIDATE);
	return 0;
}

static unsigned long pcs4_kind_flags(u32 kind)
{
	return kind == PEER_CORE_SIM_UMEM_MR ? IB_PEER_MEM_ALLOW | IB_PEER_MEM_INVAL_SUPP :
					       IB_PEER_MEM_ALLOW;
}

static int pcs4_reg(struct pcs_mr *mr)
{
	struct pcs_client *c;
	void *ctx;
	int ret;

	/* Acquire before get_user_pages, for every registration. */
	c = pcs_get_peer_client(mr->addr, mr->size, pcs4_kind_flags(mr->kind), &ctx);
	if (!c)
		return pcs_pin_host(mr);
	ret = pcs4_umem_get(mr, c, ctx);
	if (ret)
		return ret;
	if (mr->inject & PEER_CORE_SIM_REG_FAIL_AFTER_MAP) {
		/* mlx5 mkey creation failed: ib_umem_release. */
		pcs4_release(mr->umem, false);
		return -ENOMEM;
	}
	ret = pcs4_activate(mr->umem);
	if (ret)
		pcs4_release(mr->umem, false);
	return ret;
}

/* mlx5_ib_dereg_mr (4.x): an MR already destroyed by invalidation only frees its object. */
static void pcs4_dereg(struct pcs_mr *mr)
{
	if (atomic_inc_return(&mr->invalidated) > 1) {
		wait_for_completion(&mr->inval_done);
		return;
	}
	pcs_mr_revoke(mr);
	pcs_stall_point(mr, PEER_CORE_SIM_REG_STALL_IN_DEREG);
	pcs4_release(mr->umem, false);
}

const struct pcs_gen_ops pcs_gen_4x_ops = {
	.name = "4x",
	.reg = pcs4_reg,
	.dereg = pcs4_dereg,
	.invalidate = pcs4_invalidate,
};
