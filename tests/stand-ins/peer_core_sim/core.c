// SPDX-License-Identifier: GPL-2.0
/*
 * peer_core_sim: a stand-in for MOFED's peer-memory core, for testing peer-memory clients
 * without MOFED, a NIC or a GPU. It exports ib_register_peer_memory_client /
 * ib_unregister_peer_memory_client (EXPORT_SYMBOL, as MOFED) and drives registered clients
 * exactly as one of three core generations does, each a build of its own because each exports
 * what that generation's cores export (pcs.h):
 *
 *   4x         MOFED 4.0 ... 4.9 LTS and 5.0 (CONTRACT 1.8); exports ib_get_peer_private_data
 *   5x         MOFED 5.1 ... 5.4-2           (CONTRACT 1.7, marker ignored, lock inversion)
 *   5x-unmaps  MOFED 5.4-3 and later; exports ib_umem_stop_invalidation_notifier; the
 *              parameter line= picks 5.4-3, 24.04 (24.04 ... 24.10, with 5.5+'s flow) or 25.04+ (pcs.h)
 *
 * /dev/peer_core_sim (mr.c) registers "MRs" over user VAs and performs "NIC DMA" through the
 * DMA addresses the client returned, with QEMU's edu device as the NIC (nic.c).
 * /sys/kernel/mm/memory_peers/<client>/ (sysfs.c, parameter "sysfs") and
 * /sys/kernel/debug/peer_core_sim/stats show the counters.
 *
 * This file: the client registry, the calls into clients (counted, checked), module setup.
 * The lock order is written down in pcs.h.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/debugfs.h>
#include <linux/device.h>
#include <linux/list.h>
#include <linux/log2.h>
#include <linux/module.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include "pcs.h"

/* Kept so that a command line naming the generation states it; another value is refused. */
static char *generation = PCS_BUILD_NAME;
module_param(generation, charp, 0444);
MODULE_PARM_DESC(generation, "core generation: fixed by this build (" PCS_BUILD_NAME ")");
bool pcs_sysfs = true;
module_param_named(sysfs, pcs_sysfs, bool, 0444);
MODULE_PARM_DESC(sysfs, "create /sys/kernel/mm/memory_peers/<client>/ (1, default) or not (0)");

/* 5x-unmaps builds: which UNMAPS-era MOFED line (pcs.h); the other builds take none. */
static char *line = PCS_BUILD == PCS_BUILD_5X_UNMAPS ? "25.04" : "";
module_param(line, charp, 0444);
MODULE_PARM_DESC(line, "5x-unmaps builds: MOFED line 5.4-3, 24.04 (24.04 ... 24.10) or 25.04 (default)");
bool pcs_stop_bug;
module_param_named(stop_bug, pcs_stop_bug, bool, 0444);
/*
 * A test knob: the registration of a client of this name stalls (channel 1, until STALL_RESUME)
 * and then fails, as MOFED's does when the client's sysfs directory cannot be created (a name
 * clash, no memory), so that a test can act while a client module's init waits in it.
 */
static char fail_register[IB_PEER_MEMORY_NAME_MAX];
module_param_string(fail_register, fail_register, sizeof(fail_register), 0644);
MODULE_PARM_DESC(fail_register, "test only: stall, then refuse, the registration of the client of this name");

static bool pcs_fails_register(const struct peer_memory_client *pc)
{
	bool fail;

	kernel_param_lock(THIS_MODULE);
	fail = fail_register[0] && !strncmp(fail_register, pc->name, IB_PEER_MEMORY_NAME_MAX);
	kernel_param_unlock(THIS_MODULE);
	return fail;
}
MODULE_PARM_DESC(stop_bug, "lines 5.4-3 and 24.04: the pre-25.04 ib_umem_stop_invalidation_notifier (lockdep reports it)");
enum pcs_line pcs_line;

const enum pcs_gen pcs_gen = PCS_BUILD_GEN;
const struct pcs_gen_ops *const pcs_ops =
	PCS_BUILD_GEN == PCS_GEN_4X ? &pcs_gen_4x_ops : &pcs_gen_5x_ops;
