// SPDX-License-Identifier: GPL-2.0
/*
 * nv_p2p_sim_test: a minimal P2P client for tests/scenarios/nv-p2p-sim.sh, which proves the
 * behaviour of the nv_p2p_sim stand-in (either build). /dev/nv_p2p_sim_test lets a test process
 * pin ranges of its own "GPU memory", map them for QEMU's edu device, read and write through
 * the DMA addresses, and make forbidden calls from inside the free callback. Interface:
 * nv_p2p_sim_test.h.
 *
 * Locking: tst_lock (mutex) serialises the ioctls and is held across P2P calls. The free
 * callback never takes it: it may run inside one of our own P2P calls (REVOKE_AT) or in a thread
 * that frees the memory while an ioctl waits for the RM lock. Order: tst_lock -> (stand-in
 * locks), tst_lock -> mmap_lock (user copies).
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/fs.h>
#include <linux/io.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/string.h>
#include <linux/uaccess.h>

#include "../../../../include/nv-p2p.h"
#include "nv_p2p_sim_test.h"

#define TST_PAGE_SIZE SZ_64K

/* Exported by <= 530 drivers only; looked up with symbol_get. */
extern int nvidia_p2p_cap_persistent_pages;

struct tst_slot {
	bool used;
	bool put_done;			/* a put returned 0: no callback can come any more */
	bool no_read;			/* NV_P2P_SIM_TEST_OPT_NO_READ */
	u64 va, len;
	u32 mode, cb_action;
	struct nvidia_p2p_page_table *pt;	/* kept when stale, never read then */
	struct nvidia_p2p_dma_mapping *maps[NV_P2P_SIM_TEST_MAPS];
	bool unmapped[NV_P2P_SIM_TEST_MAPS];
	unsigned int nmaps;
	atomic_t cb_runs;
	int cb_ret;
	struct nv_p2p_sim_test_info info;	/* table part */
	struct nv_p2p_sim_test_info map_info[NV_P2P_SIM_TEST_MAPS];	/* mapping part */
};

static DEFINE_MUTEX(tst_lock);
static struct tst_slot tst_slots[NV_P2P_SIM_TEST_SLOTS];
static struct pci_dev *tst_peer;
static typeof(&nvidia_p2p_get_pages_persistent) tst_get_persistent;
static typeof(&nvidia_p2p_put_pages_persistent) tst_put_persistent;
static int *tst_cap;

/* Live as far as this client knows: pinned, not put, not revoked. */
static bool tst_table_live(struct tst_slot *s)
{
	return s->used && !s->put_done && !atomic_read(&s->cb_runs);
}

static int tst_cb_unmap_all(struct tst_slot *s)
{
	unsigned int i;
	int ret = 0, r;

	for (i = 0; i < s->nmaps; i++) {
		if (s->unmapped[i])
			continue;
		r = nvidia_p2p_dma_unmap_pages(tst_peer, s->pt, s->maps[i]);
		if (!r)
			s->unmapped[i] = true;
		ret = ret ?: r;
		r = nvidia_p2p_free_dma_mapping(s->maps[i]);
		ret = ret ?: r;
	}
	r = nvidia_p2p_free_page_table(s->pt);
	return ret ?: r;
}

/* Runs with the stand-in's RM lock held; whatever it does, it records the result. */
static void tst_free_callback(void *data)
{
	struct tst_slot *s = data;
	struct nvidia_p2p_page_table *pt = NULL;
	struct nvidia_p2p_dma_mapping *map = NULL;
	int ret = 0;

	switch (s->cb_action) {
	case NV_P2P_SIM_TEST_CB_GET_PAGES:
		ret = nvidia_p2p_get_pages(0, 0, s->va, s->len, &pt, tst_free_callback, s);
		break;
	case NV_P2P_SIM_TEST_CB_PUT_PAGES:
		ret = nvidia_p2p_put_pages(0, 0, s->va, s->pt);
		break;
	case NV_P2P_SIM_TEST_CB_DMA_MAP:
		ret = nvidia_p2p_dma_map_pages(tst_peer, s->pt, &map);
		break;
	case NV_P2P_SIM_TEST_CB_GET_PERSISTENT:
		ret = tst_get_persistent ? tst_get_persistent(s->va, s->len, &pt, 0) : -ENOENT;
		break;
	case NV_P2P_SIM_TEST_CB_DMA_UNMAP:
		ret = tst_cb_unmap_all(s);
		break;
	}
	/* Forbidden calls must fail -EIO, the allowed ones succeed: say so when not. */
	if (s->cb_action != NV_P2P_SIM_TEST_CB_NONE &&
	    ret != (s->cb_action == NV_P2P_SIM_TEST_CB_DMA_UNMAP ? 0 : -EIO))
		pr_info("free callback of slot %td: action %u returned %d\n", s - tst_slots,
			s->cb_action, ret);
	WRITE_ONCE(s->cb_ret, ret);
	atomic_inc(&s->cb_runs);
}

