// SPDX-License-Identifier: GPL-2.0
/*
 * What Rust-for-Linux 7.2 cannot express, kept small (the logic is in Rust): modinfo tags that
 * `module!` lacks (version, softdep), parameters visible under /sys/module/<name>/parameters
 * (mode 0444, as NVIDIA's), weak references to the foreign APIs, sysfs attributes, dynamic debug,
 * a rate limit and a few static inline helpers.
 */
#include <linux/cgroup.h>
#include <linux/debugfs.h>
#include <linux/dma-mapping.h>
#include <linux/dynamic_debug.h>
#include <linux/jiffies.h>
#include <linux/kobject.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/nsproxy.h>
#include <linux/pci.h>
#include <linux/pid.h>
#include <linux/pid_namespace.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/ratelimit.h>
#include <linux/workqueue.h>
#include <linux/scatterlist.h>
#include <linux/seq_file.h>
#include <linux/siphash.h>
#include <linux/sysfs.h>
#include "nvpeer_glue.h"

MODULE_VERSION(NVPEER_VERSION);
/* Which Rust foundation the module was built on (kmod/Kbuild): `kernel` or `own`. */
MODULE_INFO(nvpeer_foundation, NVPEER_FOUNDATION);
/*
 * Load after the providers of the symbols we use; modprobe ignores missing soft dependencies.
 * MOFED links the peer-memory core into ib_core up to 23.x and into ib_uverbs from DOCA-OFED
 * 24.07 on (CONTRACT 1.1): name both.
 */
MODULE_SOFTDEP("pre: nvidia ib_core ib_uverbs");

static int peerdirect_support;
module_param(peerdirect_support, int, 0444);
MODULE_PARM_DESC(peerdirect_support,
		 "Set level of support for Peer-direct, 0 [default] or 1 [legacy, for example MLNX_OFED 4.9 LTS]");

static int persistent_api_support = 1;
module_param(persistent_api_support, int, 0444);
MODULE_PARM_DESC(persistent_api_support,
		 "Set level of support for persistent APIs, 0 [legacy] or 1 [default]");

static int share_pins = 1;
module_param(share_pins, int, 0444);
MODULE_PARM_DESC(share_pins,
		 "Registrations of the same GPU range by one process share one NVIDIA pin: 1 [default] the invalidating client's, 2 also the persistent client's (only if applications never free registered memory), 0 [one pin per registration]");

int nvpeer_glue_peerdirect_support(void)
{
	return peerdirect_support;
}

int nvpeer_glue_persistent_api_support(void)
{
	return persistent_api_support;
}

int nvpeer_glue_share_pins(void)
{
	return share_pins;
}

const char *nvpeer_glue_version(void)
{
	return NVPEER_VERSION;
}

/*
 * Weak references: the loader leaves an unresolved weak symbol at 0 instead of failing the load,
 * so init can say which provider is missing. Unlike symbol_get() this also works for the
 * non-GPL exports of NVIDIA drivers before 550. Rust calls the foreign functions only through
 * the pointers filled here.
 */
extern typeof(nvidia_p2p_get_pages) nvidia_p2p_get_pages __weak;
extern typeof(nvidia_p2p_put_pages) nvidia_p2p_put_pages __weak;
extern typeof(nvidia_p2p_dma_map_pages) nvidia_p2p_dma_map_pages __weak;
extern typeof(nvidia_p2p_dma_unmap_pages) nvidia_p2p_dma_unmap_pages __weak;
extern typeof(nvidia_p2p_get_pages_persistent) nvidia_p2p_get_pages_persistent __weak;
extern typeof(nvidia_p2p_put_pages_persistent) nvidia_p2p_put_pages_persistent __weak;
extern int nvidia_p2p_cap_persistent_pages __weak;
extern typeof(ib_register_peer_memory_client) ib_register_peer_memory_client __weak;
extern typeof(ib_unregister_peer_memory_client) ib_unregister_peer_memory_client __weak;
/*
 * Only taken the address of, never called: which of these the running core exports tells its
 * generation (CONTRACT 1.1, checked on every MOFED release 4.0 ... 25.10): the first only the
 * legacy 4.1 ... 5.0 cores, the second only cores that honour PEER_MEM_INVALIDATE_UNMAPS.
 */