struct pcs_counters pcs_counters;

/* MOFED's peer_memory_mutex and peer_memory_list. */
static DEFINE_MUTEX(pcs_peer_mutex);
static LIST_HEAD(pcs_clients);

const char *const pcs_op_names[PCS_OP_COUNT] = {
	"acquire", "get_pages", "dma_map", "dma_unmap", "put_pages", "get_page_size", "release",
};

static struct dentry *pcs_debugfs;

/* ------------------------------------------------------------------ registration */

#define PCS_OP_OFFSET(op) { offsetof(struct peer_memory_client, op), #op }
static const struct {
	size_t offset;
	const char *name;
} pcs_mandatory[] = {
	PCS_OP_OFFSET(acquire), PCS_OP_OFFSET(get_pages), PCS_OP_OFFSET(put_pages),
	PCS_OP_OFFSET(dma_map), PCS_OP_OFFSET(dma_unmap),
	/*
	 * Mandatory on 4.x only. 5.x cores do not list it, so they register a client without it,
	 * but every release after 5.1-0.6.6.0 calls it unconditionally (a NULL one oopses at the
	 * first registration; the stand-in fails that registration as a protocol violation).
	 */
	PCS_OP_OFFSET(get_page_size),
};

static int pcs_check_mandatory(const struct peer_memory_client *pc)
{
	int i;

	for (i = 0; i < ARRAY_SIZE(pcs_mandatory); i++) {
		if (*(void **)((char *)pc + pcs_mandatory[i].offset))
			continue;
		if (pcs_gen != PCS_GEN_4X && pcs_mandatory[i].offset ==
		    offsetof(struct peer_memory_client, get_page_size))
			continue;
		pr_err("Peer memory %.*s is missing mandatory function %s\n",
		       IB_PEER_MEMORY_NAME_MAX, pc->name, pcs_mandatory[i].name);
		return -EINVAL;
	}
	return 0;
}

void *ib_register_peer_memory_client(const struct peer_memory_client *peer_client,
				     invalidate_peer_memory *invalidate_callback)
{
	struct pcs_client *c;

	if (pcs_check_mandatory(peer_client))
		return NULL;
	if (pcs_fails_register(peer_client)) {
		pr_info("fail_register: stalling the registration of %.*s\n", IB_PEER_MEMORY_NAME_MAX,
			peer_client->name);
		pcs_stall(PCS_STALL_CORE);
		pr_err("fail_register: refusing peer client %.*s\n", IB_PEER_MEMORY_NAME_MAX,
		       peer_client->name);
		return NULL;
	}
	c = kzalloc(sizeof(*c), GFP_KERNEL);
	if (!c)
		return NULL;
	kobject_init(&c->kobj, &pcs_client_ktype);
	refcount_set(&c->usecnt, 1);
	init_completion(&c->usecnt_zero);
	c->ops = peer_client;
	xa_init_flags(&c->umem_xa, XA_FLAGS_ALLOC);
	mutex_init(&c->lock);
	INIT_LIST_HEAD(&c->tickets);
	c->last_ticket = 1;
	/* A client that asks for the callback is only offered umems supporting invalidation. */
	if (invalidate_callback) {
		*invalidate_callback = pcs_ops->invalidate;
		c->invalidating = true;
	}

	mutex_lock(&pcs_peer_mutex);
	if (pcs_sysfs && pcs_sysfs_add(c)) {
		if (list_empty(&pcs_clients))
			pcs_sysfs_put_root();
		mutex_unlock(&pcs_peer_mutex);
		kobject_put(&c->kobj);
		return NULL;
	}
	list_add_tail(&c->list, &pcs_clients);
	mutex_unlock(&pcs_peer_mutex);
	pr_info("registered peer client %.*s version %.*s (%s%s)\n",
		IB_PEER_MEMORY_NAME_MAX, peer_client->name,
		IB_PEER_MEMORY_VER_MAX - 1, peer_client->version,
		c->invalidating ? "invalidating" : "persistent",
		pcs_client_unmaps(c) ? ", INVALIDATE_UNMAPS" : "");
	return c;
}
EXPORT_SYMBOL(ib_register_peer_memory_client);

