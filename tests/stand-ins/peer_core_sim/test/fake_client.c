// SPDX-License-Identifier: GPL-2.0
/*
 * fake_client: a test-only peer-memory client, to prove peer_core_sim's own behaviour before
 * (and independently of) the real client. It registers up to four clients with
 * ib_register_peer_memory_client and implements the seven callbacks correctly over its own
 * "GPU memory": /dev/fake_peer_mem, whose mmap gives a 64 KiB aligned VM_IO | VM_PFNMAP mapping
 * of 64 KiB physically contiguous chunks. pin_user_pages cannot pin it (as a cudaMalloc VA), so
 * a 5.x core consults the peer clients for it; anonymous or memfd memory would never reach a
 * 5.x client at all, which is why the client brings its own memory rather than owning host
 * ranges.
 *
 * Every client owns every fake mapping (acquire returns acquire_ret, default 1, for ranges
 * inside one and 0 elsewhere), uses its page_size (default 64 KiB) as the SG entry size and
 * hands out one DMA-mapped entry per page. Module parameters (arrays, one value per client):
 *   name=a,b          client names (none: only /dev/fake_peer_mem)
 *   invalidating=1,0  ask for the invalidate callback
 *   unmaps=0|1|2|3    0 plain struct; 1 _ex with PEER_MEM_INVALIDATE_UNMAPS; 2 _ex, flags 0;
 *                     3 version marker with ex_size 0 and flags UNMAPS (too small: old-style)
 *   legacy=0|1        1: get_context_private_data set (a 4.1-5.0 legacy-API client)
 *   missing=OP        leave that op NULL in every client (registration must fail)
 *   modref=1          hold a module reference per acquired context (as nv_peer_mem does)
 * /sys/kernel/debug/fake_client/<name>/: log (every call, "fn key=value ... inv=0|1", inv=1 for
 * calls made inside an invalidate call this client made; write to clear), invalidate (write a
 * core_context: calls the core's invalidate function; UNMAPS clients then unmap and unpin
 * themselves), acquire_ret, fail_get_pages / fail_dma_map (positive errno, sticky), gate
 * (bit 0: dma_map, bit 1: dma_unmap waits while the bit is set; each logs "gate" first),
 * page_size, quirk (1: hand out a non-RAM "BAR" address as the DMA address; 2: dma_map reports
 * nmap 0), live (contexts not yet released).
 *
 * Lock order: fc->lock is innermost (state and log); never held across a call into the core.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/debugfs.h>
#include <linux/delay.h>
#include <linux/dma-mapping.h>
#include <linux/miscdevice.h>
#include <linux/mman.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <linux/sizes.h>
#include <linux/vmalloc.h>
#include <rdma/peer_mem.h>
#include "../../include/sim_compat.h"

#define FAKE_MAX_CLIENTS 4
#define FAKE_CHUNK SZ_64K			/* a "GPU page", physically contiguous */
#define FAKE_CHUNK_ORDER get_order(FAKE_CHUNK)
#define FAKE_LOG_SIZE SZ_256K
#define FAKE_BAR_BASE 0x7f0000000000ULL	/* far above the VM's RAM */

static char *name[FAKE_MAX_CLIENTS];
static int nr_clients;
module_param_array(name, charp, &nr_clients, 0444);
MODULE_PARM_DESC(name, "client names, in registration order");
static int invalidating[FAKE_MAX_CLIENTS];
module_param_array(invalidating, int, NULL, 0444);
MODULE_PARM_DESC(invalidating, "per client: 1 = register with an invalidate callback");
static int unmaps[FAKE_MAX_CLIENTS];
module_param_array(unmaps, int, NULL, 0444);
MODULE_PARM_DESC(unmaps, "per client: 0 plain, 1 _ex+UNMAPS, 2 _ex flags 0, 3 marker, ex_size 0");
static int legacy[FAKE_MAX_CLIENTS];
module_param_array(legacy, int, NULL, 0444);
MODULE_PARM_DESC(legacy, "per client: 1 = get_context_private_data set");
static char *missing = "";
module_param(missing, charp, 0444);
MODULE_PARM_DESC(missing, "op left NULL in every client");
static bool modref;
module_param(modref, bool, 0444);
MODULE_PARM_DESC(modref, "hold a module reference per acquired context");

