// SPDX-License-Identifier: GPL-2.0
/*
 * nv_p2p_sim: test stand-in for the NVIDIA P2P kernel API of nvidia.ko (CONTRACT.md section 2),
 * backed by host pages. Tests only: there is no GPU here.
 *
 * "GPU memory" is allocated through /dev/nv_p2p_sim (ALLOC ioctl, then mmap: a VM_IO|VM_PFNMAP
 * mapping that pin_user_pages cannot pin, like a cudaMalloc VA) and freed by the FREE ioctl,
 * munmap or close, which fire the free callbacks of its pins as cudaFree does. The exported
 * nvidia_p2p_* functions pin ranges of it, give out page tables and DMA mappings, and enforce
 * the rules a client must follow; breaking one is reported (pr_err, counters) rather than
 * crashing as the real driver may. Where nvidia.ko itself is unsafe whatever the client does
 * (a cudaFree during dma_map_pages of a non-persistent pin; 515-530 put_pages after the free
 * callback won) the stand-in is as unsafe, observably: see sim_dma_map() and sim_put_pages().
 *
 * Pins are scoped by process, as RM scopes them (RmP2PGetInfoWithoutToken looks the VA, and the
 * page table of a put_pages, up among the RM objects of the calling process only): get_pages*
 * find only allocations the calling thread group mapped, and a put_pages of a callback pin from
 * any other thread group finds nothing and answers 0 with nothing freed, as nv_p2p_put_pages
 * maps RM's OBJECT_NOT_FOUND for a non-persistent table; the pin and its free callback stay
 * (REVIEW-KMOD-2 T3-1). A <= 530 NULL-callback pin put from another process is refused
 * (-EINVAL, its OBJECT_NOT_FOUND). put_pages_persistent goes through the pin's own object.
 * See tests/stand-ins/include/nvpeer_sim_uapi.h for the user interface and
 * tests/scenarios/nv-p2p-sim.sh for what is proven about this module.
 *
 * Built twice from this file: nv_p2p_sim.ko (535+ API, persistent calls exported) and
 * nv_p2p_sim_530.ko (nv_p2p_sim_530.c defines NV_P2P_SIM_API_530: <= 530 API, no persistent
 * calls, exports nvidia_p2p_cap_persistent_pages instead). Only one of them can be loaded.
 *
 * Locking, outermost first:
 *   mmap_lock    held by the mm core around our mmap/open/close. We take one ourselves only in
 *                sim_zap(), holding nothing of ours, after the free callbacks ran.
 *   sim_rm_sem   the "RM API lock". A semaphore, not a mutex: RM's real lock is invisible to
 *                lockdep, and clients legitimately take their own locks in both orders around it
 *                (registration: core lock -> RM lock; revocation: RM lock -> core lock), so a
 *                deadlock shows up as a hung task, as it would in production. Held for the whole
 *                of get_pages*, put_pages*, revocation and cudaFree, free callbacks included,
 *                and for the RM part of dma_map_pages only (as nv-p2p.c: it reads the table
 *                before and links the mapping after); sim_rm_owner is its holder. Not held by
 *                dma_unmap_pages. Only holders of sim_rm_sem create or destroy pins, so a pin
 *                found under it stays live until it is released.
 *   sim_lock     mutex over the registry: sim_allocs, the pin hash, each pin's mapping list,
 *                each allocation's state, mapping and pin fields, the dma_map calls in flight
 *                and the test stall. Never held across a client callback, a user copy, a wait
 *                for sim_rm_sem, a test stall or a kref_put of an allocation.
 *   sim_fault_lock  spinlock over the pending fault injections (innermost).
 * Order: mmap_lock -> sim_lock; sim_rm_sem -> sim_lock -> sim_fault_lock.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/debugfs.h>
#include <linux/delay.h>
#include <linux/fs.h>
#include <linux/hashtable.h>
#include <linux/kref.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/mman.h>
#include <linux/module.h>
#include <linux/pid.h>
#include <linux/random.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/semaphore.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/workqueue.h>

#include <linux/pfn.h>

#include "../../../include/nv-p2p.h"
#include "../include/sim_compat.h"
#include "../include/nvpeer_sim_uapi.h"

#define SIM_PAGE_SIZE SZ_64K		/* NVIDIA_P2P_PAGE_SIZE_64KB */
#define SIM_PAGE_ORDER 4		/* order of one 64 KiB page */
#define SIM_CHUNK_ORDER 10		/* 4 MiB chunks for contiguous allocations */
#define SIM_MAP_ALIGN SZ_2M		/* cudaMalloc VAs are 2 MiB aligned */
#define SIM_MAX_SIZE SZ_4G		/* keeps entries in a u32 */
#define SIM_MMAP_SHIFT 32		/* mmap offset = id << 32 */
/* physical_address is a "BAR address", deliberately unusable as a DMA address. */
#define SIM_BAR_BIT BIT_ULL(62)
#define SIM_RESCHED_PAGES 16		/* pin_cost_ns: cond_resched() every this many pages */

#ifdef NV_P2P_SIM_API_530
#define SIM_DEFAULT_API 530
#else
#define SIM_DEFAULT_API 535
#endif

static int api = SIM_DEFAULT_API;
module_param(api, int, 0444);
MODULE_PARM_DESC(api, "Driver API generation: 535 (default: NULL free_callback is -EINVAL, persistent calls work) or 530 (NULL free_callback pins persistently; persistent calls -EOPNOTSUPP); nv_p2p_sim_530.ko accepts only 530");

static int align_check = 1;
module_param(align_check, int, 0644);
MODULE_PARM_DESC(align_check, "1 (default, 555+): get_pages* reject a VA or length not 64 KiB aligned with -EINVAL; 0: round the range out to 64 KiB");

static uint pt_version = NVIDIA_P2P_PAGE_TABLE_VERSION_V1;
module_param(pt_version, uint, 0444);
MODULE_PARM_DESC(pt_version, "Page-table version written: 0x00010002 (default, 515-575, 32-byte table) or 0x00020000 (580+, adds flags)");

static int cpu_cacheable;
module_param(cpu_cacheable, int, 0644);
MODULE_PARM_DESC(cpu_cacheable, "1: set NVIDIA_P2P_PAGE_TABLE_FLAGS_CPU_CACHEABLE in 2.x page tables");

static ulong pin_cost_ns;
module_param(pin_cost_ns, ulong, 0644);
MODULE_PARM_DESC(pin_cost_ns, "Busy-wait per 64 KiB page pinned, in ns (models RM pin cost; default 0)");

enum sim_alloc_state {
	SIM_ALLOCATED,	/* backing pages, not mapped yet */
	SIM_MAPPED,	/* mapped: get_pages* find it by mm and VA */
	SIM_FREEING,	/* cudaFree under way: invisible to lookups */
	SIM_FREED,	/* cudaFree done; the pages live on only for persistent pins */
};

struct sim_chunk {
	struct page *page;
	unsigned int order;
};

/* One "cudaMalloc" allocation. */
struct sim_alloc {
	/*
	 * One each: the allocation's own (until cudaFree completes; a queued free work runs on
	 * it), each VMA, each pin.
	 */
	struct kref ref;
	struct list_head node;		/* sim_allocs, until cudaFree completes */
	const struct file *owner;	/* the open file that allocated it; compared, never used */
	u32 id;
	u64 size;
	unsigned int gpu;		/* the GPU it is on (NV_P2P_SIM_ALLOC_GPU) */
	unsigned int npages;		/* 64 KiB pages */
	phys_addr_t *phys;		/* physical address of each 64 KiB page */
	struct sim_chunk *chunks;
	unsigned int nchunks;
	/* Under sim_lock: */
	bool pages_freed;		/* freed, or claimed for freeing by one thread */
	enum sim_alloc_state state;
	struct mm_struct *mm;		/* set (and grabbed) by mmap, then constant */
	struct pid *tgid;		/* the mapping thread group (get_pid) by mmap, then constant */
	unsigned long va;		/* set by mmap, then constant */
	unsigned int vmas;		/* VMAs mapping it: 1, 2 during a refused mremap */
	struct list_head pins;		/* struct sim_pin */
	unsigned int persistent_pins;
	u32 revoke_at;			/* enum nv_p2p_sim_revoke_point, 0: none */
	u32 stall_at;			/* enum nv_p2p_sim_stall_point, 0: none */
	struct work_struct free_work;	/* cudaFree after munmap/exit (close runs under mmap_lock) */
};

enum sim_pin_kind {
	SIM_PIN_CALLBACK,	/* get_pages with a free callback: revoked by cudaFree */
	SIM_PIN_LEGACY,		/* <= 530 get_pages with a NULL callback: persistent, put_pages */
	SIM_PIN_PERSISTENT,	/* get_pages_persistent: put_pages_persistent */
};

/* One pin: a page table given to a client. */
struct sim_pin {
	struct hlist_node hnode;	/* sim_pins, keyed by &pt */
	struct list_head alloc_node;	/* alloc->pins */
	struct list_head maps;		/* struct sim_map */
	struct sim_alloc *alloc;	/* holds a reference */
	enum sim_pin_kind kind;
	bool force_bar1;
	u64 va;				/* 64 KiB aligned start */
	struct pid *tgid;		/* the pinning thread group (get_pid): RM's scope */
	unsigned int first;		/* index of its first page in alloc->phys */
	void (*free_callback)(void *data);
	void *data;
	struct nvidia_p2p_page *page_array;
	/*
	 * Last, and for a 1.x table allocated only up to NVIDIA_P2P_PAGE_TABLE_V1_SIZE bytes: a
	 * client reading `flags` of a 1.x table reads past the object, where slub_debug red zones
	 * and KFENCE can see it. Never touch pt.flags of a 1.x table.
	 */
	struct nvidia_p2p_page_table pt;
};

struct sim_map {
	struct list_head node;		/* pin->maps */
	struct nvidia_p2p_dma_mapping map;
};

/*
 * A dma_map_pages call between its reads of a table and the link of its mapping, on
 * sim_dma_map_calls (under sim_lock): sim_pin_unlink() marks it when that table is freed, so the
 * call learns that it raced without reading the freed pin.
 */