void ib_unregister_peer_memory_client(void *reg_handle)
{
	struct pcs_client *c = reg_handle;

	mutex_lock(&pcs_peer_mutex);
	list_del(&c->list);
	/* 4.x removes the sysfs directory at unlink, 5.x at the final kobject_put. */
	if (pcs_gen == PCS_GEN_4X)
		pcs_sysfs_del(c);
	if (list_empty(&pcs_clients))
		pcs_sysfs_put_root();
	mutex_unlock(&pcs_peer_mutex);

	/* After this returns no op of the client is called again: wait for every umem. */
	pcs_client_put(c);
	wait_for_completion(&c->usecnt_zero);
	pr_info("unregistered peer client %.*s\n", IB_PEER_MEMORY_NAME_MAX, c->ops->name);
	kobject_put(&c->kobj);
}
EXPORT_SYMBOL(ib_unregister_peer_memory_client);

void pcs_client_get(struct pcs_client *c)
{
	refcount_inc(&c->usecnt);
}

void pcs_client_put(struct pcs_client *c)
{
	if (refcount_dec_and_test(&c->usecnt))
		complete(&c->usecnt_zero);
}

/*
 * ib_peer_unmap_on_invalidate (5.1-2.5.8.0.60, 5.4-3.0.3.0+): byte 15 of version marks the _ex
 * form, whose ex_size must cover flags. Read at every use, as MOFED does, from the client's own
 * struct. Only the 5x-unmaps generation acts on it.
 */
bool pcs_client_unmaps(const struct pcs_client *c)
{
	const struct peer_memory_client_ex *ex;

	if (pcs_gen != PCS_GEN_5X_UNMAPS || !c->ops->version[IB_PEER_MEMORY_VER_MAX - 1])
		return false;
	ex = container_of(c->ops, const struct peer_memory_client_ex, client);
	if (ex->ex_size < offsetofend(struct peer_memory_client_ex, flags))
		return false;
	return ex->flags & PEER_MEM_INVALIDATE_UNMAPS;
}

/*
 * 4.1 ... 5.0 read the 152-byte legacy layout: a client with get_context_private_data set is
 * only offered umems of user contexts carrying peer private data, which ours never do.
 */
static bool pcs_client_wants_private_data(const struct pcs_client *c)
{
	const struct peer_memory_client_legacy *legacy =
		container_of(c->ops, const struct peer_memory_client_legacy, client);

	return pcs_gen == PCS_GEN_4X && legacy->get_context_private_data;
}

static u64 pcs_op_begin(enum pcs_op op, bool inval);
static void pcs_op_end(enum pcs_op op, u64 t0);

/* ib_get_peer_client: registration order, first acquire > 0 wins, under the global mutex. */
struct pcs_client *pcs_get_peer_client(unsigned long addr, size_t size,
				       unsigned long flags, void **ctx)
{
	struct pcs_client *c;
	u64 t0;
	int ret;

	mutex_lock(&pcs_peer_mutex);
	list_for_each_entry(c, &pcs_clients, list) {
		if (c->invalidating && !(flags & IB_PEER_MEM_INVAL_SUPP))
			continue;
		if (pcs_client_wants_private_data(c))
			continue;
		*ctx = NULL;
		t0 = pcs_op_begin(PCS_OP_ACQUIRE, false);
		/* 4.x and 5.x pass NULL peer_mem_private_data and peer_mem_name here. */
		ret = c->ops->acquire(addr, size, NULL, NULL, ctx);
		pcs_op_end(PCS_OP_ACQUIRE, t0);
		if (ret > 0) {
			refcount_inc(&c->usecnt);
			atomic_inc(&pcs_counters.live_umems);
			mutex_unlock(&pcs_peer_mutex);
			return c;
		}
		/* 4.x documents "report any internal error as 0"; 5.x allows -errno. */
		if (ret < 0 && pcs_gen == PCS_GEN_4X)
			pcs_violation(c, "acquire returned %d (4.x clients must return 0 or 1)", ret);
	}
	mutex_unlock(&pcs_peer_mutex);
	return NULL;
}

