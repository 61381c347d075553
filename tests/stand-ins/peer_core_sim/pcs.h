/* SPDX-License-Identifier: GPL-2.0 */
/*
 * peer_core_sim: a stand-in for MOFED's peer-memory core (ib_core's peer_mem.c + umem.c + the
 * mlx5 MR glue), internal declarations. CONTRACT.md section 1 is the specification.
 *
 * Lock order (never the reverse; "->" means "taken while holding"):
 *
 *   pcs_peer_mutex (MOFED peer_memory_mutex: client list, acquire loop, sysfs)
 *     -> whatever the client's acquire takes (e.g. mmap_lock)
 *   umem->mapping_lock (5.x: held from before get_pages until activation or teardown)
 *     -> client get_pages/dma_map/dma_unmap/put_pages (and the client's own locks)
 *     -> mr->dma_lock (revoking the "mkey")
 *     -> client->umem_xa's xa_lock is never held around a mutex: only kref_get under it
 *   client->lock (4.x per-client mutex: tickets, activation, the whole invalidation)
 *     -> client dma_unmap/put_pages/release (4.x invalidation destroys the umem inside)
 *     -> mr->dma_lock
 *   mr->dma_lock: innermost mutex; never held across a client call or a user copy
 *   pcs_mrs' xa_lock, pcs_nic_lock: innermost
 * pcs_peer_mutex and a client->lock are never held together.
 */
#ifndef PCS_H
#define PCS_H

#include <linux/atomic.h>
#include <linux/completion.h>
#include <linux/kobject.h>
#include <linux/kref.h>
#include <linux/mutex.h>
#include <linux/refcount.h>
#include <linux/scatterlist.h>
#include <linux/xarray.h>
#include <rdma/peer_mem.h>
#include "nvpeer_sim_uapi.h"

enum pcs_gen {
	PCS_GEN_4X,		/* MOFED 4.0 ... 4.9 LTS and 5.0 (legacy 152-byte layout) */
	PCS_GEN_5X,		/* MOFED 5.1 ... 5.4-2: _ex marker ignored, page_shift before dma_map */
	PCS_GEN_5X_UNMAPS,	/* MOFED 5.4-3+: _ex/UNMAPS honoured; the line below says the rest */
};

/*
 * The generation is fixed per build: clients tell a core's generation from what it exports
 * (CONTRACT 1.1), and exports are fixed when a module is linked. One .ko per export set:
 *
 *   peer_core_sim.ko     5x-unmaps  exports ib_umem_stop_invalidation_notifier
 *   peer_core_sim_5x.ko  5x         neither marker (as 5.1-0.6.6.0 ... 5.4-2)
 *   peer_core_sim_4x.ko  4x         exports ib_get_peer_private_data (as 4.1 ... 5.0)
 *   ib_uverbs.ko         5x-unmaps  DOCA-OFED 24.07+ layout: the core is module ib_uverbs
 *
 * peer_core_sim.ko is the Kbuild composite of the sources; the others are one object each
 * (single.c: a Kbuild object belongs to one module), whose wrapper sets PCS_BUILD first.
 */
#define PCS_BUILD_4X		1
#define PCS_BUILD_5X		2
#define PCS_BUILD_5X_UNMAPS	3
/*
 * peer_core_sim_abi2.ko is one more 5x-unmaps build whose struct pcs_umem (ib_umem) has one more
 * field (PCS_UMEM_ABI2): what a client built against ib_uverbs.ko's CRCs (the same single
 * translation unit without it) meets after a MOFED update (REVIEW-KMOD-2 T3-3;
 * tests/compat/test-modversions.sh on a MODVERSIONS kernel).
 */
