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

void *nvpeer_glue_current_tgid(void)
{
	return task_tgid(current);
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

/* The text of every file here is written by Rust (show.rs). */
struct nvpeer_stat_attr {
	struct kobj_attribute attr;
	unsigned int stat;
};

static ssize_t stat_show(struct kobject *kobj, struct kobj_attribute *attr, char *buf)
{
	struct nvpeer_stat_attr *sa = container_of(attr, struct nvpeer_stat_attr, attr);

	return nvpeer_show_stat(sa->stat, buf, PAGE_SIZE);
}

static struct nvpeer_stat_attr stat_attrs[NVPEER_STATS];
static struct attribute *stat_attr_ptrs[NVPEER_STATS + 1];
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
	return nvpeer_show_failures(buf, PAGE_SIZE);
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
	for (i = 0; i < NVPEER_STATS; i++) {
		/* Filled at run time: gives kernfs a lockdep key for the files' active references. */
		sysfs_attr_init(&stat_attrs[i].attr.attr);
		stat_attrs[i].attr.attr.name = nvpeer_stat_name(i);
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

/* The GPUs' directories, by the index of Rust's table (gpus.rs), each set once under the mutex. */
static struct kobject *nvpeer_gpu_kobjs[NVPEER_MAX_GPUS];
/* Serialises the directories' creation and removal; nvpeer_gpus_kobj is set under it. */
static DEFINE_MUTEX(nvpeer_gpus_dir_lock);
/* nvpeer/gpus/, between nvpeer_glue_records_init and _exit. */
static struct kobject *nvpeer_gpus_kobj;

static int gpu_of(struct kobject *kobj)
{
	unsigned int i;

	for (i = 0; i < NVPEER_MAX_GPUS; i++)
		if (READ_ONCE(nvpeer_gpu_kobjs[i]) == kobj)
			return i;
	return -1;
}

/* A GPU's files: summed over the registrations when read (their removal waits for readers). */
#define NVPEER_GPU_ATTR(field, file)							\
static ssize_t gpu_##field##_show(struct kobject *kobj, struct kobj_attribute *attr,	\
				  char *buf)						\
{											\
	int gpu = gpu_of(kobj);								\
											\
	return gpu < 0 ? -ENODEV : nvpeer_show_gpu(gpu, file, buf, PAGE_SIZE);		\
}											\
static struct kobj_attribute gpu_##field##_attr = __ATTR(field, 0444, gpu_##field##_show, NULL)

NVPEER_GPU_ATTR(pinned_bytes, NVPEER_GPU_PINNED_BYTES);
NVPEER_GPU_ATTR(pins, NVPEER_GPU_PINS);
NVPEER_GPU_ATTR(registrations, NVPEER_GPU_REGISTRATIONS);

static struct attribute *gpu_attrs[] = {
	&gpu_pinned_bytes_attr.attr,
	&gpu_pins_attr.attr,
	&gpu_registrations_attr.attr,
	NULL,
};
static const struct attribute_group gpu_group = {
	.attrs = gpu_attrs,
};

void nvpeer_glue_gpu_publish(unsigned int gpu, const char *name)
{
	struct kobject *kobj;

	if (gpu >= NVPEER_MAX_GPUS)
		return;
	mutex_lock(&nvpeer_gpus_dir_lock);
	if (nvpeer_gpu_kobjs[gpu] || !nvpeer_gpus_kobj)
		goto out;
	kobj = kobject_create_and_add(name, nvpeer_gpus_kobj);
	if (!kobj)
		goto fail;
	/* Before its files exist: their show finds the GPU by it. */
	WRITE_ONCE(nvpeer_gpu_kobjs[gpu], kobj);
	if (sysfs_create_group(kobj, &gpu_group)) {
		WRITE_ONCE(nvpeer_gpu_kobjs[gpu], NULL);
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

/* The view of the registration a read is at, with references of its own (records.rs). */
struct nvpeer_records_iter {
	struct nvpeer_record_view view;
	bool held;	/* view.rec holds references */
	char path[PATH_MAX];
};

static void iter_put(struct nvpeer_records_iter *it)
{
	if (it->held)
		nvpeer_glue_record_fini(&it->view.rec);
	it->held = false;
}

static void *records_at(struct seq_file *m, loff_t *pos)
{
	struct nvpeer_records_iter *it = m->private;

	iter_put(it);
	memset(&it->view, 0, sizeof(it->view));
	if (!nvpeer_records_at(pos, &it->view))
		return NULL;
	it->held = true;
	return it;
}

static void *records_start(struct seq_file *m, loff_t *pos)
{
	return *pos ? records_at(m, pos) : SEQ_START_TOKEN;
}

static void *records_next(struct seq_file *m, void *v, loff_t *pos)
{
	++*pos;
	return records_at(m, pos);
}

static void records_stop(struct seq_file *m, void *v)
{
	iter_put(m->private);
}

static int records_show(struct seq_file *m, void *v)
{
	struct nvpeer_records_iter *it = m->private;

	nvpeer_show_record(m, v == SEQ_START_TOKEN ? NULL : &it->view, it->path, sizeof(it->path));
	return 0;
}

void nvpeer_glue_seq_write(void *m, const char *s, size_t len)
{
	seq_write(m, s, len);
}

int nvpeer_glue_reader_tgid(struct pid *pid, bool *visible)
{
	pid_t nr;

	rcu_read_lock();
	nr = pid_nr_ns(pid, task_active_pid_ns(current));
	*visible = nr != 0;
	if (!pid_has_task(pid, PIDTYPE_TGID))
		nr = 0;
	rcu_read_unlock();
	return nr;
}

bool nvpeer_glue_reader_cgroup_path(struct cgroup *cgroup, char *buf, size_t size)
{
#ifdef CONFIG_CGROUPS
	return cgroup && cgroup_path_ns(cgroup, buf, size, current->nsproxy->cgroup_ns) >= 0;
#else
	return strscpy(buf, "/", size) > 0;
#endif
}

uint64_t nvpeer_glue_age_ms(uint64_t since)
{
	return jiffies64_to_msecs(get_jiffies_64() - since);
}

uint64_t nvpeer_glue_pin_hash(const void *pin)
{
	return siphash_1u64((u64)(unsigned long)pin, &nvpeer_pin_key);
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
		struct kobject *kobj = nvpeer_gpu_kobjs[i];

		if (!kobj)
			continue;
		sysfs_remove_group(kobj, &gpu_group);
		WRITE_ONCE(nvpeer_gpu_kobjs[i], NULL);
		kobject_put(kobj);
	}
	gpus = nvpeer_gpus_kobj;
	nvpeer_gpus_kobj = NULL;
	mutex_unlock(&nvpeer_gpus_dir_lock);
	kobject_put(gpus);
}