/* ib_put_peer_client: release() (optional) then drop the use count. */
void pcs_put_peer_client(struct pcs_client *c, void *ctx, bool inval)
{
	if (c->ops->release) {
		u64 t0 = pcs_op_begin(PCS_OP_RELEASE, inval);

		c->ops->release(ctx);
		pcs_op_end(PCS_OP_RELEASE, t0);
	}
	atomic_dec(&pcs_counters.live_umems);
	pcs_client_put(c);
}

/* ------------------------------------------------------------------ peer private data */

#if PCS_BUILD == PCS_BUILD_4X
/*
 * ib_get_peer_private_data (4.1 ... 5.0, CONTRACT 1.8; uverbs' experimental SET_CONTEXT_PEER_INFO
 * reaches it from any user): asks the clients named PEER_NAME that implement both legacy ctx
 * callbacks, under the global mutex, for their private data of PEER_ID. Its export is how a
 * client tells a legacy core apart, so only the 4x build has it.
 *
 * MOFED keeps the data in the ib_ucontext, hands it to acquire and puts it back at ucontext
 * teardown. The stand-in has no user contexts: CONTEXT is never dereferenced, and the data is
 * put back before returning, as if the context ended at once. The return values are the
 * stand-in's: 0 when a client returned data, -EINVAL when the clients asked returned NULL,
 * -ENOENT when no client of that name implements both callbacks (a legacy registration leaves
 * them NULL; an _ex one is read as two callbacks here, which is why they are called).
 */
int ib_get_peer_private_data(struct ib_ucontext *context, u64 peer_id, char *peer_name)
{
	const struct peer_memory_client_legacy *legacy;
	struct pcs_client *c;
	int ret = -ENOENT;
	void *data;

	mutex_lock(&pcs_peer_mutex);
	list_for_each_entry(c, &pcs_clients, list) {
		legacy = container_of(c->ops, const struct peer_memory_client_legacy, client);
		if (strncmp(c->ops->name, peer_name, IB_PEER_MEMORY_NAME_MAX) ||
		    !legacy->get_context_private_data || !legacy->put_context_private_data)
			continue;
		data = legacy->get_context_private_data(peer_id);
		if (!data) {
			ret = -EINVAL;
			continue;
		}
		pr_info("peer private data of client %.*s for peer_id %llu\n",
			IB_PEER_MEMORY_NAME_MAX, c->ops->name, peer_id);
		legacy->put_context_private_data(data);
		ret = 0;
		break;
	}
	mutex_unlock(&pcs_peer_mutex);
	return ret;
}
EXPORT_SYMBOL(ib_get_peer_private_data);
#endif

/* ------------------------------------------------------------------ calls into the client */

/* Counts a call into the client and returns its start time (see pcs_op_end). */
static u64 pcs_op_begin(enum pcs_op op, bool inval)
{
	atomic64_inc(&pcs_counters.calls[op]);
	if (inval)
		atomic64_inc(&pcs_counters.inval_calls[op]);
	return ktime_get_ns();
}

static void pcs_op_end(enum pcs_op op, u64 t0)
{
	atomic64_add(ktime_get_ns() - t0, &pcs_counters.client_ns[op]);
}

int pcs_call_get_pages(struct pcs_umem *u, struct sg_table *sg_head)
{
	u64 t0 = pcs_op_begin(PCS_OP_GET_PAGES, false);
	/* write is always 1 (forces CoW breaking); force = 1 for read-only MRs. */
	int ret = u->client->ops->get_pages(u->addr, u->length, 1, !u->writable, sg_head, u->ctx,
					    u->core_context);

	pcs_op_end(PCS_OP_GET_PAGES, t0);
	return ret;
}