struct sim_dma_map_call {
	struct list_head node;
	const struct nvidia_p2p_page_table *pt;
	bool table_freed;
};
struct sim_fault {
	u32 countdown;			/* 0: none pending */
	int err;
};

/* Counter names (debugfs, nvsim.py) and the API function each counts. */
static const char *const sim_fn_names[NV_P2P_SIM_FN_COUNT] = {
	[NV_P2P_SIM_FN_GET_PAGES] = "get_pages",
	[NV_P2P_SIM_FN_GET_PAGES_PERSISTENT] = "get_pages_persistent",
	[NV_P2P_SIM_FN_PUT_PAGES] = "put_pages",
	[NV_P2P_SIM_FN_PUT_PAGES_PERSISTENT] = "put_pages_persistent",
	[NV_P2P_SIM_FN_DMA_MAP] = "dma_map",
	[NV_P2P_SIM_FN_DMA_UNMAP] = "dma_unmap",
};

static const char *const sim_fn_funcs[NV_P2P_SIM_FN_COUNT] = {
	[NV_P2P_SIM_FN_GET_PAGES] = "nvidia_p2p_get_pages",
	[NV_P2P_SIM_FN_GET_PAGES_PERSISTENT] = "nvidia_p2p_get_pages_persistent",
	[NV_P2P_SIM_FN_PUT_PAGES] = "nvidia_p2p_put_pages",
	[NV_P2P_SIM_FN_PUT_PAGES_PERSISTENT] = "nvidia_p2p_put_pages_persistent",
	[NV_P2P_SIM_FN_DMA_MAP] = "nvidia_p2p_dma_map_pages",
	[NV_P2P_SIM_FN_DMA_UNMAP] = "nvidia_p2p_dma_unmap_pages",
};

static struct {
	atomic64_t calls[NV_P2P_SIM_FN_COUNT];
	atomic64_t failures[NV_P2P_SIM_FN_COUNT];
	atomic64_t free_callbacks;
	atomic64_t calls_in_callback;
	atomic64_t stale_table_uses;
	atomic64_t pins;
	atomic64_t persistent_pins;
	atomic64_t mappings;
	atomic64_t allocations;
	atomic64_t pages_pinned;
	atomic64_t put_pages_not_found;
	atomic64_t put_pages_other_process;
	atomic64_t backing_bytes;	/* debugfs only: bytes of backing pages held */
} sim_cnt;

static struct semaphore sim_rm_sem;
static struct task_struct *sim_rm_owner;

static DEFINE_MUTEX(sim_lock);
static LIST_HEAD(sim_allocs);
static DEFINE_HASHTABLE(sim_pins, 10);
static LIST_HEAD(sim_dma_map_calls);	/* struct sim_dma_map_call */
static u32 sim_next_id;

static DEFINE_SPINLOCK(sim_fault_lock);
static struct sim_fault sim_faults[NV_P2P_SIM_FN_COUNT];

static DEFINE_MUTEX(sim_rsync_lock);
static nvidia_p2p_rsync_driver_t *sim_rsync_driver;

static struct workqueue_struct *sim_wq;
static struct dentry *sim_debugfs;
/* One UUID per simulated GPU (NV_P2P_SIM_ALLOC_GPU): the first random, the others its neighbours. */
static u8 sim_uuid[NV_P2P_SIM_GPUS][NVIDIA_P2P_GPU_UUID_LEN];

/* ---------------------------------------------------------------- the RM API lock */

static void sim_rm_lock(void)
{
	down(&sim_rm_sem);
	WRITE_ONCE(sim_rm_owner, current);
}

static void sim_rm_unlock(void)
{
	WRITE_ONCE(sim_rm_owner, NULL);
	up(&sim_rm_sem);
}

/*
 * RM refuses a call from the thread that already holds its API lock (a free callback runs with
 * it held) instead of deadlocking: -EIO, as NV_ERR_INVALID_LOCK_STATE maps to.
 */
static int sim_check_not_in_callback(const char *fn)
{
	if (READ_ONCE(sim_rm_owner) != current)
		return 0;
	atomic64_inc(&sim_cnt.calls_in_callback);
	pr_err_ratelimited("%s called with the RM API lock held by this thread (from a free callback): -EIO\n",
			   fn);
	return -EIO;
}

/* ---------------------------------------------------------------- accounting and faults */

/* Counts a call of fn and fires a pending injected fault. */
static int sim_enter(enum nv_p2p_sim_fn fn)
{
	struct sim_fault *f = &sim_faults[fn];
	int err = 0;

	atomic64_inc(&sim_cnt.calls[fn]);
	spin_lock(&sim_fault_lock);
	if (f->countdown && --f->countdown == 0)
		err = -f->err;
	spin_unlock(&sim_fault_lock);
	if (err)
		pr_err_ratelimited("%s: injected fault %d\n", sim_fn_funcs[fn], err);
	return err;
}

static int sim_leave(enum nv_p2p_sim_fn fn, int ret)
{
	if (ret)
		atomic64_inc(&sim_cnt.failures[fn]);
	return ret;
}

/* ---------------------------------------------------------------- backing pages */

static void sim_free_backing(struct sim_alloc *a)
{
	unsigned int i;

	for (i = 0; i < a->nchunks; i++)
		__free_pages(a->chunks[i].page, a->chunks[i].order);
	if (a->nchunks)
		atomic64_sub(a->size, &sim_cnt.backing_bytes);
	a->nchunks = 0;
}

/* The largest block up to 4 MiB (and no larger than what is left) that the allocator gives. */
static struct page *sim_alloc_chunk(unsigned int left, unsigned int *order)
{
	unsigned int o = min_t(unsigned int, SIM_CHUNK_ORDER,
			       SIM_PAGE_ORDER + ilog2(left));
	struct page *page;

	for (;; o--) {
		gfp_t gfp = GFP_KERNEL | __GFP_ZERO | __GFP_NOWARN;

		if (o > SIM_PAGE_ORDER)
			gfp |= __GFP_NORETRY;
		page = alloc_pages(gfp, o);
		if (page || o == SIM_PAGE_ORDER)
			break;
	}
	*order = o;
	return page;
}

/*
 * A 64 KiB page not physically adjacent to prev (0: none). Rejected blocks go to spacers, to be
 * freed once the allocation is complete, so that the allocator cannot hand them out again.
 */
static struct page *sim_alloc_apart(phys_addr_t prev, struct list_head *spacers)
{
	struct page *page;
	phys_addr_t phys;
	int tries;

	for (tries = 0; tries < 64; tries++) {
		page = alloc_pages(GFP_KERNEL | __GFP_ZERO | __GFP_NOWARN, SIM_PAGE_ORDER);
		if (!page)
			return NULL;
		phys = PFN_PHYS(page_to_pfn(page));
		if (!prev || (phys != prev + SIM_PAGE_SIZE && phys + SIM_PAGE_SIZE != prev))
			return page;
		list_add(&page->lru, spacers);
	}
	return NULL;
}

static int sim_alloc_backing(struct sim_alloc *a, bool fragmented)
{
	unsigned int done = 0, order, i;
	struct page *page, *tmp;
	LIST_HEAD(spacers);
	int ret = 0;

	a->phys = kvcalloc(a->npages, sizeof(*a->phys), GFP_KERNEL);
	a->chunks = kvcalloc(a->npages, sizeof(*a->chunks), GFP_KERNEL);
	if (!a->phys || !a->chunks)
		return -ENOMEM;

	while (done < a->npages) {
		if (fragmented) {
			order = SIM_PAGE_ORDER;
			page = sim_alloc_apart(done ? a->phys[done - 1] : 0, &spacers);
		} else {
			page = sim_alloc_chunk(a->npages - done, &order);
		}
		if (!page) {
			ret = -ENOMEM;
			break;
		}
		a->chunks[a->nchunks].page = page;
		a->chunks[a->nchunks++].order = order;
		for (i = 0; i < 1U << (order - SIM_PAGE_ORDER); i++)
			a->phys[done++] = PFN_PHYS(page_to_pfn(page)) + (phys_addr_t)i * SIM_PAGE_SIZE;
	}
	list_for_each_entry_safe(page, tmp, &spacers, lru) {
		list_del(&page->lru);
		__free_pages(page, SIM_PAGE_ORDER);
	}
	if (ret) {
		for (i = 0; i < a->nchunks; i++)
			__free_pages(a->chunks[i].page, a->chunks[i].order);
		a->nchunks = 0;
		return ret;
	}
	atomic64_add(a->size, &sim_cnt.backing_bytes);
	return 0;
}

/* ---------------------------------------------------------------- allocations */

static void sim_alloc_release(struct kref *ref)
{
	struct sim_alloc *a = container_of(ref, struct sim_alloc, ref);

	sim_free_backing(a);
	if (a->mm)
		mmdrop(a->mm);
	put_pid(a->tgid);
	kvfree(a->chunks);
	kvfree(a->phys);
	kfree(a);
}

static void sim_alloc_put(struct sim_alloc *a)
{
	kref_put(&a->ref, sim_alloc_release);
}

/* The mapped allocation of mm holding all of [va, va + len), or NULL. Under sim_lock. */
static struct sim_alloc *sim_find_mapped(struct mm_struct *mm, u64 va, u64 len)
{
	struct sim_alloc *a;

	lockdep_assert_held(&sim_lock);
	if (!mm)
		return NULL;
	list_for_each_entry(a, &sim_allocs, node) {
		if (a->state != SIM_MAPPED || a->mm != mm)
			continue;
		if (va >= a->va && va - a->va < a->size && len <= a->size - (va - a->va))
			return a;
	}
	return NULL;
}

/* ---------------------------------------------------------------- pins */