/* The backing of one mapping of /dev/fake_peer_mem. */
struct fake_buf {
	struct kref ref;
	unsigned int nchunks;
	struct page *chunks[];
};

struct fake_client;

struct fake_ctx {
	struct kref ref;
	struct fake_client *fc;
	struct list_head node;		/* fc->ctxs */
	unsigned int id;
	struct fake_buf *buf;
	unsigned long buf_va;		/* VA of the mapping's first byte */
	unsigned long addr;
	size_t size;
	unsigned long page_size;
	u64 core_context;
	bool pinned, mapped, bar;
	struct device *dma_dev;
	struct sg_table sgt;		/* our copy: the core forgets its own */
	unsigned int nents;
	dma_addr_t first_dma;
};

/* A task inside this client's invalidate call (log inv=1). */
struct fake_trigger {
	struct list_head node;
	struct task_struct *task;
};

struct fake_client {
	int index;
	const char *name;
	union {
		struct peer_memory_client_ex ex;
		struct peer_memory_client_legacy legacy;
	} ops;
	int form;			/* unmaps= */
	invalidate_peer_memory invalidate;
	void *handle;
	struct mutex lock;		/* ctxs, triggers, log */
	struct list_head ctxs;
	struct list_head triggers;
	unsigned int next_ctx;
	char *log;
	size_t log_len;
	struct dentry *dir;
	s32 acquire_ret;
	u32 fail_get_pages, fail_dma_map, gate, quirk;
	unsigned long page_size;
	atomic_t live;
};

enum { FAKE_QUIRK_BAR = 1, FAKE_QUIRK_NMAP0 = 2 };
enum { FAKE_GATE_DMA_MAP = 1, FAKE_GATE_DMA_UNMAP = 2 };

static struct fake_client fake_clients[FAKE_MAX_CLIENTS];
static struct dentry *fake_debugfs;
static const struct vm_operations_struct fake_vm_ops;

/* ------------------------------------------------------------------ log */

static bool fake_in_invalidate(struct fake_client *fc)
{
	struct fake_trigger *t;

	list_for_each_entry(t, &fc->triggers, node)
		if (t->task == current)
			return true;
	return false;
}

static __printf(2, 3) void fake_log(struct fake_client *fc, const char *fmt, ...)
{
	char line[256];
	va_list ap;

	va_start(ap, fmt);
	vscnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	mutex_lock(&fc->lock);
	if (fc->log_len + sizeof(line) + 8 < FAKE_LOG_SIZE)
		fc->log_len += scnprintf(fc->log + fc->log_len, FAKE_LOG_SIZE - fc->log_len,
					 "%s inv=%d\n", line, fake_in_invalidate(fc));
	mutex_unlock(&fc->lock);
}

/* ------------------------------------------------------------------ "GPU memory" */

static void fake_buf_free(struct kref *ref)
{
	struct fake_buf *buf = container_of(ref, struct fake_buf, ref);
	unsigned int i;

	for (i = 0; i < buf->nchunks; i++)
		if (buf->chunks[i])
			__free_pages(buf->chunks[i], FAKE_CHUNK_ORDER);
	kvfree(buf);
}

static void fake_buf_put(struct fake_buf *buf)
{
	kref_put(&buf->ref, fake_buf_free);
}

static struct fake_buf *fake_buf_alloc(unsigned long size)
{
	unsigned int i, n = size / FAKE_CHUNK;
	struct fake_buf *buf = kvzalloc(struct_size(buf, chunks, n), GFP_KERNEL);