int pcs_call_dma_map(struct pcs_umem *u, int *nmap)
{
	u64 t0 = pcs_op_begin(PCS_OP_DMA_MAP, false);
	int ret = u->client->ops->dma_map(&u->sgt, u->ctx, u->dma_dev, 0, nmap);

	pcs_op_end(PCS_OP_DMA_MAP, t0);
	return ret;
}

void pcs_call_dma_unmap(struct pcs_umem *u, bool inval)
{
	u64 t0 = pcs_op_begin(PCS_OP_DMA_UNMAP, inval);

	/* "Must return 0": every core ignores the value. */
	u->client->ops->dma_unmap(&u->sgt, u->ctx, u->dma_dev);
	pcs_op_end(PCS_OP_DMA_UNMAP, t0);
}

void pcs_call_put_pages(struct pcs_umem *u, bool inval)
{
	u64 t0 = pcs_op_begin(PCS_OP_PUT_PAGES, inval);

	u->client->ops->put_pages(&u->sgt, u->ctx);
	pcs_op_end(PCS_OP_PUT_PAGES, t0);
}

/* Returns 0 for a client without get_page_size (the caller then fails the registration). */
unsigned long pcs_call_get_page_size(struct pcs_umem *u)
{
	u64 t0;
	unsigned long ret;

	if (!u->client->ops->get_page_size) {
		pcs_violation(u->client, "no get_page_size: a 5.x core calls it unconditionally (a NULL pointer call)");
		return 0;
	}
	t0 = pcs_op_begin(PCS_OP_GET_PAGE_SIZE, false);
	ret = u->client->ops->get_page_size(u->ctx);

	pcs_op_end(PCS_OP_GET_PAGE_SIZE, t0);
	return ret;
}

/*
 * Checks the table dma_map returned. A table the "NIC" cannot walk fails the registration
 * (-EINVAL); other breaches of the rules are counted and logged only, as a real core would
 * carry on with them.
 */
int pcs_check_sgl(struct pcs_umem *u, bool page_aligned)
{
	unsigned long first = ALIGN_DOWN(u->addr, u->iova_page);
	unsigned long need = ALIGN(u->addr + u->length, u->iova_page) - first;
	struct scatterlist *sg;
	u64 total = 0;
	int i;

	if (!u->sgt.sgl || u->nmap <= 0 || u->nmap > u->sgt.orig_nents) {
		pcs_violation(u->client, "dma_map succeeded with nmap %d for a table of %u entries",
			      u->nmap, u->sgt.sgl ? u->sgt.orig_nents : 0);
		return -EINVAL;
	}
	for_each_sg(u->sgt.sgl, sg, u->nmap, i) {
		total += sg_dma_len(sg);
		if (!page_aligned ||
		    (PAGE_ALIGNED(sg_dma_address(sg)) && PAGE_ALIGNED(sg_dma_len(sg))))
			continue;
		pcs_violation(u->client, "SG entry %d (%pad + %u) is not PAGE_SIZE aligned", i,
			      &sg_dma_address(sg), sg_dma_len(sg));
	}
	if (total < need)
		pcs_violation(u->client, "SG list covers %llu bytes, the range needs %lu", total,
			      need);
	return 0;
}

/* ------------------------------------------------------------------ umems */

struct pcs_umem *pcs_umem_alloc(struct pcs_mr *mr, struct pcs_client *c, void *ctx)
{
	struct pcs_umem *u = kzalloc(sizeof(*u), GFP_KERNEL);

	if (!u)
		return NULL;
	kref_init(&u->kref);
	u->client = c;
	u->ctx = ctx;
	u->mr = mr;
	u->inject = mr->inject;
	u->addr = mr->addr;
	u->length = mr->size;
	u->writable = mr->writable;
	u->dma_dev = pcs_nic_get();
	u->state = PCS_UNMAPPED;
	mutex_init(&u->mapping_lock);
	u->xa_id = PCS_NO_INVALIDATION_ID;
	INIT_LIST_HEAD(&u->ticket_node);
	init_completion(&u->ticket_gone);
	return u;
}