#ifndef PCS_BUILD
#define PCS_BUILD		PCS_BUILD_5X_UNMAPS
#endif
#if PCS_BUILD == PCS_BUILD_4X
#define PCS_BUILD_GEN		PCS_GEN_4X
#define PCS_BUILD_NAME		"4x"
#elif PCS_BUILD == PCS_BUILD_5X
#define PCS_BUILD_GEN		PCS_GEN_5X
#define PCS_BUILD_NAME		"5x"
#elif PCS_BUILD == PCS_BUILD_5X_UNMAPS
#define PCS_BUILD_GEN		PCS_GEN_5X_UNMAPS
#define PCS_BUILD_NAME		"5x-unmaps"
#else
#error "PCS_BUILD must be PCS_BUILD_4X, PCS_BUILD_5X or PCS_BUILD_5X_UNMAPS"
#endif

extern const enum pcs_gen pcs_gen;
extern bool pcs_sysfs;

/*
 * The MOFED line a 5x-unmaps build acts (parameter line=). The UNMAPS-era cores export the same
 * symbols, so a client cannot tell them apart at load; they differ in flow (CONTRACT 1.7 item 8)
 * and counters (1.9), and the ones before 25.04 have the `!=` bug of 1.7 item 7:
 *
 *   5.4-3   the 5.4 LTS line: page_shift from get_page_size before dma_map, no fix_peer_sgls
 *   24.04   the flow of 5.5 ... 24.10 (fix_peer_sgls, the bug) with the counters of 24.04+
 *           (sgt_append: num_dereg_pages stays 0); 5.5 ... 23.10, which count it, have no line
 *   25.04   25.04 and later (default): as 24.04 with the bug fixed
 *
 * The 4x and 5x builds have no line (PCS_LINE_NONE sorts before all).
 */
enum pcs_line { PCS_LINE_NONE, PCS_LINE_5_4_3, PCS_LINE_24_04, PCS_LINE_25_04 };
extern enum pcs_line pcs_line;
/*
 * stop_bug=1 (lines 5.4-3 and 24.04 only): ib_umem_stop_invalidation_notifier as those lines
 * shipped it. Off by default: its first lockdep report turns lockdep off for the rest of a
 * boot, so only the boots that show the bug turn it on (tests/scenarios/core_bugs.py).
 */
extern bool pcs_stop_bug;

/* fix_peer_sgls and get_page_size after dma_map: 5.5 and later. */
static inline bool pcs_fixes_sgls(void)
{
	return pcs_line >= PCS_LINE_24_04;
}

/* 24.04+ zero the umem's table before adding its entries to num_dereg_pages (CONTRACT 1.9). */
static inline bool pcs_counts_dereg_pages(void)
{
	return pcs_line < PCS_LINE_24_04;
}

/* Core-internal umem flags (include/rdma/ib_umem.h in 5.x, ib_peer_mem.h in 4.x). */
#define IB_PEER_MEM_ALLOW	(1 << 0)
#define IB_PEER_MEM_INVAL_SUPP	(1 << 1)
/* 5.x: core_context of a umem whose client never invalidates. */
#define PCS_NO_INVALIDATION_ID	U32_MAX

/* ib_peer_memory_statistics: the eight memory_peers files. */
struct pcs_stats {
	atomic64_t num_alloc_mrs;
	atomic64_t num_dealloc_mrs;
	atomic64_t num_reg_pages;
	atomic64_t num_dereg_pages;
	atomic64_t num_reg_bytes;
	atomic64_t num_dereg_bytes;
	unsigned long num_free_callbacks; /* 5.x: under umem_xa's lock; 4.x: under client->lock */
};

/* ib_peer_memory_client: one registered client. Freed by its kobject's release. */
struct pcs_client {
	struct kobject kobj;
	const struct peer_memory_client *ops;	/* the client's struct, never copied */
	struct list_head list;			/* pcs_clients, under pcs_peer_mutex */
	refcount_t usecnt;			/* 1 + acquired umems (+ 4.x invalidations) */
	struct completion usecnt_zero;
	bool invalidating;			/* gave an invalidate_callback pointer */
	bool in_sysfs;
	struct pcs_stats stats;
	/* 5.x */
	struct xarray umem_xa;			/* core_context -> umem */
	u32 xa_cyclic_next;
	/* 4.x */
	struct mutex lock;
	struct list_head tickets;
	u64 last_ticket;
};