	if (!buf)
		return NULL;
	kref_init(&buf->ref);
	buf->nchunks = n;
	for (i = 0; i < n; i++) {
		buf->chunks[i] = alloc_pages(GFP_KERNEL | __GFP_ZERO, FAKE_CHUNK_ORDER);
		if (!buf->chunks[i]) {
			fake_buf_put(buf);
			return NULL;
		}
	}
	return buf;
}

static void fake_vm_open(struct vm_area_struct *vma)
{
	struct fake_buf *buf = vma->vm_private_data;

	kref_get(&buf->ref);
}

static void fake_vm_close(struct vm_area_struct *vma)
{
	fake_buf_put(vma->vm_private_data);
}

/* One mapping, one buffer: no partial munmap. */
static int fake_vm_may_split(struct vm_area_struct *vma, unsigned long addr)
{
	return -EINVAL;
}

static const struct vm_operations_struct fake_vm_ops = {
	.open = fake_vm_open,
	.close = fake_vm_close,
	.may_split = fake_vm_may_split,
};

static int fake_mem_mmap(struct file *f, struct vm_area_struct *vma)
{
	unsigned long size = vma->vm_end - vma->vm_start;
	struct fake_buf *buf;
	unsigned int i;
	int ret;

	if (vma->vm_pgoff || !IS_ALIGNED(size, FAKE_CHUNK) ||
	    !IS_ALIGNED(vma->vm_start, FAKE_CHUNK))
		return -EINVAL;
	buf = fake_buf_alloc(size);
	if (!buf)
		return -ENOMEM;
	vm_flags_set(vma, VM_DONTCOPY);
	for (i = 0; i < buf->nchunks; i++) {
		ret = remap_pfn_range(vma, vma->vm_start + i * FAKE_CHUNK,
				      page_to_pfn(buf->chunks[i]), FAKE_CHUNK, vma->vm_page_prot);
		if (ret) {
			fake_buf_put(buf);
			return ret;
		}
	}
	vma->vm_private_data = buf;
	vma->vm_ops = &fake_vm_ops;
	return 0;
}

/* GPU pages are 64 KiB: so are the mappings' alignment. */
static unsigned long fake_mem_get_unmapped_area(struct file *f, unsigned long addr,
						unsigned long len, unsigned long pgoff,
						unsigned long flags)
{
	unsigned long va;

	if (flags & MAP_FIXED)
		return SIM_GET_UNMAPPED_AREA(NULL, addr, len, pgoff, flags);
	if (len > TASK_SIZE - FAKE_CHUNK)
		return -ENOMEM;
	va = SIM_GET_UNMAPPED_AREA(NULL, 0, len + FAKE_CHUNK, 0, flags);
	if (IS_ERR_VALUE(va))
		return va;
	return ALIGN(va, FAKE_CHUNK);
}

static const struct file_operations fake_mem_fops = {
	.owner = THIS_MODULE,
	.mmap = fake_mem_mmap,
	.get_unmapped_area = fake_mem_get_unmapped_area,
};

static struct miscdevice fake_mem_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "fake_peer_mem",
	.fops = &fake_mem_fops,
	.mode = 0600,
};

/* ------------------------------------------------------------------ contexts */

static void fake_ctx_free(struct kref *ref)
{
	struct fake_ctx *ctx = container_of(ref, struct fake_ctx, ref);

	fake_buf_put(ctx->buf);
	kfree(ctx);
}

static void fake_ctx_put(struct fake_ctx *ctx)
{
	kref_put(&ctx->ref, fake_ctx_free);
}

/* Undo dma_map (idempotent: invalidation and the core may both ask). Under fc->lock. */
static void fake_unmap_locked(struct fake_ctx *ctx)
{
	struct scatterlist *sg;
	unsigned int i;

	if (!ctx->mapped)
		return;
	if (!ctx->bar)
		for_each_sg(ctx->sgt.sgl, sg, ctx->nents, i)
			dma_unmap_page(ctx->dma_dev, sg_dma_address(sg), ctx->page_size,
				       DMA_BIDIRECTIONAL);
	ctx->mapped = false;
}