static void pcs_umem_free(struct kref *kref)
{
	struct pcs_umem *u = container_of(kref, struct pcs_umem, kref);

	put_device(u->dma_dev);
	mutex_destroy(&u->mapping_lock);
	kfree(u);
}

void pcs_umem_put(struct pcs_umem *u)
{
	kref_put(&u->kref, pcs_umem_free);
}

/* ------------------------------------------------------------------ debugfs stats */

void pcs_stats_show_clients(struct seq_file *m)
{
	struct pcs_client *c;

	mutex_lock(&pcs_peer_mutex);
	list_for_each_entry(c, &pcs_clients, list) {
		struct pcs_stats *st = &c->stats;

		seq_printf(m, "client name=%.*s invalidating=%d unmaps=%d sysfs=%d", IB_PEER_MEMORY_NAME_MAX,
			   c->ops->name, c->invalidating, pcs_client_unmaps(c), c->in_sysfs);
		seq_printf(m, " num_alloc_mrs=%lld num_dealloc_mrs=%lld num_reg_pages=%lld",
			   atomic64_read(&st->num_alloc_mrs), atomic64_read(&st->num_dealloc_mrs),
			   atomic64_read(&st->num_reg_pages));
		seq_printf(m, " num_dereg_pages=%lld num_reg_bytes=%lld num_dereg_bytes=%lld",
			   atomic64_read(&st->num_dereg_pages), atomic64_read(&st->num_reg_bytes),
			   atomic64_read(&st->num_dereg_bytes));
		seq_printf(m, " num_free_callbacks=%lu usecnt=%u\n", READ_ONCE(st->num_free_callbacks),
			   refcount_read(&c->usecnt));
	}
	mutex_unlock(&pcs_peer_mutex);
}

/*
 * One line per section, "section key=value ...":
 *   core generation=5x-unmaps line=25.04 stop_bug=0 sysfs=1 nic=0000:00:04.0 live_umems=0
 *        live_mrs=0 violations=0 stop_calls=0 (one line)
 *   calls acquire=N get_pages=N ...      every call into a client
 *   inval_calls dma_unmap=N ...          the calls made inside the invalidate function
 *   timing last_reg_ns=N last_dereg_ns=N in-kernel time of the last REG_MR / DEREG_MR
 *   client_ns acquire=N get_pages=N ...  total time spent inside each client op
 *   client name=... (the eight memory_peers values, also when sysfs=0)
 */