struct ib_ucontext;
struct ib_umem;
extern int ib_get_peer_private_data(struct ib_ucontext *context, u64 peer_id,
				    char *peer_name) __weak;
extern void ib_umem_stop_invalidation_notifier(struct ib_umem *umem) __weak;
/*
 * With CONFIG_MODVERSIONS their CRCs would cover struct ib_ucontext and struct ib_umem, which
 * MOFED releases change while keeping the peer-memory ABI, and a mismatch refuses the load
 * although we never call them (REVIEW-KMOD-2 T3-3): kmod/Makefile takes both out of the
 * Module.symvers it hands modpost (NVPEER_UNVERSIONED there; keep the two lists alike), so the
 * module records no version for them and the loader only warns "no symbol version" once.
 */

/*
 * The weak symbols' addresses, read from data rather than taken in code: on arm64 GCC takes the
 * address of an undefined weak symbol in code through the GOT (R_AARCH64_ADR_GOT_PAGE), which the
 * kernel's module loader refuses ("unsupported RELA relocation: 311"); a data initialiser is an
 * absolute relocation (R_AARCH64_ABS64, R_X86_64_64) every loader resolves, to 0 when absent.
 * OPTIMIZER_HIDE_VAR keeps GCC from folding the loads back into code.
 */
static const struct {
	typeof(&nvidia_p2p_get_pages) get_pages;
	typeof(&nvidia_p2p_put_pages) put_pages;
	typeof(&nvidia_p2p_dma_map_pages) dma_map_pages;
	typeof(&nvidia_p2p_dma_unmap_pages) dma_unmap_pages;
	typeof(&nvidia_p2p_get_pages_persistent) get_pages_persistent;
	typeof(&nvidia_p2p_put_pages_persistent) put_pages_persistent;
	const int *cap_persistent_pages;
	typeof(&ib_register_peer_memory_client) register_client;
	typeof(&ib_unregister_peer_memory_client) unregister_client;
	typeof(&ib_get_peer_private_data) peer_private_data;
	typeof(&ib_umem_stop_invalidation_notifier) stop_invalidation_notifier;
} weak_refs = {
	.get_pages = nvidia_p2p_get_pages,
	.put_pages = nvidia_p2p_put_pages,
	.dma_map_pages = nvidia_p2p_dma_map_pages,
	.dma_unmap_pages = nvidia_p2p_dma_unmap_pages,
	.get_pages_persistent = nvidia_p2p_get_pages_persistent,
	.put_pages_persistent = nvidia_p2p_put_pages_persistent,
	.cap_persistent_pages = &nvidia_p2p_cap_persistent_pages,
	.register_client = ib_register_peer_memory_client,
	.unregister_client = ib_unregister_peer_memory_client,
	.peer_private_data = ib_get_peer_private_data,
	.stop_invalidation_notifier = ib_umem_stop_invalidation_notifier,
};

void nvpeer_glue_resolve(struct nvpeer_p2p_api *p2p, struct nvpeer_core_api *core)
{
	typeof(&weak_refs) refs = &weak_refs;

	OPTIMIZER_HIDE_VAR(refs);
	p2p->get_pages = refs->get_pages;
	p2p->put_pages = refs->put_pages;
	p2p->dma_map_pages = refs->dma_map_pages;
	p2p->dma_unmap_pages = refs->dma_unmap_pages;
	p2p->get_pages_persistent = refs->get_pages_persistent;
	p2p->put_pages_persistent = refs->put_pages_persistent;
	p2p->cap_persistent_pages = refs->cap_persistent_pages ? *refs->cap_persistent_pages : -1;
	core->register_client = refs->register_client;
	core->unregister_client = refs->unregister_client;
	core->exports_peer_private_data = refs->peer_private_data != NULL;
	core->exports_stop_invalidation_notifier = refs->stop_invalidation_notifier != NULL;
}

bool nvpeer_glue_module_loaded(const char *name)
{
	/* Our own kobject's kset is module_kset, which is not exported. */
	struct kobject *kobj = kset_find_obj(THIS_MODULE->mkobj.kobj.kset, name);

	if (!kobj)
		return false;
	kobject_put(kobj);
	return true;
}

void nvpeer_glue_sg_set_dma(struct scatterlist *sg, uint64_t addr, unsigned int len)
{
	sg_set_page(sg, NULL, len, 0);
	sg_dma_address(sg) = addr;
	sg_dma_len(sg) = len;
}