/*
 * Tables that a revocation freed after their free callback, most recent last. RM finds a
 * non-persistent pin by its address and table, so a put_pages that lost the race to the
 * callback gets OBJECT_NOT_FOUND (0) even when the table's memory already holds a new pin of
 * another address (kmalloc reuses it at once). Here tables are found by pointer: these records
 * tell that lost race from a client passing the wrong address for a live table. Under sim_lock.
 * A table's address is kept inverted: kmemleak would take a plain copy for a reference to
 * whatever object is allocated there next, and miss its leak.
 */
#define SIM_REVOKED_RECORDS 256
static struct {
	unsigned long pt_inverted;
	u64 va;
} sim_revoked[SIM_REVOKED_RECORDS];
static unsigned int sim_revoked_next;

static void sim_remember_revoked(const struct sim_pin *pin)
{
	lockdep_assert_held(&sim_lock);
	sim_revoked[sim_revoked_next].pt_inverted = ~(unsigned long)&pin->pt;
	sim_revoked[sim_revoked_next].va = pin->va;
	sim_revoked_next = (sim_revoked_next + 1) % SIM_REVOKED_RECORDS;
}

/* Whether (pt, va) is a table a revocation freed; forgets the record. */
static bool sim_forget_revoked(const struct nvidia_p2p_page_table *pt, u64 va)
{
	unsigned int i;

	lockdep_assert_held(&sim_lock);
	for (i = 0; i < SIM_REVOKED_RECORDS; i++) {
		if (sim_revoked[i].pt_inverted == ~(unsigned long)pt && sim_revoked[i].va == va) {
			sim_revoked[i].pt_inverted = 0;
			return true;
		}
	}
	return false;
}

/* The live pin whose page table is pt, or NULL. Never dereferences pt. Under sim_lock. */
static struct sim_pin *sim_find_pin(const struct nvidia_p2p_page_table *pt)
{
	struct sim_pin *pin;

	lockdep_assert_held(&sim_lock);
	hash_for_each_possible(sim_pins, pin, hnode, (unsigned long)pt)
		if (&pin->pt == pt)
			return pin;
	return NULL;
}

/* A new pin of [va, va + len) of alloc, not yet registered; takes an allocation reference. */
static struct sim_pin *sim_pin_create(struct sim_alloc *a, u64 va, u64 len,
				      enum sim_pin_kind kind, bool force_bar1,
				      void (*free_callback)(void *data), void *data)
{
	u32 version = pt_version, entries = len / SIM_PAGE_SIZE, i;
	bool v2 = NVIDIA_P2P_MAJOR_VERSION(version) >= 2;
	size_t size = offsetof(struct sim_pin, pt) +
		      (v2 ? sizeof(struct nvidia_p2p_page_table) : NVIDIA_P2P_PAGE_TABLE_V1_SIZE);
	struct sim_pin *pin;

	pin = kzalloc(size, GFP_KERNEL);
	if (!pin)
		return NULL;
	pin->page_array = kvcalloc(entries, sizeof(*pin->page_array), GFP_KERNEL);
	pin->pt.pages = kvmalloc_array(entries, sizeof(*pin->pt.pages), GFP_KERNEL);
	if (!pin->page_array || !pin->pt.pages) {
		kvfree(pin->pt.pages);
		kvfree(pin->page_array);
		kfree(pin);
		return NULL;
	}
	INIT_LIST_HEAD(&pin->maps);
	INIT_LIST_HEAD(&pin->alloc_node);
	pin->alloc = a;
	kref_get(&a->ref);
	pin->kind = kind;
	pin->force_bar1 = force_bar1;
	pin->va = va;
	pin->tgid = get_pid(task_tgid(current));
	pin->first = (va - a->va) / SIM_PAGE_SIZE;
	pin->free_callback = free_callback;
	pin->data = data;

	pin->pt.version = version;
	pin->pt.page_size = NVIDIA_P2P_PAGE_SIZE_64KB;
	pin->pt.entries = entries;
	pin->pt.gpu_uuid = sim_uuid[a->gpu];
	if (v2)
		pin->pt.flags = cpu_cacheable ? NVIDIA_P2P_PAGE_TABLE_FLAGS_CPU_CACHEABLE : 0;
	for (i = 0; i < entries; i++) {
		pin->page_array[i].physical_address = a->phys[pin->first + i] | SIM_BAR_BIT;
		pin->pt.pages[i] = &pin->page_array[i];
	}
	return pin;
}

/* Models the time RM takes to pin: pin_cost_ns per 64 KiB page. */
static void sim_pin_cost(u32 entries)
{
	ulong cost = READ_ONCE(pin_cost_ns);
	u32 i;

	if (!cost)
		return;
	for (i = 0; i < entries; i++) {
		ulong left = cost;

		while (left) {
			ulong d = min_t(ulong, left, 10000);

			ndelay(d);
			left -= d;
		}
		if (i % SIM_RESCHED_PAGES == SIM_RESCHED_PAGES - 1)
			cond_resched();
	}
}

/* Makes pin live (findable, revocable). Under sim_lock. */
static void sim_pin_link(struct sim_pin *pin)
{
	lockdep_assert_held(&sim_lock);
	hash_add(sim_pins, &pin->hnode, (unsigned long)&pin->pt);
	list_add_tail(&pin->alloc_node, &pin->alloc->pins);
	if (pin->kind == SIM_PIN_CALLBACK) {
		atomic64_inc(&sim_cnt.pins);
	} else {
		pin->alloc->persistent_pins++;
		atomic64_inc(&sim_cnt.persistent_pins);
	}
	atomic64_add(pin->pt.entries, &sim_cnt.pages_pinned);
}

/*
 * Makes pin dead: from now on its table pointer is stale. Moves its mappings to maps for
 * sim_pin_free(). Returns true when the allocation's pages are to be freed now (the last
 * persistent pin of a freed allocation). Under sim_lock.
 */
static bool sim_pin_unlink(struct sim_pin *pin, struct list_head *maps)
{
	struct sim_alloc *a = pin->alloc;
	struct sim_dma_map_call *call;
	struct sim_map *m;

	lockdep_assert_held(&sim_lock);
	list_for_each_entry(call, &sim_dma_map_calls, node)
		if (call->pt == &pin->pt)
			call->table_freed = true;
	hash_del(&pin->hnode);
	list_del_init(&pin->alloc_node);
	list_for_each_entry(m, &pin->maps, node)
		atomic64_dec(&sim_cnt.mappings);
	list_splice_init(&pin->maps, maps);
	atomic64_sub(pin->pt.entries, &sim_cnt.pages_pinned);
	if (pin->kind == SIM_PIN_CALLBACK) {
		atomic64_dec(&sim_cnt.pins);
		return false;
	}
	atomic64_dec(&sim_cnt.persistent_pins);
	if (--a->persistent_pins || a->state != SIM_FREED || a->pages_freed)
		return false;
	a->pages_freed = true;
	return true;
}

static void sim_map_free(struct sim_map *m)
{
	kvfree(m->map.dma_addresses);
	kfree(m);
}

/* Frees an unlinked pin: its mappings, its table and, if told, its allocation's pages. */
static void sim_pin_free(struct sim_pin *pin, struct list_head *maps, bool free_pages)
{
	struct sim_alloc *a = pin->alloc;
	struct sim_map *m, *tmp;

	list_for_each_entry_safe(m, tmp, maps, node) {
		list_del(&m->node);
		sim_map_free(m);
	}
	kvfree(pin->pt.pages);
	kvfree(pin->page_array);
	put_pid(pin->tgid);
	kfree(pin);
	if (free_pages)
		sim_free_backing(a);
	sim_alloc_put(a);
}

static void sim_pin_destroy(struct sim_pin *pin)
{
	LIST_HEAD(maps);
	bool free_pages;

	mutex_lock(&sim_lock);
	free_pages = sim_pin_unlink(pin, &maps);
	mutex_unlock(&sim_lock);
	sim_pin_free(pin, &maps, free_pages);
}

/*
 * Revocation, as RM does it when the memory is freed: each non-persistent pin's free callback,
 * then NVIDIA frees that pin's table and DMA mappings. The caller holds sim_rm_sem, so no pin
 * is created or destroyed meanwhile except by this loop; a callback may dma_unmap.
 */
static void sim_revoke_pins(struct sim_alloc *a)
{
	struct sim_pin *pin, *found;

	for (;;) {
		found = NULL;
		mutex_lock(&sim_lock);
		list_for_each_entry(pin, &a->pins, alloc_node) {
			if (pin->kind == SIM_PIN_CALLBACK) {
				found = pin;
				break;
			}
		}
		mutex_unlock(&sim_lock);
		if (!found)
			return;
		atomic64_inc(&sim_cnt.free_callbacks);
		found->free_callback(found->data);
		mutex_lock(&sim_lock);
		sim_remember_revoked(found);
		mutex_unlock(&sim_lock);
		sim_pin_destroy(found);
	}
}

/*
 * Consumes a REVOKE_AT point set on a; under sim_lock. Logged, so that a test can tell that the
 * point fired even where it revokes nothing (an allocation with persistent pins only).
 */
static bool sim_take_revoke(struct sim_alloc *a, u32 point)
{
	static const char *const names[] = {
		[NV_P2P_SIM_REVOKE_IN_GET_PAGES] = "in_get_pages",
		[NV_P2P_SIM_REVOKE_IN_DMA_MAP] = "in_dma_map",
		[NV_P2P_SIM_REVOKE_IN_PUT_PAGES] = "in_put_pages",
	};

	lockdep_assert_held(&sim_lock);
	if (a->revoke_at != point)
		return false;
	a->revoke_at = 0;
	pr_info("REVOKE_AT %s fired on allocation %u\n", names[point], a->id);
	return true;
}

/*
 * Test stall (NV_P2P_SIM_IOC_STALL_*): one armed or stalled call at a time. sim_stall_armed is
 * under sim_lock. sim_stalled goes SIM_STALL_TAKEN under sim_lock when a call takes the armed
 * point (STALL_AT stays busy until that call went on), SIM_STALL_WAITING once the call holds
 * nothing and waits (what STALL_WAIT waits for), and back to SIM_STALL_NONE when it goes on.
 * The stalled thread waits interruptibly, with a bound, so a test that never resumes it cannot
 * hang the VM.
 */
