// SPDX-License-Identifier: GPL-2.0
/*
 * What Rust-for-Linux 7.2 cannot express, kept small (the logic is in Rust): modinfo tags that
 * `module!` lacks (version, softdep), parameters visible under /sys/module/<name>/parameters
 * (mode 0444, as NVIDIA's), weak references to the foreign APIs, sysfs attributes, dynamic debug,
 * a rate limit and a few static inline helpers.
 */
#include <linux/dma-mapping.h>
#include <linux/dynamic_debug.h>
#include <linux/kobject.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/pci.h>
#include <linux/pid.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/ratelimit.h>
#include <linux/workqueue.h>
#include <linux/scatterlist.h>
#include <linux/sysfs.h>
#include "nvpeer_glue.h"

MODULE_VERSION(NVPEER_VERSION);
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
 * return after queuing it and unlocking stays uncovered: pin.rs, defer_drop).
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