unsigned int nvpeer_glue_dma_max_seg_size(struct device *dev)
{
	return dma_get_max_seg_size(dev);
}

struct pci_dev *nvpeer_glue_to_pci_dev(struct device *dev)
{
	return dev_is_pci(dev) ? to_pci_dev(dev) : NULL;
}

void *nvpeer_glue_current_tgid_get(void)
{
	return get_pid(task_tgid(current));
}

void *nvpeer_glue_current_tgid(void)
{
	return task_tgid(current);
}

void nvpeer_glue_pid_put(void *pid)
{
	put_pid(pid);
}

bool nvpeer_glue_current_in_tgid(const void *pid)
{
	return task_tgid(current) == pid;
}

int nvpeer_glue_pid_nr(const void *pid)
{
	return pid_nr((struct pid *)pid);
}

bool nvpeer_glue_module_get(struct module *module)
{
	return try_module_get(module);
}

void nvpeer_glue_module_put(struct module *module)
{
	module_put(module);
}

/*
 * The drop of a pin's last reference that NVIDIA's free callback would make (REVIEW-KMOD C5):
 * pin.rs queues the pin and this work drops it, outside NVIDIA's thread; module exit flushes it,
 * so the work function has returned before the module's text can be freed (the callback's own
 * return is covered by its own module reference: nvpeer_callback.c).
 */
static void nvpeer_deferred_fn(struct work_struct *work)
{
	nvpeer_drain_deferred();
}
static DECLARE_WORK(nvpeer_deferred_work, nvpeer_deferred_fn);

void nvpeer_glue_schedule_deferred(void)
{
	schedule_work(&nvpeer_deferred_work);
}

void nvpeer_glue_flush_deferred(void)
{
	flush_work(&nvpeer_deferred_work);
}

void nvpeer_glue_warn_wrong_shard(unsigned int held, unsigned int guarding)
{
	WARN_ONCE(1, "nvpeer: state of shard %u reached under shard %u's lock\n", guarding, held);
}

bool nvpeer_glue_ratelimit(unsigned int budget)
{
	static struct ratelimit_state rs[NVPEER_LOG_BUDGETS] = {
		[NVPEER_LOG_REGISTRATION] = RATELIMIT_STATE_INIT(rs[0], 5 * HZ, 10),
		[NVPEER_LOG_PIN_LIFETIME] = RATELIMIT_STATE_INIT(rs[1], 5 * HZ, 10),
	};

	return budget < NVPEER_LOG_BUDGETS && __ratelimit(&rs[budget]);
}

bool nvpeer_glue_debug_enabled(void)
{
#if defined(CONFIG_DYNAMIC_DEBUG) || (defined(CONFIG_DYNAMIC_DEBUG_CORE) && defined(DYNAMIC_DEBUG_MODULE))
	DEFINE_DYNAMIC_DEBUG_METADATA(descriptor, "nvpeer debug trace");

	return DYNAMIC_DEBUG_BRANCH(descriptor);
#elif defined(DEBUG)
	return true;
#else
	return false;
#endif
}

void nvpeer_glue_debug(const char *msg)
{
	printk(KERN_DEBUG KBUILD_MODNAME ": %s\n", msg);
}

/* ---------------------------------------------------------------- sysfs */

static const char *const stat_names[NVPEER_STAT_COUNT] = {
	[NVPEER_STAT_LIVE_CONTEXTS] = "live_contexts",
	[NVPEER_STAT_ACQUIRED] = "acquired",
	[NVPEER_STAT_DECLINED] = "declined",
	[NVPEER_STAT_PIN_CALLS] = "pin_calls",
	[NVPEER_STAT_UNPIN_CALLS] = "unpin_calls",
	[NVPEER_STAT_PINNED_PAGES] = "pinned_pages",
	[NVPEER_STAT_PINNED_BYTES] = "pinned_bytes",
	[NVPEER_STAT_REGISTRATIONS] = "registrations",
	[NVPEER_STAT_DEREGISTRATIONS] = "deregistrations",
	[NVPEER_STAT_SG_ENTRIES] = "sg_entries",
	[NVPEER_STAT_REVOCATIONS] = "revocations",
	[NVPEER_STAT_INVALIDATE_CALLS] = "invalidate_calls",
	[NVPEER_STAT_FAILURES] = "failures",
	[NVPEER_STAT_PIN_SHARES] = "pin_shares",
	[NVPEER_STAT_LIVE_PINS] = "live_pins",
	[NVPEER_STAT_UNPINS_LEFT_TO_CALLBACK] = "unpins_left_to_callback",
};