static struct tst_slot *tst_slot(u32 i)
{
	if (i >= NV_P2P_SIM_TEST_SLOTS || !tst_slots[i].used)
		return NULL;
	return &tst_slots[i];
}

/* Reads the table just returned; flags only where the version says it exists. */
static void tst_snapshot_table(struct tst_slot *s)
{
	struct nvidia_p2p_page_table *pt = s->pt;
	struct nv_p2p_sim_test_info *info = &s->info;

	info->pt_valid = 1;
	info->version = pt->version;
	info->page_size = pt->page_size;
	info->entries = pt->entries;
	if (NVIDIA_P2P_MAJOR_VERSION(pt->version) >= 2) {
		info->flags_read = 1;
		info->flags = pt->flags;
	}
	info->uuid_nonzero = pt->gpu_uuid &&
			     memchr_inv(pt->gpu_uuid, 0, NVIDIA_P2P_GPU_UUID_LEN) != NULL;
	if (pt->entries)
		info->phys0 = pt->pages[0]->physical_address;
}

static long tst_ioc_get(void __user *arg)
{
	struct nv_p2p_sim_test_get req;
	struct tst_slot *s = NULL;
	u32 i;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	for (i = 0; i < NV_P2P_SIM_TEST_SLOTS && !s; i++)
		if (!tst_slots[i].used)
			s = &tst_slots[i];
	for (i = 0; i < NV_P2P_SIM_TEST_SLOTS && !s; i++)
		if (tst_slots[i].put_done)
			s = &tst_slots[i];
	if (!s)
		return -ENOSPC;
	i = s - tst_slots;
	memset(s, 0, sizeof(*s));
	s->used = true;
	s->va = req.va;
	s->len = req.len;
	s->mode = req.mode;
	s->cb_action = req.cb_action;
	s->no_read = req.opts & NV_P2P_SIM_TEST_OPT_NO_READ;
	switch (req.mode) {
	case NV_P2P_SIM_TEST_GET_CB:
		req.ret = nvidia_p2p_get_pages(0, 0, req.va, req.len, &s->pt, tst_free_callback, s);
		break;
	case NV_P2P_SIM_TEST_GET_NULL_CB:
		req.ret = nvidia_p2p_get_pages(0, 0, req.va, req.len, &s->pt, NULL, NULL);
		break;
	case NV_P2P_SIM_TEST_GET_PERSISTENT:
		req.ret = tst_get_persistent ?
			  tst_get_persistent(req.va, req.len, &s->pt, req.flags) : -ENOENT;
		break;
	default:
		s->used = false;
		return -EINVAL;
	}
	if (req.ret)
		s->used = false;
	else if (!s->no_read && !atomic_read(&s->cb_runs))
		tst_snapshot_table(s);
	req.slot = i;
	return copy_to_user(arg, &req, sizeof(req)) ? -EFAULT : 0;
}

static long tst_ioc_put(void __user *arg)
{
	struct nv_p2p_sim_test_put req;
	struct tst_slot *s;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	if (req.mode == NV_P2P_SIM_TEST_PUT_NULL) {
		req.ret = nvidia_p2p_put_pages(0, 0, req.va, NULL);
		return copy_to_user(arg, &req, sizeof(req)) ? -EFAULT : 0;
	}
	s = tst_slot(req.slot);
	if (!s)
		return -EINVAL;
	if (req.mode == NV_P2P_SIM_TEST_PUT_PAGES)
		req.ret = nvidia_p2p_put_pages(0, 0, req.va ?: s->va, s->pt);
	else if (req.mode == NV_P2P_SIM_TEST_PUT_PERSISTENT)
		req.ret = tst_put_persistent ?
			  tst_put_persistent(req.va ?: s->va, s->pt, req.flags) : -ENOENT;
	else
		return -EINVAL;
	if (!req.ret)
		s->put_done = true;
	return copy_to_user(arg, &req, sizeof(req)) ? -EFAULT : 0;
}