/* Undo get_pages: the table dma_map allocated goes too ("sg_head must be freed"). */
static void fake_unpin_locked(struct fake_ctx *ctx)
{
	fake_unmap_locked(ctx);
	if (ctx->sgt.sgl)
		sg_free_table(&ctx->sgt);
	memset(&ctx->sgt, 0, sizeof(ctx->sgt));
	ctx->pinned = false;
}

static int fake_acquire(struct fake_client *fc, unsigned long addr, size_t size,
			void *priv, char *peer_name, void **client_context)
{
	struct fake_buf *buf = NULL;
	struct vm_area_struct *vma;
	struct fake_ctx *ctx = NULL;
	unsigned long buf_va = 0;
	int ret = 0;

	if (current->mm) {
		mmap_read_lock(current->mm);
		vma = vma_lookup(current->mm, addr);
		if (vma && vma->vm_ops == &fake_vm_ops && size <= vma->vm_end - addr) {
			buf = vma->vm_private_data;
			kref_get(&buf->ref);
			buf_va = vma->vm_start;
		}
		mmap_read_unlock(current->mm);
	}
	if (buf)
		ret = READ_ONCE(fc->acquire_ret);
	if (ret > 0) {
		ctx = kzalloc(sizeof(*ctx), GFP_KERNEL);
		if (!ctx)
			ret = 0;
	}
	if (ret > 0 && modref && !try_module_get(THIS_MODULE))
		ret = 0;
	if (ret > 0) {
		kref_init(&ctx->ref);
		ctx->fc = fc;
		ctx->buf = buf;
		ctx->buf_va = buf_va;
		ctx->addr = addr;
		ctx->size = size;
		ctx->page_size = READ_ONCE(fc->page_size);
		mutex_lock(&fc->lock);
		ctx->id = ++fc->next_ctx;
		list_add_tail(&ctx->node, &fc->ctxs);
		mutex_unlock(&fc->lock);
		atomic_inc(&fc->live);
		*client_context = ctx;
	} else {
		kfree(ctx);
		if (buf)
			fake_buf_put(buf);
	}
	fake_log(fc, "acquire addr=0x%lx size=%zu priv=%d name=%d ret=%d ctx=%u", addr, size,
		 !!priv, !!peer_name, ret, ret > 0 ? ctx->id : 0);
	return ret;
}

#define FAKE_ACQUIRE(n)								\
static int fake_acquire_##n(unsigned long addr, size_t size, void *priv,	\
			    char *peer_name, void **client_context)		\
{										\
	return fake_acquire(&fake_clients[n], addr, size, priv, peer_name,	\
			    client_context);					\
}
FAKE_ACQUIRE(0)
FAKE_ACQUIRE(1)
FAKE_ACQUIRE(2)
FAKE_ACQUIRE(3)
static int (*const fake_acquire_fns[FAKE_MAX_CLIENTS])(unsigned long, size_t, void *, char *,
							 void **) = {
	fake_acquire_0, fake_acquire_1, fake_acquire_2, fake_acquire_3,
};

static int fake_get_pages(unsigned long addr, size_t size, int write, int force,
			  struct sg_table *sg_head, void *client_context, u64 core_context)
{
	struct fake_ctx *ctx = client_context;
	struct fake_client *fc = ctx->fc;
	int err = READ_ONCE(fc->fail_get_pages);

	fake_log(fc, "get_pages ctx=%u addr=0x%lx size=%zu write=%d force=%d sg_head=%s core_context=%llu ret=%d",
		 ctx->id, addr, size, write, force, sg_head ? "set" : "null", core_context, -err);
	if (err)
		return -err;
	mutex_lock(&fc->lock);
	ctx->core_context = core_context;
	ctx->pinned = true;
	mutex_unlock(&fc->lock);
	return 0;
}

/* The DMA address of the entry at byte offset off of the buffer. */
static int fake_map_entry(struct fake_ctx *ctx, struct scatterlist *sg, unsigned long off,
			  struct device *dev)
{
	struct page *page = ctx->buf->chunks[off / FAKE_CHUNK] +
			    ((off % FAKE_CHUNK) >> PAGE_SHIFT);
	dma_addr_t dma;