static const char *const op_names[NVPEER_OP_COUNT] = {
	[NVPEER_OP_ACQUIRE] = "acquire",
	[NVPEER_OP_GET_PAGES] = "get_pages",
	[NVPEER_OP_DMA_MAP] = "dma_map",
	[NVPEER_OP_DMA_UNMAP] = "dma_unmap",
	[NVPEER_OP_PUT_PAGES] = "put_pages",
	[NVPEER_OP_GET_PAGE_SIZE] = "get_page_size",
	[NVPEER_OP_RELEASE] = "release",
	[NVPEER_OP_FREE_CALLBACK] = "free_callback",
};

struct nvpeer_stat_attr {
	struct kobj_attribute attr;
	unsigned int stat;
};

static ssize_t stat_show(struct kobject *kobj, struct kobj_attribute *attr, char *buf)
{
	struct nvpeer_stat_attr *sa = container_of(attr, struct nvpeer_stat_attr, attr);

	return sysfs_emit(buf, "%llu\n", nvpeer_stat_value(sa->stat));
}

static struct nvpeer_stat_attr stat_attrs[NVPEER_STAT_COUNT];
static struct attribute *stat_attr_ptrs[NVPEER_STAT_COUNT + 1];
static const struct attribute_group stats_group = {
	.name = "stats",
	.attrs = stat_attr_ptrs,
};

static ssize_t implementation_show(struct kobject *kobj, struct kobj_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "nvpeer %s\n", NVPEER_VERSION);
}
static struct kobj_attribute implementation_attr = __ATTR_RO(implementation);

/* The Rust foundation the module was built on (kmod/Kbuild): "kernel" or "own". */
static ssize_t foundation_show(struct kobject *kobj, struct kobj_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%s\n", NVPEER_FOUNDATION);
}
static struct kobj_attribute foundation_attr = __ATTR_RO(foundation);

/* The core generation detected at load (core_gen.rs), e.g. "5x-unmaps"; set before the file exists. */
static const char *nvpeer_core_id = "unknown";

static ssize_t core_show(struct kobject *kobj, struct kobj_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%s\n", nvpeer_core_id);
}
static struct kobj_attribute core_attr = __ATTR_RO(core);

/* "<callback> <errno> <count>" per non-zero cell: failures by callback and errno. */
static ssize_t failures_show(struct kobject *kobj, struct kobj_attribute *attr, char *buf)
{
	unsigned int op, bucket;
	int len = 0;

	for (op = 0; op < NVPEER_OP_COUNT; op++) {
		for (bucket = 0; bucket < NVPEER_ERRNO_BUCKETS; bucket++) {
			u64 n = nvpeer_failure_count(op, bucket);
			int err = nvpeer_failure_bucket_errno(bucket);

			if (!n)
				continue;
			if (err)
				len += sysfs_emit_at(buf, len, "%s %d %llu\n", op_names[op], err, n);
			else
				len += sysfs_emit_at(buf, len, "%s other %llu\n", op_names[op], n);
		}
	}
	return len;
}
static struct kobj_attribute failures_attr = __ATTR_RO(failures);

static struct attribute *top_attrs[] = {
	&implementation_attr.attr,
	&foundation_attr.attr,
	&core_attr.attr,
	&failures_attr.attr,
	NULL,
};
static const struct attribute_group top_group = {
	.attrs = top_attrs,
};

static const struct attribute_group *nvpeer_groups[] = {
	&top_group,
	&stats_group,
	NULL,
};

static struct kobject *nvpeer_kobj;