enum { SIM_STALL_NONE, SIM_STALL_TAKEN, SIM_STALL_WAITING };
static bool sim_stall_armed;
static atomic_t sim_stalled = ATOMIC_INIT(SIM_STALL_NONE);
static atomic_t sim_stall_resume = ATOMIC_INIT(0);
static DECLARE_WAIT_QUEUE_HEAD(sim_stall_wq);

/* Consumes a STALL_AT point set on a; the caller then calls sim_stall(). Under sim_lock. */
static bool sim_take_stall(struct sim_alloc *a, u32 point)
{
	lockdep_assert_held(&sim_lock);
	if (a->stall_at != point)
		return false;
	a->stall_at = 0;
	sim_stall_armed = false;
	atomic_set(&sim_stall_resume, 0);
	atomic_set(&sim_stalled, SIM_STALL_TAKEN);
	return true;
}

/* Disarms a STALL_AT point set on a (it is being freed or reset). Under sim_lock. */
static void sim_disarm_stall(struct sim_alloc *a)
{
	lockdep_assert_held(&sim_lock);
	if (!a->stall_at)
		return;
	a->stall_at = 0;
	sim_stall_armed = false;
}

/* Waits for STALL_RESUME, holding nothing. */
static void sim_stall(const char *fn)
{
	atomic_set(&sim_stalled, SIM_STALL_WAITING);
	wake_up_all(&sim_stall_wq);
	if (wait_event_interruptible_timeout(sim_stall_wq, atomic_read(&sim_stall_resume),
					     60 * HZ) <= 0)
		pr_warn("%s: stalled call not resumed within 60 s (or signalled), going on\n", fn);
	atomic_set(&sim_stalled, SIM_STALL_NONE);
}

/* ---------------------------------------------------------------- cudaFree */

/* Removes the user's PTEs of a (the VMA stays; touching it now faults). */
static void sim_zap(struct sim_alloc *a)
{
	struct mm_struct *mm = a->mm;
	struct vm_area_struct *vma;

	if (!mm || !mmget_not_zero(mm))
		return;
	mmap_read_lock(mm);
	vma = vma_lookup(mm, a->va);
	if (vma && vma->vm_private_data == a)
		SIM_ZAP_VMA(vma, vma->vm_start, vma->vm_end - vma->vm_start);
	mmap_read_unlock(mm);
	mmput(mm);
}

/*
 * cudaFree of a, which the caller moved to SIM_FREEING: revoke its pins (RM lock held, in the
 * caller's context), unmap it from the user (mmap_lock only after the callbacks), unregister it
 * and free its pages unless persistent pins keep them. Drops the allocation's own reference.
 */
static void sim_cuda_free(struct sim_alloc *a, bool zap)
{
	bool free_pages;

	sim_rm_lock();
	sim_revoke_pins(a);
	sim_rm_unlock();
	if (zap)
		sim_zap(a);

	mutex_lock(&sim_lock);
	a->state = SIM_FREED;
	sim_disarm_stall(a);
	list_del_init(&a->node);
	atomic64_dec(&sim_cnt.allocations);
	free_pages = !a->persistent_pins && !a->pages_freed;
	if (free_pages)
		a->pages_freed = true;
	mutex_unlock(&sim_lock);
	if (free_pages)
		sim_free_backing(a);
	sim_alloc_put(a);
}

static void sim_free_work(struct work_struct *work)
{
	struct sim_alloc *a = container_of(work, struct sim_alloc, free_work);

	sim_cuda_free(a, false);
}

/* ---------------------------------------------------------------- exported API: pinning */

/* get_pages, get_pages_persistent: checks, lookup, table, registration, all under the RM lock. */
static int sim_get_pages(const char *fn, u64 va, u64 len,
			 struct nvidia_p2p_page_table **page_table, enum sim_pin_kind kind,
			 bool force_bar1, void (*free_callback)(void *data), void *data)
{
	struct sim_alloc *a;
	struct sim_pin *pin;
	u64 start, end;
	bool revoke, stall;

	if (!page_table || !len || len > SIM_MAX_SIZE || va > TASK_SIZE - len) {
		pr_err_ratelimited("%s: invalid argument (va 0x%llx len 0x%llx table %p)\n",
				   fn, va, len, page_table);
		return -EINVAL;
	}
	if (READ_ONCE(align_check) && !IS_ALIGNED(va | len, SIM_PAGE_SIZE)) {
		pr_err_ratelimited("NVRM: Invalid argument in nv_p2p_get_pages, address or length are not aligned address=0x%llx, length=0x%llx\n",
				   va, len);
		return -EINVAL;
	}
	start = ALIGN_DOWN(va, SIM_PAGE_SIZE);
	end = ALIGN(va + len, SIM_PAGE_SIZE);

	sim_rm_lock();
	mutex_lock(&sim_lock);
	a = sim_find_mapped(current->mm, start, end - start);
	/* RM looks the VA up in the calling process's objects: another thread group sharing the
	 * mm (CLONE_VM without CLONE_THREAD) finds nothing. */
	if (a && a->tgid != task_tgid(current))
		a = NULL;
	if (a)
		kref_get(&a->ref);
	mutex_unlock(&sim_lock);
	if (!a) {
		sim_rm_unlock();
		pr_err_ratelimited("%s: [0x%llx, 0x%llx) is not inside one allocation of this process: -EINVAL\n",
				   fn, start, end);
		return -EINVAL;
	}
	pin = sim_pin_create(a, start, end - start, kind, force_bar1, free_callback, data);
	if (!pin) {
		sim_rm_unlock();
		sim_alloc_put(a);
		pr_err_ratelimited("%s: out of memory\n", fn);
		return -ENOMEM;
	}
	sim_pin_cost(pin->pt.entries);
	*page_table = &pin->pt;

	/* Registration with RM comes last: from here on a cudaFree revokes the pin. */
	mutex_lock(&sim_lock);
	sim_pin_link(pin);
	revoke = kind != SIM_PIN_PERSISTENT && sim_take_revoke(a, NV_P2P_SIM_REVOKE_IN_GET_PAGES);
	stall = sim_take_stall(a, NV_P2P_SIM_STALL_IN_GET_PAGES);
	mutex_unlock(&sim_lock);
	if (revoke)
		sim_revoke_pins(a);	/* the race window: the table is freed before we return */
	sim_rm_unlock();
	if (stall)
		sim_stall(fn);		/* registered, nothing held: a cudaFree may revoke it now */
	sim_alloc_put(a);
	return 0;
}

int nvidia_p2p_get_pages(uint64_t p2p_token, uint32_t va_space, uint64_t virtual_address,
			 uint64_t length, struct nvidia_p2p_page_table **page_table,
			 void (*free_callback)(void *data), void *data)
{
	const enum nv_p2p_sim_fn fn = NV_P2P_SIM_FN_GET_PAGES;
	enum sim_pin_kind kind = SIM_PIN_CALLBACK;
	int ret;

	ret = sim_enter(fn);
	if (!ret)
		ret = sim_check_not_in_callback(sim_fn_funcs[fn]);
	if (!ret && !free_callback) {
		if (api == 530) {
			kind = SIM_PIN_LEGACY;
		} else {
			pr_err_ratelimited("%s: NULL free_callback: -EINVAL (use nvidia_p2p_get_pages_persistent)\n",
					   __func__);
			ret = -EINVAL;
		}
	}
	if (!ret)
		ret = sim_get_pages(sim_fn_funcs[fn], virtual_address, length, page_table, kind,
				    false, free_callback, data);
	return sim_leave(fn, ret);
}
EXPORT_SYMBOL_GPL(nvidia_p2p_get_pages);

#ifdef NV_P2P_SIM_API_530
/*
 * 515-530's nvidia_p2p_put_pages reads the table itself: it copies 16 bytes from
 * page_table->gpu_uuid before the RM lookup and reads mem_info->bPersistent (here the pin's
 * kind) after it, so a put_pages that lost the race to the free callback reads freed memory
 * (535+ hands only the VA and the pointer to RM). The same reads are made here, through the
 * caller's pointer, but as nofault copies: NVIDIA's plain loads would oops on SLUB's poisoned
 * gpu_uuid pointer, and KFENCE would see them only when it sampled that pin. The suites get a
 * stale table use instead, every time.
 */
static bool sim_530_read_uuid(const struct nvidia_p2p_page_table *pt,
			      u8 uuid[NVIDIA_P2P_GPU_UUID_LEN])
{
	const u8 *p;

	return !copy_from_kernel_nofault(&p, &pt->gpu_uuid, sizeof(p)) &&
	       !copy_from_kernel_nofault(uuid, p, NVIDIA_P2P_GPU_UUID_LEN);
}

/* mem_info->bPersistent: 1 for a NULL-callback pin, -1 when unreadable. */
static int sim_530_read_persistent(const struct nvidia_p2p_page_table *pt)
{
	const struct sim_pin *pin = container_of(pt, struct sim_pin, pt);
	enum sim_pin_kind kind;

	if (copy_from_kernel_nofault(&kind, &pin->kind, sizeof(kind)))
		return -1;
	return kind == SIM_PIN_LEGACY;
}
#endif