	if (ctx->bar) {
		dma = FAKE_BAR_BASE + off;
	} else {
		dma = dma_map_page(dev, page, 0, ctx->page_size, DMA_BIDIRECTIONAL);
		if (dma_mapping_error(dev, dma))
			return -ENOMEM;
	}
	sg_dma_address(sg) = dma;
	sg_dma_len(sg) = ctx->page_size;
	sg->length = ctx->page_size;
	return 0;
}

static int fake_fill_table(struct fake_ctx *ctx, struct sg_table *sgt, struct device *dev)
{
	unsigned long ps = ctx->page_size;
	unsigned long first = ALIGN_DOWN(ctx->addr, ps);
	unsigned int i, n = (ALIGN(ctx->addr + ctx->size, ps) - first) / ps;
	struct scatterlist *sg;
	int ret;

	if (!is_power_of_2(ps) || ps < PAGE_SIZE || ps > FAKE_CHUNK)
		return -EINVAL;
	ret = sg_alloc_table(sgt, n, GFP_KERNEL);
	if (ret)
		return ret;
	for_each_sg(sgt->sgl, sg, n, i) {
		ret = fake_map_entry(ctx, sg, first - ctx->buf_va + i * ps, dev);
		if (ret)
			break;
	}
	ctx->sgt = *sgt;
	ctx->nents = i;
	ctx->dma_dev = dev;
	ctx->mapped = true;
	if (ret) {
		/* "On failure sg_head must be left untouched or valid": untouched. */
		fake_unmap_locked(ctx);
		sg_free_table(&ctx->sgt);
		memset(&ctx->sgt, 0, sizeof(ctx->sgt));
		memset(sgt, 0, sizeof(*sgt));
		return ret;
	}
	ctx->first_dma = sg_dma_address(sgt->sgl);
	return 0;
}

/* A test holds the call here (e.g. to invalidate meanwhile). */
static void fake_gate(struct fake_ctx *ctx, u32 bit, const char *fn)
{
	struct fake_client *fc = ctx->fc;

	if (!(READ_ONCE(fc->gate) & bit))
		return;
	fake_log(fc, "gate ctx=%u fn=%s", ctx->id, fn);
	while (READ_ONCE(fc->gate) & bit)
		msleep(20);
}

static int fake_dma_map(struct sg_table *sg_head, void *client_context,
			struct device *dma_device, int dmasync, int *nmap)
{
	struct fake_ctx *ctx = client_context;
	struct fake_client *fc = ctx->fc;
	int ret;

	fake_log(fc, "dma_map ctx=%u dmasync=%d dev=%s", ctx->id, dmasync,
		 dma_device ? dev_name(dma_device) : "none");
	fake_gate(ctx, FAKE_GATE_DMA_MAP, "dma_map");
	ret = -(int)READ_ONCE(fc->fail_dma_map);
	if (ret)
		return ret;
	mutex_lock(&fc->lock);
	ctx->bar = READ_ONCE(fc->quirk) == FAKE_QUIRK_BAR;
	ret = fake_fill_table(ctx, sg_head, dma_device);
	if (!ret)
		*nmap = READ_ONCE(fc->quirk) == FAKE_QUIRK_NMAP0 ? 0 : ctx->nents;
	mutex_unlock(&fc->lock);
	return ret;
}

/* "table" says whether the core gave back the table as dma_map filled it. */
static int fake_dma_unmap(struct sg_table *sg_head, void *client_context,
			  struct device *dma_device)
{
	struct fake_ctx *ctx = client_context;
	struct fake_client *fc = ctx->fc;
	const char *table = "other";
	bool mapped;