int nvpeer_glue_sysfs_init(const char *core_id)
{
	unsigned int i;
	int ret;

	nvpeer_core_id = core_id;
	for (i = 0; i < NVPEER_STAT_COUNT; i++) {
		/* Filled at run time: gives kernfs a lockdep key for the files' active references. */
		sysfs_attr_init(&stat_attrs[i].attr.attr);
		stat_attrs[i].attr.attr.name = stat_names[i];
		stat_attrs[i].attr.attr.mode = 0444;
		stat_attrs[i].attr.show = stat_show;
		stat_attrs[i].stat = i;
		stat_attr_ptrs[i] = &stat_attrs[i].attr.attr;
	}
	nvpeer_kobj = kobject_create_and_add("nvpeer", &THIS_MODULE->mkobj.kobj);
	if (!nvpeer_kobj)
		return -ENOMEM;
	ret = sysfs_create_groups(nvpeer_kobj, nvpeer_groups);
	if (ret) {
		kobject_put(nvpeer_kobj);
		nvpeer_kobj = NULL;
	}
	return ret;
}

void nvpeer_glue_sysfs_exit(void)
{
	if (!nvpeer_kobj)
		return;
	sysfs_remove_groups(nvpeer_kobj, nvpeer_groups);
	kobject_put(nvpeer_kobj);
	nvpeer_kobj = NULL;
}

/* ---------------------------------------------------------------- records (issue 37) */

void nvpeer_glue_record_init(struct nvpeer_record *rec, uint64_t va, uint64_t bytes)
{
	rec->tgid = get_pid(task_tgid(current));
#ifdef CONFIG_CGROUPS
	/*
	 * A reference, not the path: the path is read by the reader (kernfs), never here. RCU
	 * keeps the css_set we load, not a reference on its cgroup, and css_get() requires one
	 * held already: the reference is tried, and on a cgroup whose count reached zero the
	 * css_set is loaded again (the task has moved on), as cgroup_sk_alloc() and task_get_css()
	 * do (REVIEW-KMOD-3 T4-2). kmod/README.md ("Who holds pinned GPU memory") says why no
	 * interleaving we could plant makes the try fail.
	 */
	rcu_read_lock();
	for (;;) {
		struct cgroup *cgrp = task_dfl_cgroup(current);

		if (likely(cgroup_tryget(cgrp))) {
			rec->cgroup = cgrp;
			break;
		}
		cpu_relax();
	}
	rcu_read_unlock();
#else
	rec->cgroup = NULL;
#endif
	/*
	 * The process's name (its group leader's), not the registering thread's: a record names a
	 * process. Under RCU, as an exec by another thread may make it the leader meanwhile (the
	 * old leader's task_struct is freed after a grace period).
	 */
	rcu_read_lock();
	get_task_comm(rec->comm, READ_ONCE(current->group_leader));
	rcu_read_unlock();
	rec->va = va;
	rec->bytes = bytes;
	rec->since = get_jiffies_64();
}

void nvpeer_glue_record_fini(struct nvpeer_record *rec)
{
	put_pid(rec->tgid);
	rec->tgid = NULL;
#ifdef CONFIG_CGROUPS
	if (rec->cgroup)
		cgroup_put(rec->cgroup);
#endif
	rec->cgroup = NULL;
}

void nvpeer_glue_record_copy(struct nvpeer_record *dst, const struct nvpeer_record *src)
{
	*dst = *src;
	get_pid(dst->tgid);
#ifdef CONFIG_CGROUPS
	if (dst->cgroup)
		cgroup_get(dst->cgroup);
#endif
}

void nvpeer_glue_pci_name(const struct pci_dev *pdev, char *buf, unsigned int len)
{
	strscpy(buf, pci_name(pdev), len);
}

/* ---------------------------------------------------------------- per-GPU totals (issue 37) */

/*
 * One entry per GPU pinned since load, by NVIDIA's UUID; kept until unload (a fixed table: no
 * allocation when a pin finds its GPU, which it does under a shard lock). Entries below
 * nvpeer_gpu_count have their UUID set for good (published with release, read with acquire);
 * nvpeer_gpus_lock only serialises adding one. The totals are summed when read.
 */
struct nvpeer_gpu {
	u8 uuid[NVIDIA_P2P_GPU_UUID_LEN];
	/* Its directory, set once by nvpeer_glue_gpu_publish under nvpeer_gpus_dir_lock. */
	struct kobject *kobj;
};