/* put_pages, put_pages_persistent once the arguments are checked. */
static int sim_put_pages(const char *fn, u64 va, struct nvidia_p2p_page_table *pt,
			 bool persistent)
{
	struct sim_alloc *revoke = NULL;
	struct sim_pin *pin;
	bool free_pages = false, gone = false;
	LIST_HEAD(maps);
	int ret = 0;
#ifdef NV_P2P_SIM_API_530
	u8 uuid[NVIDIA_P2P_GPU_UUID_LEN];
	bool uuid_read;
	int bpersistent;
#endif

	/* REVOKE_IN_PUT_PAGES: the callbacks win the race for the RM lock. */
	if (!persistent) {
		mutex_lock(&sim_lock);
		pin = sim_find_pin(pt);
		if (pin && sim_take_revoke(pin->alloc, NV_P2P_SIM_REVOKE_IN_PUT_PAGES)) {
			revoke = pin->alloc;
			kref_get(&revoke->ref);
		}
		mutex_unlock(&sim_lock);
		if (revoke) {
			sim_rm_lock();
			sim_revoke_pins(revoke);
			sim_rm_unlock();
			sim_alloc_put(revoke);
		}
	}

#ifdef NV_P2P_SIM_API_530
	uuid_read = sim_530_read_uuid(pt, uuid);
#endif
	sim_rm_lock();
	mutex_lock(&sim_lock);
	pin = sim_find_pin(pt);
	if (!pin) {
		if (persistent) {
			atomic64_inc(&sim_cnt.stale_table_uses);
			pr_err_ratelimited("%s: page table %p is not live (already put?): -EINVAL\n",
					   fn, pt);
			ret = -EINVAL;
		} else {
			/* The free callback won: NVIDIA already freed it. */
			sim_forget_revoked(pt, ALIGN_DOWN(va, SIM_PAGE_SIZE));
			atomic64_inc(&sim_cnt.put_pages_not_found);
			gone = true;
			pr_debug("%s: page table %p already freed by the free callback\n",
				 fn, pt);
		}
	} else if (!persistent && pin->tgid != task_tgid(current)) {
		/* RM finds no pin of the calling process: OBJECT_NOT_FOUND. */
		if (pin->kind == SIM_PIN_CALLBACK) {
			/* nv_p2p_put_pages: 0 for a non-persistent table; nothing is freed. */
			atomic64_inc(&sim_cnt.put_pages_other_process);
			pr_debug("%s: page table %p belongs to another process: 0, nothing freed\n",
				 fn, pt);
		} else {
			pr_err_ratelimited("%s: page table %p was pinned by another process: -EINVAL\n",
					   fn, pt);
			ret = -EINVAL;
		}
	} else if ((pin->kind == SIM_PIN_PERSISTENT) != persistent) {
		pr_err_ratelimited("%s: page table %p was pinned by %s: -EINVAL\n", fn,
				   pt, persistent ? "get_pages" : "get_pages_persistent");
		ret = -EINVAL;
	} else if (pin->va != ALIGN_DOWN(va, SIM_PAGE_SIZE) && !persistent &&
		   sim_forget_revoked(pt, ALIGN_DOWN(va, SIM_PAGE_SIZE))) {
		/* The callback won and the table's memory is another pin's now: not found, as RM. */
		atomic64_inc(&sim_cnt.put_pages_not_found);
		gone = true;
		pr_debug("%s: page table %p of va 0x%llx was freed by the free callback\n",
			 fn, pt, va);
	} else if (pin->va != ALIGN_DOWN(va, SIM_PAGE_SIZE)) {
		pr_err_ratelimited("%s: va 0x%llx is not the va 0x%llx of page table %p: -EINVAL\n",
				   fn, va, pin->va, pt);
		ret = -EINVAL;
	} else {
		free_pages = sim_pin_unlink(pin, &maps);
		ret = 1;
	}
	mutex_unlock(&sim_lock);
	sim_rm_unlock();
#ifdef NV_P2P_SIM_API_530
	/* After the lookup, before the table is freed (nv_p2p_free_page_table comes last). */
	bpersistent = sim_530_read_persistent(pt);
	if (gone) {
		atomic64_inc(&sim_cnt.stale_table_uses);
		pr_err_ratelimited("%s: page table %p was freed by its free callback: read gpu_uuid (%s) and bPersistent (%d) from freed memory, as 515-530 do\n",
				   fn, pt, uuid_read ? "readable" : "unreadable", bpersistent);
	}
#endif
	if (ret == 1) {
		sim_pin_free(pin, &maps, free_pages);
		ret = 0;
	}
	return ret;
}

int nvidia_p2p_put_pages(uint64_t p2p_token, uint32_t va_space, uint64_t virtual_address,
			 struct nvidia_p2p_page_table *page_table)
{
	const enum nv_p2p_sim_fn fn = NV_P2P_SIM_FN_PUT_PAGES;
	int ret;

	ret = sim_enter(fn);
	if (!ret)
		ret = sim_check_not_in_callback(sim_fn_funcs[fn]);
	if (!ret && page_table)
		ret = sim_put_pages(sim_fn_funcs[fn], virtual_address, page_table, false);
	return sim_leave(fn, ret);
}
EXPORT_SYMBOL_GPL(nvidia_p2p_put_pages);

#ifndef NV_P2P_SIM_API_530
int nvidia_p2p_get_pages_persistent(uint64_t virtual_address, uint64_t length,
				    struct nvidia_p2p_page_table **page_table, uint32_t flags)
{
	const enum nv_p2p_sim_fn fn = NV_P2P_SIM_FN_GET_PAGES_PERSISTENT;
	int ret;

	ret = sim_enter(fn);
	if (!ret)
		ret = sim_check_not_in_callback(sim_fn_funcs[fn]);
	if (!ret && api == 530) {
		pr_err_ratelimited("%s: not in the 530 API: -EOPNOTSUPP\n", __func__);
		ret = -EOPNOTSUPP;
	}
	if (!ret && (flags & ~NVIDIA_P2P_FLAGS_FORCE_BAR1_MAPPING)) {
		pr_err_ratelimited("%s: invalid flags 0x%x: -EINVAL\n",
				   __func__, flags);
		ret = -EINVAL;
	}
	if (!ret)
		ret = sim_get_pages(sim_fn_funcs[fn], virtual_address, length, page_table,
				    SIM_PIN_PERSISTENT,
				    flags & NVIDIA_P2P_FLAGS_FORCE_BAR1_MAPPING, NULL, NULL);
	return sim_leave(fn, ret);
}
EXPORT_SYMBOL_GPL(nvidia_p2p_get_pages_persistent);

int nvidia_p2p_put_pages_persistent(uint64_t virtual_address,
				    struct nvidia_p2p_page_table *page_table, uint32_t flags)
{
	const enum nv_p2p_sim_fn fn = NV_P2P_SIM_FN_PUT_PAGES_PERSISTENT;
	int ret;

	ret = sim_enter(fn);
	if (!ret)
		ret = sim_check_not_in_callback(sim_fn_funcs[fn]);
	if (!ret && api == 530) {
		pr_err_ratelimited("%s: not in the 530 API: -EOPNOTSUPP\n", __func__);
		ret = -EOPNOTSUPP;
	}
	if (!ret && (flags || !page_table)) {
		pr_err_ratelimited("%s: invalid argument (flags 0x%x table %p): -EINVAL\n",
				   __func__, flags, page_table);
		ret = -EINVAL;
	}
	if (!ret)
		ret = sim_put_pages(sim_fn_funcs[fn], virtual_address, page_table, true);
	return sim_leave(fn, ret);
}
EXPORT_SYMBOL_GPL(nvidia_p2p_put_pages_persistent);
#else
/* <= 530: the capability variable instead of the persistent calls. */
extern int nvidia_p2p_cap_persistent_pages;
int nvidia_p2p_cap_persistent_pages = 1;
EXPORT_SYMBOL_GPL(nvidia_p2p_cap_persistent_pages);
#endif

/* NVIDIA frees tables itself (put_pages or after the free callback): both are no-ops. */
int nvidia_p2p_free_page_table(struct nvidia_p2p_page_table *page_table)
{
	return 0;
}
EXPORT_SYMBOL_GPL(nvidia_p2p_free_page_table);

int nvidia_p2p_free_dma_mapping(struct nvidia_p2p_dma_mapping *dma_mapping)
{
	return 0;
}
EXPORT_SYMBOL_GPL(nvidia_p2p_free_dma_mapping);

/* ---------------------------------------------------------------- exported API: DMA mapping */

/* An unlinked mapping for peer of entries pages; dma_addresses left to the caller. */
static struct sim_map *sim_map_alloc(struct pci_dev *peer, u32 entries)
{
	struct sim_map *m;

	m = kzalloc_obj(*m);
	if (!m)
		return NULL;
	m->map.dma_addresses = kvmalloc_array(entries, sizeof(u64), GFP_KERNEL);
	if (!m->map.dma_addresses) {
		kfree(m);
		return NULL;
	}
	INIT_LIST_HEAD(&m->node);
	m->map.version = NVIDIA_P2P_DMA_MAPPING_VERSION;
	m->map.page_size_type = NVIDIA_P2P_PAGE_SIZE_64KB;
	m->map.entries = entries;
	m->map.pci_dev = peer;
	return m;
}

/*
 * As nv-p2p.c (515 and 570+ alike): the table is read through the caller's pointer without the
 * RM lock (gpu_uuid, container_of to the pin, force_bar1, entries, page_size, every
 * physical_address), only the RM part runs under it, and the mapping is linked into the pin
 * after it is dropped; there is no lookup of the table. A cudaFree in that window frees the pin
 * under the call (REVOKE_IN_DMA_MAP puts it between the RM part and the link): the call then
 * writes into the freed pin and returns 0 with a mapping that nobody frees, the use-after-free
 * that nvidia.ko has for every client of a non-persistent pin (CONTRACT 2.4).
 */
static int sim_dma_map(struct pci_dev *peer, struct nvidia_p2p_page_table *pt,
		       struct nvidia_p2p_dma_mapping **dma_mapping)
{
	struct sim_dma_map_call call = { .pt = pt };
	struct sim_alloc *revoke = NULL;
	struct sim_map *m = NULL;
	struct sim_pin *pin;
	u32 entries, i;
	int ret = 0;

	/*
	 * Not NVIDIA's: a table already freed when the call starts (put, or freed after its free
	 * callback) is a client bug that nvidia.ko answers with reads of freed memory (and, for a
	 * poisoned or reused pin, an oops or a mapping of whatever lies there). It is refused here
	 * and counted, so that a suite can attribute it and go on; the live check touches no table
	 * memory, and a live table then takes NVIDIA's path unchanged.
	 */
	mutex_lock(&sim_lock);
	pin = sim_find_pin(pt);
	if (pin) {
		list_add(&call.node, &sim_dma_map_calls);
		if (sim_take_revoke(pin->alloc, NV_P2P_SIM_REVOKE_IN_DMA_MAP)) {
			revoke = pin->alloc;
			kref_get(&revoke->ref);
		}
	}
	mutex_unlock(&sim_lock);
	if (!pin) {
		atomic64_inc(&sim_cnt.stale_table_uses);
		pr_err_ratelimited("nvidia_p2p_dma_map_pages: page table %p is not live (freed by put_pages or after its free callback): -EINVAL\n",
				   pt);
		return -EINVAL;
	}