static void tst_snapshot_map(struct tst_slot *s, unsigned int i)
{
	struct nvidia_p2p_dma_mapping *m = s->maps[i];
	struct nv_p2p_sim_test_info *mi = &s->map_info[i];
	u32 k;

	mi->map_valid = 1;
	mi->map_version = m->version;
	mi->map_page_size_type = m->page_size_type;
	mi->map_entries = m->entries;
	mi->map_peer_ok = m->pci_dev == tst_peer;
	mi->map_differs = 1;
	for (k = 0; k < m->entries; k++) {
		if (k + 1 < m->entries &&
		    m->dma_addresses[k + 1] != m->dma_addresses[k] + TST_PAGE_SIZE)
			mi->map_breaks++;
		if (k < s->pt->entries &&
		    m->dma_addresses[k] == s->pt->pages[k]->physical_address)
			mi->map_differs = 0;
	}
	if (m->entries)
		mi->dma0 = m->dma_addresses[0];
}

static long tst_ioc_map(void __user *arg, bool map)
{
	struct nv_p2p_sim_test_map req;
	struct nvidia_p2p_dma_mapping *m = NULL;
	struct tst_slot *s;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	s = tst_slot(req.slot);
	if (!s)
		return -EINVAL;
	if (map) {
		if (s->nmaps == NV_P2P_SIM_TEST_MAPS)
			return -ENOSPC;
		req.ret = nvidia_p2p_dma_map_pages(tst_peer, s->pt, &m);
		if (!req.ret) {
			req.map = s->nmaps++;
			s->maps[req.map] = m;
			if (!s->no_read && tst_table_live(s))
				tst_snapshot_map(s, req.map);
		}
	} else {
		if (req.map >= s->nmaps)
			return -EINVAL;
		req.ret = nvidia_p2p_dma_unmap_pages(tst_peer, s->pt, s->maps[req.map]);
		if (!req.ret)
			s->unmapped[req.map] = true;
	}
	return copy_to_user(arg, &req, sizeof(req)) ? -EFAULT : 0;
}

static long tst_ioc_info(void __user *arg)
{
	struct nv_p2p_sim_test_info req, out;
	struct tst_slot *s;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	s = tst_slot(req.slot);
	if (!s)
		return -EINVAL;
	out = s->info;
	if (req.map < s->nmaps) {
		const struct nv_p2p_sim_test_info *mi = &s->map_info[req.map];

		out.map_valid = mi->map_valid;
		out.map_version = mi->map_version;
		out.map_page_size_type = mi->map_page_size_type;
		out.map_entries = mi->map_entries;
		out.map_peer_ok = mi->map_peer_ok;
		out.map_breaks = mi->map_breaks;
		out.map_differs = mi->map_differs;
		out.dma0 = mi->dma0;
	}
	out.slot = req.slot;
	out.map = req.map;
	out.cb_runs = atomic_read(&s->cb_runs);
	out.cb_ret = READ_ONCE(s->cb_ret);
	return copy_to_user(arg, &out, sizeof(out)) ? -EFAULT : 0;
}

/* Reads or writes through the DMA addresses, as the peer device would. */
static long tst_ioc_rw(void __user *arg)
{
	struct nv_p2p_sim_test_rw req;
	struct nvidia_p2p_dma_mapping *m;
	u8 __user *buf;
	struct tst_slot *s;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	s = tst_slot(req.slot);
	if (!s || req.map >= s->nmaps)
		return -EINVAL;
	if (!tst_table_live(s) || s->unmapped[req.map])
		return -ESTALE;
	m = s->maps[req.map];
	if (req.offset > (u64)m->entries * TST_PAGE_SIZE ||
	    req.len > (u64)m->entries * TST_PAGE_SIZE - req.offset)
		return -EINVAL;
	buf = u64_to_user_ptr(req.buf);
	while (req.len) {
		u64 off = req.offset % TST_PAGE_SIZE;
		size_t n = min_t(u64, req.len, TST_PAGE_SIZE - off);
		void *kaddr = phys_to_virt(m->dma_addresses[req.offset / TST_PAGE_SIZE]) + off;

		if (req.write ? copy_from_user(kaddr, buf, n) : copy_to_user(buf, kaddr, n))
			return -EFAULT;
		buf += n;
		req.offset += n;
		req.len -= n;
	}
	return 0;
}

static nvidia_p2p_rsync_driver_t tst_rsync = { .version = NVIDIA_P2P_RSYNC_DRIVER_VERSION };