static struct nvpeer_gpu nvpeer_gpus[NVPEER_MAX_GPUS];
static unsigned int nvpeer_gpu_count;
static DEFINE_SPINLOCK(nvpeer_gpus_lock);
/* Serialises the directories' creation and removal; nvpeer_gpus_kobj is set under it. */
static DEFINE_MUTEX(nvpeer_gpus_dir_lock);
/* nvpeer/gpus/, between nvpeer_glue_records_init and _exit. */
static struct kobject *nvpeer_gpus_kobj;

/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi writes it. */
#define NVPEER_GPU_NAME_LEN (4 + 36 + 1)
#define NVPEER_GPU_FMT "GPU-%4phN-%2phN-%2phN-%2phN-%6phN"
#define NVPEER_GPU_ARGS(u) (u), (u) + 4, (u) + 6, (u) + 8, (u) + 10

int nvpeer_glue_gpu_find(const uint8_t *uuid, bool *added)
{
	unsigned int i, n = smp_load_acquire(&nvpeer_gpu_count);

	*added = false;
	for (i = 0; i < n; i++)
		if (!memcmp(nvpeer_gpus[i].uuid, uuid, NVIDIA_P2P_GPU_UUID_LEN))
			return i;
	spin_lock(&nvpeer_gpus_lock);
	n = nvpeer_gpu_count;
	for (; i < n; i++) {
		if (!memcmp(nvpeer_gpus[i].uuid, uuid, NVIDIA_P2P_GPU_UUID_LEN)) {
			spin_unlock(&nvpeer_gpus_lock);
			return i;
		}
	}
	if (n == NVPEER_MAX_GPUS) {
		spin_unlock(&nvpeer_gpus_lock);
		return -1;
	}
	memcpy(nvpeer_gpus[n].uuid, uuid, NVIDIA_P2P_GPU_UUID_LEN);
	smp_store_release(&nvpeer_gpu_count, n + 1);
	spin_unlock(&nvpeer_gpus_lock);
	*added = true;
	return n;
}

static struct nvpeer_gpu *gpu_of(struct kobject *kobj)
{
	unsigned int i, n = smp_load_acquire(&nvpeer_gpu_count);

	for (i = 0; i < n; i++)
		if (READ_ONCE(nvpeer_gpus[i].kobj) == kobj)
			return &nvpeer_gpus[i];
	return NULL;
}

/* A GPU's files: summed over the registrations when read (their removal waits for readers). */
#define NVPEER_GPU_ATTR(field)								\
static ssize_t gpu_##field##_show(struct kobject *kobj, struct kobj_attribute *attr,	\
				  char *buf)						\
{											\
	struct nvpeer_gpu *g = gpu_of(kobj);						\
	struct nvpeer_gpu_totals totals;						\
											\
	if (!g)										\
		return -ENODEV;								\
	nvpeer_gpu_totals(g->uuid, &totals);						\
	return sysfs_emit(buf, "%llu\n", (unsigned long long)totals.field);		\
}											\
static struct kobj_attribute gpu_##field##_attr = __ATTR(field, 0444, gpu_##field##_show, NULL)

NVPEER_GPU_ATTR(pinned_bytes);
NVPEER_GPU_ATTR(pins);
NVPEER_GPU_ATTR(registrations);

static struct attribute *gpu_attrs[] = {
	&gpu_pinned_bytes_attr.attr,
	&gpu_pins_attr.attr,
	&gpu_registrations_attr.attr,
	NULL,
};
static const struct attribute_group gpu_group = {
	.attrs = gpu_attrs,
};

void nvpeer_glue_gpu_publish(int gpu)
{
	struct nvpeer_gpu *g;
	struct kobject *kobj;
	char name[NVPEER_GPU_NAME_LEN];

	if (gpu < 0 || gpu >= NVPEER_MAX_GPUS)
		return;
	g = &nvpeer_gpus[gpu];
	snprintf(name, sizeof(name), NVPEER_GPU_FMT, NVPEER_GPU_ARGS(g->uuid));
	mutex_lock(&nvpeer_gpus_dir_lock);
	if (g->kobj || !nvpeer_gpus_kobj)
		goto out;
	kobj = kobject_create_and_add(name, nvpeer_gpus_kobj);
	if (!kobj)
		goto fail;
	/* Before its files exist: their show finds the GPU by it. */
	WRITE_ONCE(g->kobj, kobj);
	if (sysfs_create_group(kobj, &gpu_group)) {
		WRITE_ONCE(g->kobj, NULL);
		kobject_put(kobj);
		goto fail;
	}
	goto out;
fail:
	pr_warn_ratelimited("cannot create nvpeer/gpus/%s: its totals are not shown\n", name);
out:
	mutex_unlock(&nvpeer_gpus_dir_lock);
}