	mutex_lock(&fc->lock);
	mapped = ctx->mapped;
	if (sg_head && sg_head->sgl && sg_head->sgl == ctx->sgt.sgl) {
		struct scatterlist *last = sg_last(sg_head->sgl, ctx->nents);

		table = sg_dma_address(sg_head->sgl) == ctx->first_dma &&
			sg_dma_len(sg_head->sgl) == ctx->page_size &&
			sg_dma_len(last) == ctx->page_size ? "ours" : "modified";
	}
	mutex_unlock(&fc->lock);
	fake_log(fc, "dma_unmap ctx=%u mapped=%d table=%s", ctx->id, mapped, table);
	fake_gate(ctx, FAKE_GATE_DMA_UNMAP, "dma_unmap");
	mutex_lock(&fc->lock);
	fake_unmap_locked(ctx);
	mutex_unlock(&fc->lock);
	return 0;
}

static void fake_put_pages(struct sg_table *sg_head, void *client_context)
{
	struct fake_ctx *ctx = client_context;
	struct fake_client *fc = ctx->fc;

	fake_log(fc, "put_pages ctx=%u pinned=%d mapped=%d", ctx->id, ctx->pinned, ctx->mapped);
	mutex_lock(&fc->lock);
	fake_unpin_locked(ctx);
	mutex_unlock(&fc->lock);
}

static unsigned long fake_get_page_size(void *client_context)
{
	struct fake_ctx *ctx = client_context;

	fake_log(ctx->fc, "get_page_size ctx=%u ret=%lu", ctx->id, ctx->page_size);
	return ctx->page_size;
}

static void fake_release(void *client_context)
{
	struct fake_ctx *ctx = client_context;
	struct fake_client *fc = ctx->fc;

	fake_log(fc, "release ctx=%u pinned=%d mapped=%d", ctx->id, ctx->pinned, ctx->mapped);
	mutex_lock(&fc->lock);
	fake_unpin_locked(ctx);
	list_del_init(&ctx->node);
	mutex_unlock(&fc->lock);
	atomic_dec(&fc->live);
	fake_ctx_put(ctx);
	if (modref)
		module_put(THIS_MODULE);
}

static void *fake_get_context_private_data(u64 peer_id)
{
	return NULL;
}

static void fake_put_context_private_data(void *context)
{
}

/* ------------------------------------------------------------------ invalidation */

static struct fake_ctx *fake_find_ctx(struct fake_client *fc, u64 core_context)
{
	struct fake_ctx *ctx;

	mutex_lock(&fc->lock);
	list_for_each_entry(ctx, &fc->ctxs, node) {
		if (ctx->pinned && ctx->core_context == core_context) {
			kref_get(&ctx->ref);
			mutex_unlock(&fc->lock);
			return ctx;
		}
	}
	mutex_unlock(&fc->lock);
	return NULL;
}

/*
 * What NVIDIA's free callback makes a client do: call the core's invalidate function; an
 * UNMAPS client then unmaps and unpins itself (the core no longer does it).
 */
static int fake_invalidate(struct fake_client *fc, u64 core_context)
{
	struct fake_trigger me = { .task = current };
	struct fake_ctx *ctx = fake_find_ctx(fc, core_context);
	int ret;

	mutex_lock(&fc->lock);
	list_add(&me.node, &fc->triggers);
	mutex_unlock(&fc->lock);
	fake_log(fc, "invalidate_begin core_context=%llu ctx=%u", core_context, ctx ? ctx->id : 0);
	ret = fc->invalidate(fc->handle, core_context);
	fake_log(fc, "invalidate_end core_context=%llu ret=%d", core_context, ret);
	if (ctx && fc->form == 1) {
		mutex_lock(&fc->lock);
		if (ctx->pinned) {
			mutex_unlock(&fc->lock);
			fake_log(fc, "self_unmap ctx=%u mapped=%d", ctx->id, ctx->mapped);
			mutex_lock(&fc->lock);
			fake_unpin_locked(ctx);
		}
		mutex_unlock(&fc->lock);
	}
	mutex_lock(&fc->lock);
	list_del(&me.node);
	mutex_unlock(&fc->lock);
	if (ctx)
		fake_ctx_put(ctx);
	return ret;
}