static int pcs_stats_show(struct seq_file *m, void *unused)
{
	struct device *nic = pcs_nic_get();
	int i;

	seq_printf(m, "core generation=%s line=%s stop_bug=%d sysfs=%d nic=%s live_umems=%d live_mrs=%d violations=%lld stop_calls=%lld\n",
		   PCS_BUILD_NAME, *line ? line : "-", pcs_stop_bug, pcs_sysfs,
		   nic ? dev_name(nic) : "none",
		   atomic_read(&pcs_counters.live_umems), atomic_read(&pcs_counters.live_mrs),
		   atomic64_read(&pcs_counters.violations),
		   atomic64_read(&pcs_counters.stop_calls));
	put_device(nic);
	seq_puts(m, "calls");
	for (i = 0; i < PCS_OP_COUNT; i++)
		seq_printf(m, " %s=%lld", pcs_op_names[i], atomic64_read(&pcs_counters.calls[i]));
	seq_puts(m, "\ninval_calls");
	for (i = 0; i < PCS_OP_COUNT; i++)
		seq_printf(m, " %s=%lld", pcs_op_names[i],
			   atomic64_read(&pcs_counters.inval_calls[i]));
	seq_printf(m, "\ntiming last_reg_ns=%lld last_dereg_ns=%lld\n",
		   atomic64_read(&pcs_counters.last_reg_ns), atomic64_read(&pcs_counters.last_dereg_ns));
	seq_puts(m, "client_ns");
	for (i = 0; i < PCS_OP_COUNT; i++)
		seq_printf(m, " %s=%lld", pcs_op_names[i], atomic64_read(&pcs_counters.client_ns[i]));
	seq_putc(m, '\n');
	pcs_stats_show_clients(m);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(pcs_stats);

/* ------------------------------------------------------------------ module */

/* The build that has generation GEN's exports, for the refusal below. */
static const char *pcs_build_of(const char *gen)
{
	if (!strcmp(gen, "4x"))
		return "peer_core_sim_4x.ko";
	if (!strcmp(gen, "5x"))
		return "peer_core_sim_5x.ko";
	if (!strcmp(gen, "5x-unmaps"))
		return "peer_core_sim.ko (or ib_uverbs.ko)";
	return NULL;
}

/* A generation this build's exports contradict would lie to every client that detects it. */
static int pcs_check_generation(void)
{
	const char *build = pcs_build_of(generation);

	if (!strcmp(generation, PCS_BUILD_NAME))
		return 0;
	if (build)
		pr_err("generation=%s contradicts this build's exports (a %s core): load %s\n",
		       generation, PCS_BUILD_NAME, build);
	else
		pr_err("invalid generation=%s: this build is %s (4x, 5x and 5x-unmaps are separate builds)\n",
		       generation, PCS_BUILD_NAME);
	return -EINVAL;
}

/* line= and stop_bug= as this build and that line allow. */
static int pcs_check_line(void)
{
	static const struct {
		const char *name;
		enum pcs_line line;
	} lines[] = {
		{ "5.4-3", PCS_LINE_5_4_3 }, { "24.04", PCS_LINE_24_04 }, { "25.04", PCS_LINE_25_04 },
	};
	int i;

	if (PCS_BUILD != PCS_BUILD_5X_UNMAPS) {
		if (*line || pcs_stop_bug) {
			pr_err("line= and stop_bug= are for the 5x-unmaps builds (this one is %s)\n",
			       PCS_BUILD_NAME);
			return -EINVAL;
		}
		return 0;
	}
	for (i = 0; i < ARRAY_SIZE(lines); i++)
		if (!strcmp(line, lines[i].name))
			pcs_line = lines[i].line;
	if (pcs_line == PCS_LINE_NONE) {
		pr_err("invalid line=%s: 5.4-3, 24.04 or 25.04\n", line);
		return -EINVAL;
	}
	if (pcs_stop_bug && pcs_line == PCS_LINE_25_04) {
		pr_err("stop_bug=1: line 25.04 has the fix (cccf5314); the bug is in 5.4-3 ... 24.10\n");
		return -EINVAL;
	}
	return 0;
}

static int __init pcs_init(void)
{
	int ret = pcs_check_generation();

	if (!ret)
		ret = pcs_check_line();
	if (ret)
		return ret;
	ret = pcs_nic_init();
	if (ret)
		return ret;
	pcs_debugfs = debugfs_create_dir("peer_core_sim", NULL);
	debugfs_create_file("stats", 0400, pcs_debugfs, NULL, &pcs_stats_fops);
	ret = pcs_dev_init();
	if (ret) {
		debugfs_remove_recursive(pcs_debugfs);
		pcs_nic_exit();
		return ret;
	}
	pr_info("loaded: generation %s%s%s%s, memory_peers sysfs %s\n", PCS_BUILD_NAME,
		*line ? ", MOFED line " : "", line, pcs_stop_bug ? " with the pre-25.04 stop bug" : "",
		pcs_sysfs ? "on" : "off");
	return 0;
}

static void __exit pcs_exit(void)
{
	/* Clients hold a module reference through our symbols: none is left here. */
	pcs_dev_exit();
	debugfs_remove_recursive(pcs_debugfs);
	pcs_nic_exit();
	if (atomic_read(&pcs_counters.live_umems))
		pr_err("unloading with %d live umems\n", atomic_read(&pcs_counters.live_umems));
}

module_init(pcs_init);
module_exit(pcs_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("nvpeer test rig: stand-in for MOFED's peer-memory core (PeerDirect)");