/* ---------------------------------------------------------------- the records file */

static struct dentry *nvpeer_debugfs;
/* Hashes the pins' addresses into the `pin` column (an address is never shown, even to root). */
static siphash_key_t nvpeer_pin_key;

/* The view of the registration a read is at, with references of its own; *pos encodes where. */
struct nvpeer_records_iter {
	struct nvpeer_record_view view;
	bool held;	/* view.rec holds references */
	char path[PATH_MAX];
};

/* *pos: 0 the header, else ((shard + 1) << 56) | id: the first registration at or after it. */
#define RECORDS_SHARD_SHIFT 56
#define RECORDS_ID_MASK ((1ULL << RECORDS_SHARD_SHIFT) - 1)

static void iter_put(struct nvpeer_records_iter *it)
{
	if (it->held)
		nvpeer_glue_record_fini(&it->view.rec);
	it->held = false;
}

static void *records_at(struct seq_file *m, loff_t *pos)
{
	struct nvpeer_records_iter *it = m->private;
	struct nvpeer_records_cursor cursor = {
		.shard = ((u64)*pos >> RECORDS_SHARD_SHIFT) - 1,
		.id = (u64)*pos & RECORDS_ID_MASK,
	};

	iter_put(it);
	memset(&it->view, 0, sizeof(it->view));
	if (!nvpeer_records_next(&cursor, &it->view))
		return NULL;
	it->held = true;
	/* Ids stay below 2^56 (a registration a nanosecond for two years). */
	*pos = ((loff_t)(cursor.shard + 1) << RECORDS_SHARD_SHIFT) | (cursor.id & RECORDS_ID_MASK);
	return it;
}

static void *records_start(struct seq_file *m, loff_t *pos)
{
	return *pos ? records_at(m, pos) : SEQ_START_TOKEN;
}

static void *records_next(struct seq_file *m, void *v, loff_t *pos)
{
	if (v == SEQ_START_TOKEN)
		*pos = 1ULL << RECORDS_SHARD_SHIFT;
	else
		*pos += 1;
	return records_at(m, pos);
}

static void records_stop(struct seq_file *m, void *v)
{
	iter_put(m->private);
}

/* Every byte outside 0x21..0x7e, and '\\', as \ooo (as /proc/mounts); a lone "-" as \055. */
static void put_escaped(struct seq_file *m, const char *s)
{
	if (!*s || !strcmp(s, "-")) {
		seq_puts(m, *s ? "\\055" : "\\000");
		return;
	}
	for (; *s; s++) {
		unsigned char c = *s;

		if (c < 0x21 || c > 0x7e || c == '\\')
			seq_printf(m, "\\%03o", c);
		else
			seq_putc(m, c);
	}
}