	/* From here on only through the table pointer, as nvidia.ko. */
	if (!pt->gpu_uuid) {
		pr_err_ratelimited("nvidia_p2p_dma_map_pages: page table without gpu_uuid: -EINVAL\n");
		ret = -EINVAL;
		goto race;
	}
	pin = container_of(pt, struct sim_pin, pt);	/* NVIDIA: the table's mem_info */
	if (READ_ONCE(pin->force_bar1)) {
		pr_err_ratelimited("nvidia_p2p_dma_map_pages: page table pinned with NVIDIA_P2P_FLAGS_FORCE_BAR1_MAPPING: -ENOTSUPP\n");
		ret = -ENOTSUPP;	/* NVIDIA's value (524), not -EOPNOTSUPP */
		goto race;
	}
	entries = READ_ONCE(pt->entries);
	if (READ_ONCE(pt->page_size) != NVIDIA_P2P_PAGE_SIZE_64KB) {
		pr_err_ratelimited("nvidia_p2p_dma_map_pages: page_size %u: -EINVAL\n", pt->page_size);
		ret = -EINVAL;
		goto race;
	}
	m = sim_map_alloc(peer, entries);
	if (!m) {
		pr_err_ratelimited("nvidia_p2p_dma_map_pages: out of memory\n");
		ret = -ENOMEM;
		goto race;
	}
	/* The real physical address of each page: no IOMMU in the VM. */
	for (i = 0; i < entries; i++)
		m->map.dma_addresses[i] = pt->pages[i]->physical_address & ~SIM_BAR_BIT;

	/* rm_p2p_dma_map_pages: the only part serialised against a cudaFree. */
	sim_rm_lock();
	sim_rm_unlock();

race:
	if (revoke) {
		/* A cudaFree takes the RM lock the moment the RM part dropped it. */
		sim_rm_lock();
		sim_revoke_pins(revoke);
		sim_rm_unlock();
		sim_alloc_put(revoke);
	}

	/* nv_p2p_insert_dma_mapping: down() on the pin's list lock, list_add_tail. */
	mutex_lock(&sim_lock);
	list_del(&call.node);
	if (call.table_freed) {
		atomic64_inc(&sim_cnt.stale_table_uses);
		if (m) {
			/*
			 * The link into the freed pin. Only the head's prev is written: following
			 * the poisoned pointers as list_add_tail() does would oops the test kernel
			 * (on a reused pin it corrupts its new owner, as in production).
			 */
			WRITE_ONCE(pin->maps.prev, &m->node);
		}
	} else if (m && !ret) {
		list_add_tail(&m->node, &pin->maps);
		atomic64_inc(&sim_cnt.mappings);
	}
	mutex_unlock(&sim_lock);
	if (call.table_freed)
		pr_err_ratelimited("nvidia_p2p_dma_map_pages: page table %p was freed during the call (free callback): wrote into it and returns %d%s, as nvidia.ko\n",
				   pt, ret, m ? " with a mapping nobody frees" : "");
	if (ret) {
		if (m)
			sim_map_free(m);
		return ret;
	}
	*dma_mapping = &m->map;
	return 0;
}

int nvidia_p2p_dma_map_pages(struct pci_dev *peer, struct nvidia_p2p_page_table *page_table,
			     struct nvidia_p2p_dma_mapping **dma_mapping)
{
	const enum nv_p2p_sim_fn fn = NV_P2P_SIM_FN_DMA_MAP;
	int ret;

	ret = sim_enter(fn);
	if (!ret)
		ret = sim_check_not_in_callback(sim_fn_funcs[fn]);
	if (!ret && (!peer || !page_table || !dma_mapping)) {
		pr_err_ratelimited("%s: NULL argument (peer %p table %p mapping %p): -EINVAL\n",
				   __func__, peer, page_table, dma_mapping);
		ret = -EINVAL;
	}
	if (!ret)
		ret = sim_dma_map(peer, page_table, dma_mapping);
	return sim_leave(fn, ret);
}
EXPORT_SYMBOL_GPL(nvidia_p2p_dma_map_pages);

/* Without the RM lock, as NVIDIA does: allowed from inside a free callback. */
static int sim_dma_unmap(struct pci_dev *peer, struct nvidia_p2p_page_table *pt,
			 struct nvidia_p2p_dma_mapping *map)
{
	struct sim_map *m, *found = NULL;
	struct sim_pin *pin;
	int ret = 0;

	mutex_lock(&sim_lock);
	pin = sim_find_pin(pt);
	if (!pin) {
		/* NVIDIA would dereference freed memory here; we count and refuse instead. */
		atomic64_inc(&sim_cnt.stale_table_uses);
		pr_err_ratelimited("nvidia_p2p_dma_unmap_pages: page table %p is not live (freed by put_pages or after its free callback)\n",
				   pt);
		goto unlock;
	}
	list_for_each_entry(m, &pin->maps, node) {
		if (&m->map == map) {
			found = m;
			break;
		}
	}
	if (!found) {
		pr_debug("nvidia_p2p_dma_unmap_pages: mapping %p already unmapped\n", map);
		goto unlock;
	}
	if (WARN_ONCE(found->map.pci_dev != peer,
		      "nvidia_p2p_dma_unmap_pages: peer %p is not the peer %p the mapping was made for\n",
		      peer, found->map.pci_dev)) {
		ret = -EINVAL;
		found = NULL;
		goto unlock;
	}
	list_del(&found->node);
	atomic64_dec(&sim_cnt.mappings);
unlock:
	mutex_unlock(&sim_lock);
	if (found)
		sim_map_free(found);
	return ret;
}

int nvidia_p2p_dma_unmap_pages(struct pci_dev *peer, struct nvidia_p2p_page_table *page_table,
			       struct nvidia_p2p_dma_mapping *dma_mapping)
{
	const enum nv_p2p_sim_fn fn = NV_P2P_SIM_FN_DMA_UNMAP;
	int ret;

	ret = sim_enter(fn);
	if (!ret && (!page_table || !dma_mapping)) {
		pr_err_ratelimited("%s: NULL argument (table %p mapping %p): -EINVAL\n",
				   __func__, page_table, dma_mapping);
		ret = -EINVAL;
	}
	if (!ret)
		ret = sim_dma_unmap(peer, page_table, dma_mapping);
	return sim_leave(fn, ret);
}
EXPORT_SYMBOL_GPL(nvidia_p2p_dma_unmap_pages);

/* ---------------------------------------------------------------- exported API: the rest */

/* The mailbox API is gone from every supported driver: NVIDIA's ENOTSUPP (524). */
int nvidia_p2p_init_mapping(uint64_t p2p_token, struct nvidia_p2p_params *params,
			    void (*destroy_callback)(void *data), void *data)
{
	pr_err_ratelimited("%s: not supported\n", __func__);
	return -ENOTSUPP;
}
EXPORT_SYMBOL_GPL(nvidia_p2p_init_mapping);

int nvidia_p2p_destroy_mapping(uint64_t p2p_token)
{
	pr_err_ratelimited("%s: not supported\n", __func__);
	return -ENOTSUPP;
}
EXPORT_SYMBOL_GPL(nvidia_p2p_destroy_mapping);

int nvidia_p2p_register_rsync_driver(nvidia_p2p_rsync_driver_t *driver, void *data)
{
	int ret = 0;

	if (!driver) {
		pr_err_ratelimited("%s: NULL driver: -EINVAL\n", __func__);
		return -EINVAL;
	}
	mutex_lock(&sim_rsync_lock);
	if (sim_rsync_driver)
		ret = -EBUSY;
	else
		sim_rsync_driver = driver;
	mutex_unlock(&sim_rsync_lock);
	if (ret)
		pr_err_ratelimited("%s: one is already registered: -EBUSY\n", __func__);
	return ret;
}
EXPORT_SYMBOL_GPL(nvidia_p2p_register_rsync_driver);

void nvidia_p2p_unregister_rsync_driver(nvidia_p2p_rsync_driver_t *driver, void *data)
{
	mutex_lock(&sim_rsync_lock);
	if (sim_rsync_driver == driver)
		sim_rsync_driver = NULL;
	mutex_unlock(&sim_rsync_lock);
}
EXPORT_SYMBOL_GPL(nvidia_p2p_unregister_rsync_driver);

int nvidia_p2p_get_rsync_registers(nvidia_p2p_rsync_reg_info_t **reg_info)
{
	pr_err_ratelimited("%s: no rsync registers: -ENODEV\n", __func__);
	return -ENODEV;
}
EXPORT_SYMBOL_GPL(nvidia_p2p_get_rsync_registers);

void nvidia_p2p_put_rsync_registers(nvidia_p2p_rsync_reg_info_t *reg_info)
{
}
EXPORT_SYMBOL_GPL(nvidia_p2p_put_rsync_registers);

/* ---------------------------------------------------------------- the user mapping */

static void sim_vm_open(struct vm_area_struct *vma)
{
	struct sim_alloc *a = vma->vm_private_data;

	mutex_lock(&sim_lock);
	a->vmas++;
	kref_get(&a->ref);
	mutex_unlock(&sim_lock);
}

/*
 * munmap or exit: cudaFree, deferred to a work item as mmap_lock is held here. The queued work
 * owns the allocation's own reference, which sim_cuda_free() drops.
 */
static void sim_vm_close(struct vm_area_struct *vma)
{
	struct sim_alloc *a = vma->vm_private_data;

	mutex_lock(&sim_lock);
	if (--a->vmas == 0 && a->state == SIM_MAPPED) {
		a->state = SIM_FREEING;
		queue_work(sim_wq, &a->free_work);
	}
	mutex_unlock(&sim_lock);
	sim_alloc_put(a);		/* the VMA's */
}