static ssize_t fake_invalidate_write(struct file *f, const char __user *ubuf, size_t len,
				     loff_t *pos)
{
	struct fake_client *fc = f->private_data;
	u64 core_context;
	int ret;

	if (!fc->invalidate)
		return -EOPNOTSUPP;
	ret = kstrtou64_from_user(ubuf, len, 0, &core_context);
	if (ret)
		return ret;
	fake_invalidate(fc, core_context);
	return len;
}

static const struct file_operations fake_invalidate_fops = {
	.owner = THIS_MODULE,
	.open = simple_open,
	.write = fake_invalidate_write,
};

/* ------------------------------------------------------------------ debugfs */

static ssize_t fake_log_read(struct file *f, char __user *ubuf, size_t len, loff_t *pos)
{
	struct fake_client *fc = f->private_data;
	ssize_t ret;
	size_t n;
	char *snap = kvmalloc(FAKE_LOG_SIZE, GFP_KERNEL);

	if (!snap)
		return -ENOMEM;
	mutex_lock(&fc->lock);
	n = fc->log_len;
	memcpy(snap, fc->log, n);
	mutex_unlock(&fc->lock);
	ret = simple_read_from_buffer(ubuf, len, pos, snap, n);
	kvfree(snap);
	return ret;
}

static ssize_t fake_log_write(struct file *f, const char __user *ubuf, size_t len, loff_t *pos)
{
	struct fake_client *fc = f->private_data;

	mutex_lock(&fc->lock);
	fc->log_len = 0;
	mutex_unlock(&fc->lock);
	return len;
}

static const struct file_operations fake_log_fops = {
	.owner = THIS_MODULE,
	.open = simple_open,
	.read = fake_log_read,
	.write = fake_log_write,
};

static int fake_s32_get(void *data, u64 *val)
{
	*val = *(s32 *)data;
	return 0;
}

static int fake_s32_set(void *data, u64 val)
{
	*(s32 *)data = (s32)val;
	return 0;
}
DEFINE_DEBUGFS_ATTRIBUTE_SIGNED(fake_s32_fops, fake_s32_get, fake_s32_set, "%lld\n");

static void fake_debugfs_add(struct fake_client *fc)
{
	struct dentry *d = debugfs_create_dir(fc->name, fake_debugfs);

	fc->dir = d;
	debugfs_create_file("log", 0600, d, fc, &fake_log_fops);
	debugfs_create_file("invalidate", 0200, d, fc, &fake_invalidate_fops);
	debugfs_create_file_unsafe("acquire_ret", 0600, d, &fc->acquire_ret, &fake_s32_fops);
	debugfs_create_u32("fail_get_pages", 0600, d, &fc->fail_get_pages);
	debugfs_create_u32("fail_dma_map", 0600, d, &fc->fail_dma_map);
	debugfs_create_u32("gate", 0600, d, &fc->gate);
	debugfs_create_u32("quirk", 0600, d, &fc->quirk);
	debugfs_create_ulong("page_size", 0600, d, &fc->page_size);
	debugfs_create_atomic_t("live", 0400, d, &fc->live);
}

/* ------------------------------------------------------------------ registration */

static void fake_null_op(struct peer_memory_client *ops, const char *op)
{
	if (!strcmp(op, "acquire"))
		ops->acquire = NULL;
	else if (!strcmp(op, "get_pages"))
		ops->get_pages = NULL;
	else if (!strcmp(op, "dma_map"))
		ops->dma_map = NULL;
	else if (!strcmp(op, "dma_unmap"))
		ops->dma_unmap = NULL;
	else if (!strcmp(op, "put_pages"))
		ops->put_pages = NULL;
	else if (!strcmp(op, "get_page_size"))
		ops->get_page_size = NULL;
	else if (!strcmp(op, "release"))
		ops->release = NULL;
}