static long tst_ioc_misc(void __user *arg)
{
	struct nv_p2p_sim_test_misc r = {};
	nvidia_p2p_rsync_reg_info_t *regs = NULL;

	r.free_page_table = nvidia_p2p_free_page_table(NULL);
	r.free_dma_mapping = nvidia_p2p_free_dma_mapping(NULL);
	r.init_mapping = nvidia_p2p_init_mapping(0, NULL, NULL, NULL);
	r.destroy_mapping = nvidia_p2p_destroy_mapping(0);
	r.rsync_register = nvidia_p2p_register_rsync_driver(&tst_rsync, NULL);
	r.rsync_register_again = nvidia_p2p_register_rsync_driver(&tst_rsync, NULL);
	nvidia_p2p_unregister_rsync_driver(&tst_rsync, NULL);
	r.rsync_register_after = nvidia_p2p_register_rsync_driver(&tst_rsync, NULL);
	nvidia_p2p_unregister_rsync_driver(&tst_rsync, NULL);
	r.rsync_get_registers = nvidia_p2p_get_rsync_registers(&regs);
	nvidia_p2p_put_rsync_registers(regs);
	r.persistent_api = tst_get_persistent && tst_put_persistent;
	r.cap_persistent_pages = tst_cap ? *tst_cap : -1;
	return copy_to_user(arg, &r, sizeof(r)) ? -EFAULT : 0;
}

/* A client's teardown: unmap, then put, whatever is still live; forget every slot. */
static void tst_reset(void)
{
	struct tst_slot *s;
	unsigned int i;

	for (s = tst_slots; s < tst_slots + NV_P2P_SIM_TEST_SLOTS; s++) {
		if (!s->used)
			continue;
		if (tst_table_live(s)) {
			for (i = 0; i < s->nmaps; i++)
				if (!s->unmapped[i])
					nvidia_p2p_dma_unmap_pages(tst_peer, s->pt, s->maps[i]);
			if (s->mode == NV_P2P_SIM_TEST_GET_PERSISTENT)
				tst_put_persistent(s->va, s->pt, 0);
			else
				nvidia_p2p_put_pages(0, 0, s->va, s->pt);
		}
		memset(s, 0, sizeof(*s));
	}
}

static long tst_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	void __user *uarg = (void __user *)arg;
	long ret;

	mutex_lock(&tst_lock);
	switch (cmd) {
	case NV_P2P_SIM_TEST_IOC_GET:
		ret = tst_ioc_get(uarg);
		break;
	case NV_P2P_SIM_TEST_IOC_PUT:
		ret = tst_ioc_put(uarg);
		break;
	case NV_P2P_SIM_TEST_IOC_MAP:
		ret = tst_ioc_map(uarg, true);
		break;
	case NV_P2P_SIM_TEST_IOC_UNMAP:
		ret = tst_ioc_map(uarg, false);
		break;
	case NV_P2P_SIM_TEST_IOC_INFO:
		ret = tst_ioc_info(uarg);
		break;
	case NV_P2P_SIM_TEST_IOC_RW:
		ret = tst_ioc_rw(uarg);
		break;
	case NV_P2P_SIM_TEST_IOC_MISC:
		ret = tst_ioc_misc(uarg);
		break;
	case NV_P2P_SIM_TEST_IOC_RESET:
		tst_reset();
		ret = 0;
		break;
	default:
		ret = -ENOTTY;
	}
	mutex_unlock(&tst_lock);
	return ret;
}

static const struct file_operations tst_fops = {
	.owner = THIS_MODULE,
	.unlocked_ioctl = tst_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
};

static struct miscdevice tst_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "nv_p2p_sim_test",
	.fops = &tst_fops,
	.mode = 0600,
};

static void tst_put_symbols(void)
{
	if (tst_get_persistent)
		symbol_put(nvidia_p2p_get_pages_persistent);
	if (tst_put_persistent)
		symbol_put(nvidia_p2p_put_pages_persistent);
	if (tst_cap)
		symbol_put(nvidia_p2p_cap_persistent_pages);
}

static int __init tst_init(void)
{
	int ret;

	/* What a client must do to run against both API generations. */
	tst_get_persistent = symbol_get(nvidia_p2p_get_pages_persistent);
	tst_put_persistent = symbol_get(nvidia_p2p_put_pages_persistent);
	tst_cap = symbol_get(nvidia_p2p_cap_persistent_pages);
	tst_peer = pci_get_device(0x1234, 0x11e8, NULL);
	if (!tst_peer)
		pr_warn("no edu device (1234:11e8): dma_map_pages gets a NULL peer\n");
	ret = misc_register(&tst_misc);
	if (ret) {
		pci_dev_put(tst_peer);
		tst_put_symbols();
		return ret;
	}
	pr_info("loaded: persistent API %s, cap_persistent_pages %s\n",
		tst_get_persistent ? "found" : "absent", tst_cap ? "found" : "absent");
	return 0;
}

static void __exit tst_exit(void)
{
	misc_deregister(&tst_misc);
	mutex_lock(&tst_lock);
	tst_reset();
	mutex_unlock(&tst_lock);
	pci_dev_put(tst_peer);
	tst_put_symbols();
}

module_init(tst_init);
module_exit(tst_exit);

MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("Test-only P2P client of the nv_p2p_sim stand-in");