enum pcs_umem_state { PCS_UNMAPPED, PCS_MAPPED, PCS_INVALIDATED };

struct pcs_mr;
struct seq_file;

/* ib_umem_peer (5.x) / the peer part of ib_umem + invalidation_ctx (4.x). */
struct pcs_umem {
	struct kref kref;
	struct pcs_client *client;
	void *ctx;				/* the client's client_context */
	struct pcs_mr *mr;			/* invalidation_private */
	u32 inject;				/* the MR's PEER_CORE_SIM_REG_* (it may go first) */
	struct device *dma_dev;			/* referenced; NULL: no NIC */
	unsigned long addr;
	size_t length;
	bool writable;
	u64 core_context;
	struct sg_table sgt;			/* the core's sg_head, filled by dma_map */
	int nmap;				/* *nmap as dma_map left it */
	unsigned int nents;			/* sgt.orig_nents after dma_map */
	unsigned long page_size;		/* what get_page_size returned */
	unsigned long iova_page;		/* the page size the "NIC" translates with */
	enum pcs_umem_state state;
	/* 5.x */
	struct mutex mapping_lock;
	bool notifier_active;			/* invalidation_func != NULL */
	u32 xa_id;
	struct scatterlist *first_sg, *last_sg;	/* fix_peer_sgls save area */
	dma_addr_t first_dma_address;
	unsigned int first_dma_length, first_length, last_dma_length, last_length;
	/* 4.x */
	struct list_head ticket_node;
	bool ticketed, activated, peer_invalidated, inflight;
	struct completion ticket_gone;
#ifdef PCS_UMEM_ABI2
	/*
	 * peer_core_sim_abi2.ko: a core whose umem grew a field, as MOFED releases change struct
	 * ib_umem under an unchanged peer-memory ABI. With CONFIG_MODVERSIONS the CRC of
	 * ib_umem_stop_invalidation_notifier, which covers this struct, differs from
	 * ib_uverbs.ko's (the same build but this field); those of
	 * ib_(un)register_peer_memory_client do not.
	 */
	unsigned long abi2_field;
#endif
};

/* One "MR" (mlx5_ib_mr + its mkey) created through /dev/peer_core_sim. */
struct pcs_mr {
	struct kref ref;
	u32 id;
	struct file *owner;
	unsigned long addr;
	size_t size;
	u32 kind;
	u32 inject;
	bool writable;
	struct mutex dma_lock;			/* the "mkey": DMA holds it, revocation takes it */
	bool revoked;
	/* host memory (ib_umem_get's own pin) */
	struct page **pages;
	unsigned long npages;
	/* peer memory */
	struct pcs_umem *umem;
	/* 4.x: mlx5's mr->invalidated / invalidation_comp */
	atomic_t invalidated;
	struct completion inval_done;
};

/* What differs between the core generations. */
struct pcs_gen_ops {
	const char *name;
	/* ib_umem_get + mkey creation + activation; host or peer memory. */
	int (*reg)(struct pcs_mr *mr);
	/* Destroys a peer MR's umem (mkey revoked first). */
	void (*dereg)(struct pcs_mr *mr);
	/* The function handed to invalidating clients. */
	int (*invalidate)(void *reg_handle, u64 core_context);
};
extern const struct pcs_gen_ops pcs_gen_4x_ops, pcs_gen_5x_ops;
extern const struct pcs_gen_ops *const pcs_ops;

/* The user contexts of ib_get_peer_private_data (4x build): the stand-in has none. */
struct ib_ucontext;
#if PCS_BUILD == PCS_BUILD_4X
int ib_get_peer_private_data(struct ib_ucontext *context, u64 peer_id, char *peer_name);
#endif
#if PCS_BUILD == PCS_BUILD_5X_UNMAPS
void ib_umem_stop_invalidation_notifier(struct pcs_umem *umem);
#endif