/* The registry is keyed by VA: the mapping may not move or split. */
static int sim_vm_may_split(struct vm_area_struct *vma, unsigned long addr)
{
	return -EINVAL;
}

static int sim_vm_mremap(struct vm_area_struct *vma)
{
	return -EINVAL;
}

static const struct vm_operations_struct sim_vm_ops = {
	.open = sim_vm_open,
	.close = sim_vm_close,
	.may_split = sim_vm_may_split,
	.mremap = sim_vm_mremap,
};

static int sim_remap(struct sim_alloc *a, struct vm_area_struct *vma)
{
	unsigned long addr = vma->vm_start;
	unsigned int i;
	int ret;

	for (i = 0; i < a->nchunks; i++) {
		unsigned long size = PAGE_SIZE << a->chunks[i].order;

		ret = remap_pfn_range(vma, addr, page_to_pfn(a->chunks[i].page), size,
				      vma->vm_page_prot);
		if (ret)
			return ret;
		addr += size;
	}
	return 0;
}

static int sim_mmap(struct file *file, struct vm_area_struct *vma)
{
	u64 len = vma->vm_end - vma->vm_start;
	unsigned long id_pgoff = vma->vm_pgoff >> (SIM_MMAP_SHIFT - PAGE_SHIFT);
	struct sim_alloc *a, *found = NULL;
	int ret = -EINVAL;

	if (!(vma->vm_flags & VM_SHARED) || !IS_ALIGNED(vma->vm_start, SIM_PAGE_SIZE) ||
	    vma->vm_pgoff != id_pgoff << (SIM_MMAP_SHIFT - PAGE_SHIFT)) {
		pr_err_ratelimited("mmap: needs MAP_SHARED, a 64 KiB aligned address and an offset from ALLOC\n");
		return -EINVAL;
	}
	mutex_lock(&sim_lock);
	list_for_each_entry(a, &sim_allocs, node) {
		if (a->owner == file && a->id == id_pgoff) {
			found = a;
			break;
		}
	}
	if (!found || found->state != SIM_ALLOCATED || len != found->size) {
		pr_err_ratelimited("mmap: no unmapped allocation of this file with that offset and size\n");
		goto unlock;
	}
	vm_flags_set(vma, VM_IO | VM_PFNMAP | VM_DONTEXPAND | VM_DONTDUMP | VM_DONTCOPY);
	ret = sim_remap(found, vma);
	if (ret) {
		pr_err_ratelimited("mmap: remap_pfn_range failed: %d\n", ret);
		goto unlock;
	}
	found->state = SIM_MAPPED;
	found->va = vma->vm_start;
	found->mm = vma->vm_mm;
	mmgrab(found->mm);
	found->tgid = get_pid(task_tgid(current));
	found->vmas = 1;
	kref_get(&found->ref);
	vma->vm_private_data = found;
	vma->vm_ops = &sim_vm_ops;
unlock:
	mutex_unlock(&sim_lock);
	return ret;
}

/* cudaMalloc VAs are 2 MiB aligned: ask for 2 MiB more and round up. */
static unsigned long sim_get_unmapped_area(struct file *file, unsigned long addr,
					   unsigned long len, unsigned long pgoff,
					   unsigned long flags)
{
	unsigned long va;

	if (flags & MAP_FIXED)
		return SIM_GET_UNMAPPED_AREA(file, addr, len, pgoff, flags);
	if (len > TASK_SIZE - SIM_MAP_ALIGN)
		return -ENOMEM;
	va = SIM_GET_UNMAPPED_AREA(file, 0, len + SIM_MAP_ALIGN, pgoff, flags);
	if (IS_ERR_VALUE(va))
		return va;
	return ALIGN(va, SIM_MAP_ALIGN);
}

/* ---------------------------------------------------------------- ioctls */

static long sim_ioc_alloc(struct file *file, void __user *arg)
{
	struct nv_p2p_sim_alloc req;
	struct sim_alloc *a;
	int ret;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	if (!req.size || !IS_ALIGNED(req.size, SIM_PAGE_SIZE) || req.size > SIM_MAX_SIZE ||
	    (req.flags & ~(NV_P2P_SIM_ALLOC_FRAGMENTED | NV_P2P_SIM_ALLOC_GPU_MASK))) {
		pr_err_ratelimited("ALLOC: size 0x%llx must be a non-zero multiple of 64 KiB up to 4 GiB, flags 0x%x: -EINVAL\n",
				   req.size, req.flags);
		return -EINVAL;
	}
	a = kzalloc_obj(*a);
	if (!a)
		return -ENOMEM;
	kref_init(&a->ref);
	INIT_LIST_HEAD(&a->node);
	INIT_LIST_HEAD(&a->pins);
	INIT_WORK(&a->free_work, sim_free_work);
	a->owner = file;
	a->size = req.size;
	a->gpu = (req.flags & NV_P2P_SIM_ALLOC_GPU_MASK) >> NV_P2P_SIM_ALLOC_GPU_SHIFT;
	a->npages = req.size / SIM_PAGE_SIZE;
	a->state = SIM_ALLOCATED;
	ret = sim_alloc_backing(a, req.flags & NV_P2P_SIM_ALLOC_FRAGMENTED);
	if (ret) {
		pr_err_ratelimited("ALLOC: no memory for 0x%llx bytes\n", req.size);
		sim_alloc_put(a);
		return ret;
	}
	mutex_lock(&sim_lock);
	if (++sim_next_id == 0)
		++sim_next_id;
	a->id = sim_next_id;
	list_add_tail(&a->node, &sim_allocs);
	atomic64_inc(&sim_cnt.allocations);
	mutex_unlock(&sim_lock);

	req.id = a->id;
	req.mmap_offset = (u64)a->id << SIM_MMAP_SHIFT;
	/* On failure the allocation stays with the file and goes at close. */
	return copy_to_user(arg, &req, sizeof(req)) ? -EFAULT : 0;
}

static long sim_ioc_free(struct file *file, u64 __user *arg)
{
	struct sim_alloc *a, *found = NULL;
	u64 va;

	if (get_user(va, arg))
		return -EFAULT;
	mutex_lock(&sim_lock);
	list_for_each_entry(a, &sim_allocs, node) {
		if (a->owner == file && a->state == SIM_MAPPED && a->va == va) {
			found = a;
			found->state = SIM_FREEING;
			break;
		}
	}
	mutex_unlock(&sim_lock);
	if (!found) {
		pr_err_ratelimited("FREE: no mapped allocation of this file starts at 0x%llx: -EINVAL\n",
				   va);
		return -EINVAL;
	}
	sim_cuda_free(found, true);
	return 0;
}

static long sim_ioc_fault(void __user *arg)
{
	struct nv_p2p_sim_fault req;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	if (req.fn >= NV_P2P_SIM_FN_COUNT || req.err <= 0 || req.err > MAX_ERRNO) {
		pr_err_ratelimited("FAULT: fn %u err %d out of range: -EINVAL\n", req.fn, req.err);
		return -EINVAL;
	}
	spin_lock(&sim_fault_lock);
	sim_faults[req.fn].countdown = req.nth;	/* 0 cancels */
	sim_faults[req.fn].err = req.err;
	spin_unlock(&sim_fault_lock);
	return 0;
}

static long sim_ioc_revoke_at(void __user *arg)
{
	struct nv_p2p_sim_revoke_at req;
	struct sim_alloc *a;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	if (req.point < NV_P2P_SIM_REVOKE_IN_GET_PAGES ||
	    req.point > NV_P2P_SIM_REVOKE_IN_PUT_PAGES) {
		pr_err_ratelimited("REVOKE_AT: unknown point %u: -EINVAL\n", req.point);
		return -EINVAL;
	}
	mutex_lock(&sim_lock);
	a = sim_find_mapped(current->mm, req.va, 1);
	if (a)
		a->revoke_at = req.point;
	mutex_unlock(&sim_lock);
	if (!a) {
		pr_err_ratelimited("REVOKE_AT: no allocation of this process at 0x%llx: -EINVAL\n",
				   req.va);
		return -EINVAL;
	}
	return 0;
}

static long sim_ioc_stall_at(void __user *arg)
{
	struct nv_p2p_sim_stall_at req;
	struct sim_alloc *a;
	long ret = 0;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	if (req.point != NV_P2P_SIM_STALL_IN_GET_PAGES) {
		pr_err_ratelimited("STALL_AT: unknown point %u: -EINVAL\n", req.point);
		return -EINVAL;
	}
	mutex_lock(&sim_lock);
	a = sim_find_mapped(current->mm, req.va, 1);
	if (!a) {
		ret = -EINVAL;
	} else if (sim_stall_armed || atomic_read(&sim_stalled) != SIM_STALL_NONE) {
		ret = -EBUSY;
	} else {
		a->stall_at = req.point;
		sim_stall_armed = true;
	}
	mutex_unlock(&sim_lock);
	if (ret == -EINVAL)
		pr_err_ratelimited("STALL_AT: no allocation of this process at 0x%llx: -EINVAL\n",
				   req.va);
	else if (ret)
		pr_err_ratelimited("STALL_AT: a stall is already armed or stalled: -EBUSY\n");
	return ret;
}

static long sim_ioc_stall_wait(void)
{
	long r = wait_event_interruptible_timeout(sim_stall_wq,
						  atomic_read(&sim_stalled) == SIM_STALL_WAITING,
						  10 * HZ);

	if (r < 0)
		return r;
	return r ? 0 : -ETIMEDOUT;
}

static long sim_ioc_stall_resume(void)
{
	if (atomic_read(&sim_stalled) == SIM_STALL_NONE)
		return -ESRCH;
	atomic_set(&sim_stall_resume, 1);
	wake_up_all(&sim_stall_wq);
	return 0;
}