static int records_show(struct seq_file *m, void *v)
{
	struct nvpeer_records_iter *it = m->private;
	struct nvpeer_record_view *view = &it->view;
	struct nvpeer_record *rec = &view->rec;
	bool hidden = false;
	pid_t tgid = 0;

	if (v == SEQ_START_TOKEN) {
		seq_puts(m, "# id tgid comm cgroup gpu va bytes client nic state age_ms pin pin_bytes shares\n");
		return 0;
	}
	/*
	 * In the reader's pid namespace; none when it exited or is not visible there. A process
	 * invisible to the reader (another pid namespace's, not a descendant's), running or not,
	 * shows no more than that it exists: no name, range, GPU or NIC (REVIEW-KMOD-3 T4-7).
	 */
	rcu_read_lock();
	tgid = pid_nr_ns(rec->tgid, task_active_pid_ns(current));
	hidden = !tgid;
	if (!pid_has_task(rec->tgid, PIDTYPE_TGID))
		tgid = 0;
	rcu_read_unlock();
	seq_printf(m, "%llu ", view->id);
	if (tgid)
		seq_printf(m, "%d ", tgid);
	else
		seq_puts(m, "- ");
	rec->comm[sizeof(rec->comm) - 1] = 0;
	if (hidden)
		seq_putc(m, '-');
	else
		put_escaped(m, rec->comm);
	seq_putc(m, ' ');
#ifdef CONFIG_CGROUPS
	/* Relative to the reader's cgroup namespace, as /proc/<pid>/cgroup shows it. */
	if (!rec->cgroup ||
	    cgroup_path_ns(rec->cgroup, it->path, sizeof(it->path), current->nsproxy->cgroup_ns) < 0)
		strscpy(it->path, "?", sizeof(it->path));
#else
	strscpy(it->path, "/", sizeof(it->path));
#endif
	put_escaped(m, it->path);
	if (view->has_gpu && !hidden)
		seq_printf(m, " " NVPEER_GPU_FMT, NVPEER_GPU_ARGS(view->gpu));
	else
		seq_puts(m, " -");
	if (hidden)
		seq_printf(m, " - %llu ", rec->bytes);
	else
		seq_printf(m, " 0x%llx %llu ", rec->va, rec->bytes);
	put_escaped(m, view->client);
	seq_putc(m, ' ');
	view->nic[sizeof(view->nic) - 1] = 0;
	if (view->nic[0] && !hidden)
		put_escaped(m, view->nic);
	else
		seq_putc(m, '-');
	seq_printf(m, " %s %llu", view->state,
		   (unsigned long long)jiffies64_to_msecs(get_jiffies_64() - rec->since));
	if (view->pin)
		seq_printf(m, " %llu %llu %u\n",
			   (unsigned long long)siphash_1u64((u64)(unsigned long)view->pin, &nvpeer_pin_key),
			   view->pin_bytes, view->shares);
	else
		seq_puts(m, " - - -\n");
	return 0;
}

static const struct seq_operations records_seq_ops = {
	.start = records_start,
	.next = records_next,
	.stop = records_stop,
	.show = records_show,
};

static int records_open(struct inode *inode, struct file *file)
{
	return seq_open_private(file, &records_seq_ops, sizeof(struct nvpeer_records_iter));
}

static const struct file_operations records_fops = {
	.owner = THIS_MODULE,
	.open = records_open,
	.read = seq_read,
	.llseek = seq_lseek,
	.release = seq_release_private,
};

int nvpeer_glue_records_init(void)
{
	struct dentry *dir;
	struct kobject *gpus;

	if (!nvpeer_kobj)
		return -ENOENT;
	get_random_bytes(&nvpeer_pin_key, sizeof(nvpeer_pin_key));
	gpus = kobject_create_and_add("gpus", nvpeer_kobj);
	if (!gpus)
		return -ENOMEM;
	mutex_lock(&nvpeer_gpus_dir_lock);
	nvpeer_gpus_kobj = gpus;
	mutex_unlock(&nvpeer_gpus_dir_lock);
	/* Without debugfs the module works as before; `nvpeer who` says why it has no records. */
	if (!debugfs_initialized())
		return 0;
	dir = debugfs_create_dir(KBUILD_MODNAME, NULL);
	if (IS_ERR(dir)) {
		pr_warn("cannot create /sys/kernel/debug/%s (%ld): no registration records\n",
			KBUILD_MODNAME, PTR_ERR(dir));
		return 0;
	}
	/* Root only: it names processes and their cgroups. */
	debugfs_create_file("registrations", 0400, dir, NULL, &records_fops);
	nvpeer_debugfs = dir;
	return 0;
}

void nvpeer_glue_records_exit(void)
{
	unsigned int i;
	struct kobject *gpus;

	/* Waits for readers in the file (debugfs' removal drains them). */
	debugfs_remove_recursive(nvpeer_debugfs);
	nvpeer_debugfs = NULL;
	/* Each directory's removal waits for readers in its files. */
	mutex_lock(&nvpeer_gpus_dir_lock);
	for (i = 0; i < NVPEER_MAX_GPUS; i++) {
		struct kobject *kobj = nvpeer_gpus[i].kobj;

		if (!kobj)
			continue;
		sysfs_remove_group(kobj, &gpu_group);
		WRITE_ONCE(nvpeer_gpus[i].kobj, NULL);
		kobject_put(kobj);
	}
	gpus = nvpeer_gpus_kobj;
	nvpeer_gpus_kobj = NULL;
	mutex_unlock(&nvpeer_gpus_dir_lock);
	kobject_put(gpus);
}