/* core.c: clients, calls into them, counters */
enum pcs_op {
	PCS_OP_ACQUIRE, PCS_OP_GET_PAGES, PCS_OP_DMA_MAP, PCS_OP_DMA_UNMAP,
	PCS_OP_PUT_PAGES, PCS_OP_GET_PAGE_SIZE, PCS_OP_RELEASE, PCS_OP_COUNT
};
extern const char *const pcs_op_names[PCS_OP_COUNT];
struct pcs_counters {
	atomic64_t calls[PCS_OP_COUNT];
	atomic64_t inval_calls[PCS_OP_COUNT];	/* made inside the invalidate function */
	atomic64_t client_ns[PCS_OP_COUNT];	/* time spent inside each client op, for benchmarks */
	atomic64_t violations;
	atomic64_t stop_calls;			/* ib_umem_stop_invalidation_notifier (5.x) */
	atomic_t live_umems;			/* acquired, not yet released */
	atomic_t live_mrs;
	/* In-kernel duration of the last REG_MR / DEREG_MR (core + client), for benchmarks. */
	atomic64_t last_reg_ns;
	atomic64_t last_dereg_ns;
};
extern struct pcs_counters pcs_counters;

#define pcs_violation(c, fmt, ...) do {						\
	atomic64_inc(&pcs_counters.violations);					\
	pr_err("protocol violation by client %.*s: " fmt "\n",			\
	       IB_PEER_MEMORY_NAME_MAX, (c)->ops->name, ##__VA_ARGS__);		\
} while (0)

struct pcs_client *pcs_get_peer_client(unsigned long addr, size_t size,
				       unsigned long flags, void **ctx);
void pcs_put_peer_client(struct pcs_client *c, void *ctx, bool inval);
void pcs_client_get(struct pcs_client *c);
void pcs_client_put(struct pcs_client *c);
bool pcs_client_unmaps(const struct pcs_client *c);
int pcs_call_get_pages(struct pcs_umem *u, struct sg_table *sg_head);
int pcs_call_dma_map(struct pcs_umem *u, int *nmap);
void pcs_call_dma_unmap(struct pcs_umem *u, bool inval);
void pcs_call_put_pages(struct pcs_umem *u, bool inval);
unsigned long pcs_call_get_page_size(struct pcs_umem *u);
struct pcs_umem *pcs_umem_alloc(struct pcs_mr *mr, struct pcs_client *c, void *ctx);
void pcs_umem_put(struct pcs_umem *u);
int pcs_check_sgl(struct pcs_umem *u, bool page_aligned);
void pcs_stats_show_clients(struct seq_file *m);

/* sysfs.c */
int pcs_sysfs_add(struct pcs_client *c);
void pcs_sysfs_del(struct pcs_client *c);
void pcs_sysfs_put_root(void);
extern const struct kobj_type pcs_client_ktype;

/* mr.c: MRs, host pinning, the "NIC DMA", /dev/peer_core_sim */
int pcs_pin_host(struct pcs_mr *mr);
void pcs_mr_revoke(struct pcs_mr *mr);
/*
 * Test stalls, on two channels that stall and resume apart (a registration can wait at its step
 * while a free callback waits inside the core's invalidate): PCS_STALL_CORE for the
 * registration and dereg points, PCS_STALL_INVALIDATE for INVALIDATE_RETURN. pcs_stall_point:
 * when the MR asked for POINT; pcs_stall: always.
 */
enum { PCS_STALL_CORE = 1, PCS_STALL_INVALIDATE = 2, PCS_STALL_CHANNELS = 2 };
void pcs_stall_point(struct pcs_mr *mr, u32 point);
void pcs_stall(unsigned int channel);
int pcs_dev_init(void);
void pcs_dev_exit(void);

/* nic.c: QEMU's edu device as the RDMA NIC */
struct device *pcs_nic_get(void);
int pcs_nic_init(void);
void pcs_nic_exit(void);

#endif /* PCS_H */