static void sim_snapshot(struct nv_p2p_sim_counters *c)
{
	int i;

	/* munmap and exit free from a work item: let them finish so the numbers are settled. */
	flush_workqueue(sim_wq);
	for (i = 0; i < NV_P2P_SIM_FN_COUNT; i++) {
		c->calls[i] = atomic64_read(&sim_cnt.calls[i]);
		c->failures[i] = atomic64_read(&sim_cnt.failures[i]);
	}
	c->free_callbacks = atomic64_read(&sim_cnt.free_callbacks);
	c->calls_in_callback = atomic64_read(&sim_cnt.calls_in_callback);
	c->stale_table_uses = atomic64_read(&sim_cnt.stale_table_uses);
	c->pins = atomic64_read(&sim_cnt.pins);
	c->persistent_pins = atomic64_read(&sim_cnt.persistent_pins);
	c->mappings = atomic64_read(&sim_cnt.mappings);
	c->allocations = atomic64_read(&sim_cnt.allocations);
	c->pages_pinned = atomic64_read(&sim_cnt.pages_pinned);
	c->put_pages_not_found = atomic64_read(&sim_cnt.put_pages_not_found);
	c->put_pages_other_process = atomic64_read(&sim_cnt.put_pages_other_process);
}

static long sim_ioc_counters(void __user *arg)
{
	struct nv_p2p_sim_counters c = {};

	sim_snapshot(&c);
	return copy_to_user(arg, &c, sizeof(c)) ? -EFAULT : 0;
}

static void sim_reset(void)
{
	struct sim_alloc *a;
	int i;

	for (i = 0; i < NV_P2P_SIM_FN_COUNT; i++) {
		atomic64_set(&sim_cnt.calls[i], 0);
		atomic64_set(&sim_cnt.failures[i], 0);
	}
	atomic64_set(&sim_cnt.free_callbacks, 0);
	atomic64_set(&sim_cnt.calls_in_callback, 0);
	atomic64_set(&sim_cnt.stale_table_uses, 0);
	atomic64_set(&sim_cnt.put_pages_not_found, 0);
	atomic64_set(&sim_cnt.put_pages_other_process, 0);
	spin_lock(&sim_fault_lock);
	memset(sim_faults, 0, sizeof(sim_faults));
	spin_unlock(&sim_fault_lock);
	mutex_lock(&sim_lock);
	list_for_each_entry(a, &sim_allocs, node) {
		a->revoke_at = 0;
		sim_disarm_stall(a);
	}
	mutex_unlock(&sim_lock);
}

static long sim_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	void __user *uarg = (void __user *)arg;

	switch (cmd) {
	case NV_P2P_SIM_IOC_ALLOC:
		return sim_ioc_alloc(file, uarg);
	case NV_P2P_SIM_IOC_FREE:
		return sim_ioc_free(file, uarg);
	case NV_P2P_SIM_IOC_FAULT:
		return sim_ioc_fault(uarg);
	case NV_P2P_SIM_IOC_REVOKE_AT:
		return sim_ioc_revoke_at(uarg);
	case NV_P2P_SIM_IOC_COUNTERS:
		return sim_ioc_counters(uarg);
	case NV_P2P_SIM_IOC_RESET:
		sim_reset();
		return 0;
	case NV_P2P_SIM_IOC_STALL_AT:
		return sim_ioc_stall_at(uarg);
	case NV_P2P_SIM_IOC_STALL_WAIT:
		return sim_ioc_stall_wait();
	case NV_P2P_SIM_IOC_STALL_RESUME:
		return sim_ioc_stall_resume();
	}
	return -ENOTTY;
}

/* Process exit or last close: cudaFree of everything the file still owns. */
static int sim_release(struct inode *inode, struct file *file)
{
	struct sim_alloc *a, *found;

	for (;;) {
		found = NULL;
		mutex_lock(&sim_lock);
		list_for_each_entry(a, &sim_allocs, node) {
			if (a->owner == file &&
			    (a->state == SIM_ALLOCATED || a->state == SIM_MAPPED)) {
				found = a;
				found->state = SIM_FREEING;
				break;
			}
		}
		mutex_unlock(&sim_lock);
		if (!found)
			break;
		sim_cuda_free(found, false);
	}
	/* Frees queued by this file's munmaps complete before close returns. */
	flush_workqueue(sim_wq);
	return 0;
}

static const struct file_operations sim_fops = {
	.owner = THIS_MODULE,
	.unlocked_ioctl = sim_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.mmap = sim_mmap,
	.get_unmapped_area = sim_get_unmapped_area,
	.release = sim_release,
};

static struct miscdevice sim_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "nv_p2p_sim",
	.fops = &sim_fops,
	.mode = 0600,
};

/* ---------------------------------------------------------------- debugfs */

static int sim_counters_show(struct seq_file *s, void *unused)
{
	struct nv_p2p_sim_counters c = {};
	int i;

	sim_snapshot(&c);
	for (i = 0; i < NV_P2P_SIM_FN_COUNT; i++)
		seq_printf(s, "calls_%s %llu\n", sim_fn_names[i], c.calls[i]);
	for (i = 0; i < NV_P2P_SIM_FN_COUNT; i++)
		seq_printf(s, "failures_%s %llu\n", sim_fn_names[i], c.failures[i]);
	seq_printf(s, "free_callbacks %llu\n", c.free_callbacks);
	seq_printf(s, "calls_in_callback %llu\n", c.calls_in_callback);
	seq_printf(s, "stale_table_uses %llu\n", c.stale_table_uses);
	seq_printf(s, "pins %llu\n", c.pins);
	seq_printf(s, "persistent_pins %llu\n", c.persistent_pins);
	seq_printf(s, "mappings %llu\n", c.mappings);
	seq_printf(s, "allocations %llu\n", c.allocations);
	seq_printf(s, "pages_pinned %llu\n", c.pages_pinned);
	seq_printf(s, "put_pages_not_found %llu\n", c.put_pages_not_found);
	seq_printf(s, "put_pages_other_process %llu\n", c.put_pages_other_process);
	seq_printf(s, "backing_bytes %lld\n", (long long)atomic64_read(&sim_cnt.backing_bytes));
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(sim_counters);

/* ---------------------------------------------------------------- module */

static int __init sim_init(void)
{
	int ret, i;

#ifdef NV_P2P_SIM_API_530
	if (api != 530) {
		pr_err("invalid api=%d: this build is the <= 530 API only\n", api);
		return -EINVAL;
	}
#else
	if (api != 535 && api != 530) {
		pr_err("invalid api=%d: 535 or 530\n", api);
		return -EINVAL;
	}
#endif
	if (pt_version != NVIDIA_P2P_PAGE_TABLE_VERSION_V1 &&
	    pt_version != NVIDIA_P2P_PAGE_TABLE_VERSION_V2) {
		pr_err("invalid pt_version=0x%x: 0x%x or 0x%x\n", pt_version,
		       NVIDIA_P2P_PAGE_TABLE_VERSION_V1, NVIDIA_P2P_PAGE_TABLE_VERSION_V2);
		return -EINVAL;
	}
	sema_init(&sim_rm_sem, 1);
	get_random_bytes(sim_uuid[0], sizeof(sim_uuid[0]));
	sim_uuid[0][6] = (sim_uuid[0][6] & 0x0f) | 0x40;	/* a version 4 UUID: never all zeroes */
	for (i = 1; i < NV_P2P_SIM_GPUS; i++) {
		memcpy(sim_uuid[i], sim_uuid[0], sizeof(sim_uuid[0]));
		sim_uuid[i][15] ^= i;
	}

	sim_wq = alloc_workqueue("nv_p2p_sim", WQ_UNBOUND, 0);
	if (!sim_wq)
		return -ENOMEM;
	ret = misc_register(&sim_misc);
	if (ret) {
		pr_err("misc_register failed: %d\n", ret);
		destroy_workqueue(sim_wq);
		return ret;
	}
	sim_debugfs = debugfs_create_dir("nv_p2p_sim", NULL);
	debugfs_create_file("counters", 0400, sim_debugfs, NULL, &sim_counters_fops);
	pr_info("loaded: api %d, page table 0x%08x, align_check %d\n", api, pt_version,
		align_check);
	return 0;
}

/*
 * Every open file holds a module reference, so nothing is mapped or allocated any more; what
 * can remain are pins a client never put (persistent ones survive cudaFree). Their client may be
 * gone, so no callback is called: they are reported and freed.
 */
static struct sim_pin *sim_any_pin(void)
{
	struct sim_pin *pin;
	int bkt;

	lockdep_assert_held(&sim_lock);
	hash_for_each(sim_pins, bkt, pin, hnode)
		return pin;
	return NULL;
}

static void __exit sim_exit(void)
{
	struct sim_pin *pin;

	debugfs_remove_recursive(sim_debugfs);
	misc_deregister(&sim_misc);
	destroy_workqueue(sim_wq);
	/*
	 * Every caller of the P2P API holds a reference on this module, so no call can still be
	 * stalled; an armed stall went with its allocation. Let any waiter go all the same.
	 */
	atomic_set(&sim_stall_resume, 1);
	wake_up_all(&sim_stall_wq);
	WARN_ON(atomic_read(&sim_stalled) != SIM_STALL_NONE);

	for (;;) {
		bool free_pages = false;
		LIST_HEAD(maps);

		mutex_lock(&sim_lock);
		WARN_ON(!list_empty(&sim_allocs));
		pin = sim_any_pin();
		if (pin)
			free_pages = sim_pin_unlink(pin, &maps);
		mutex_unlock(&sim_lock);
		if (!pin)
			break;
		pr_err("unload: page table %p (va 0x%llx) was never put; freeing it\n", &pin->pt,
		       pin->va);
		sim_pin_free(pin, &maps, free_pages);
	}
	pr_info("unloaded\n");
}

module_init(sim_init);
module_exit(sim_exit);

MODULE_LICENSE("GPL");
MODULE_AUTHOR("nvpeer project");
MODULE_DESCRIPTION("Test stand-in for the NVIDIA P2P API of nvidia.ko (GPUDirect RDMA)");