static void fake_init_ops(struct fake_client *fc)
{
	struct peer_memory_client *ops = &fc->ops.ex.client;

	strscpy(ops->name, fc->name, sizeof(ops->name));
	strscpy(ops->version, "fake-1.0", sizeof(ops->version));
	ops->acquire = fake_acquire_fns[fc->index];
	ops->get_pages = fake_get_pages;
	ops->dma_map = fake_dma_map;
	ops->dma_unmap = fake_dma_unmap;
	ops->put_pages = fake_put_pages;
	ops->get_page_size = fake_get_page_size;
	ops->release = fake_release;
	fake_null_op(ops, missing);
	if (fc->form) {
		ops->version[IB_PEER_MEMORY_VER_MAX - 1] = 1;
		fc->ops.ex.ex_size = fc->form == 3 ? 0 : sizeof(fc->ops.ex);
		fc->ops.ex.flags = fc->form == 2 ? 0 : PEER_MEM_INVALIDATE_UNMAPS;
	} else if (legacy[fc->index]) {
		fc->ops.legacy.get_context_private_data = fake_get_context_private_data;
		fc->ops.legacy.put_context_private_data = fake_put_context_private_data;
	}
}

/* After unregister no op is called: contexts a client without release() kept go now. */
static void fake_client_free(struct fake_client *fc)
{
	struct fake_ctx *ctx, *next;

	list_for_each_entry_safe(ctx, next, &fc->ctxs, node) {
		fake_unpin_locked(ctx);
		list_del(&ctx->node);
		fake_ctx_put(ctx);
	}
	debugfs_remove_recursive(fc->dir);
	vfree(fc->log);
	mutex_destroy(&fc->lock);
}

static int fake_client_init(struct fake_client *fc, int index)
{
	fc->index = index;
	fc->name = name[index];
	fc->form = unmaps[index];
	if (fc->form < 0 || fc->form > 3 || (fc->form && legacy[index])) {
		pr_err("%s: unmaps=%d legacy=%d is not a client form\n", fc->name, fc->form,
		       legacy[index]);
		return -EINVAL;
	}
	mutex_init(&fc->lock);
	INIT_LIST_HEAD(&fc->ctxs);
	INIT_LIST_HEAD(&fc->triggers);
	fc->acquire_ret = 1;
	fc->page_size = FAKE_CHUNK;
	fc->log = vzalloc(FAKE_LOG_SIZE);
	if (!fc->log) {
		mutex_destroy(&fc->lock);
		return -ENOMEM;
	}
	fake_init_ops(fc);
	fake_debugfs_add(fc);
	fc->handle = ib_register_peer_memory_client(&fc->ops.ex.client,
						    invalidating[index] ? &fc->invalidate : NULL);
	if (!fc->handle) {
		pr_err("%s: ib_register_peer_memory_client refused the client\n", fc->name);
		fake_client_free(fc);
		return -EINVAL;
	}
	return 0;
}

static void fake_client_exit(struct fake_client *fc)
{
	ib_unregister_peer_memory_client(fc->handle);
	fake_client_free(fc);
}

static int __init fake_init(void)
{
	int i, ret;

	ret = misc_register(&fake_mem_misc);
	if (ret)
		return ret;
	fake_debugfs = debugfs_create_dir("fake_client", NULL);
	for (i = 0; i < nr_clients; i++) {
		ret = fake_client_init(&fake_clients[i], i);
		if (ret)
			goto err;
	}
	return 0;
err:
	while (i--)
		fake_client_exit(&fake_clients[i]);
	debugfs_remove_recursive(fake_debugfs);
	misc_deregister(&fake_mem_misc);
	return ret;
}

static void __exit fake_exit(void)
{
	int i;

	/* Blocks while the core still holds umems of a client: that is what rmmod shows. */
	for (i = nr_clients - 1; i >= 0; i--)
		fake_client_exit(&fake_clients[i]);
	debugfs_remove_recursive(fake_debugfs);
	misc_deregister(&fake_mem_misc);
}

module_init(fake_init);
module_exit(fake_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("nvpeer test rig: test-only peer-memory client for peer_core_sim");
