/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Interface of nv_p2p_sim_test.ko, the test-only P2P client of tests/scenarios/nv-p2p-sim.sh:
 * /dev/nv_p2p_sim_test (root only) calls the nvidia_p2p_* functions of whichever stand-in is
 * loaded on VAs of the calling process, and reports what it saw. Mirrored in
 * tests/scenarios/nvsim.py. Structs are padded to 8-byte multiples.
 *
 * A slot holds one page table (one get_pages* call) and up to NV_P2P_SIM_TEST_MAPS DMA mappings.
 * The module keeps the raw pointers after the table is freed so that tests can pass stale ones
 * on purpose; it reads a table or mapping only while it knows it is live. A slot is reused once
 * a put of its table returned 0, or after RESET.
 */
#ifndef NV_P2P_SIM_TEST_H
#define NV_P2P_SIM_TEST_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define NV_P2P_SIM_TEST_SLOTS 64
#define NV_P2P_SIM_TEST_MAPS 4

enum nv_p2p_sim_test_get_mode {
	NV_P2P_SIM_TEST_GET_CB = 0,		/* nvidia_p2p_get_pages with a free callback */
	NV_P2P_SIM_TEST_GET_NULL_CB,		/* nvidia_p2p_get_pages with a NULL callback */
	NV_P2P_SIM_TEST_GET_PERSISTENT,		/* nvidia_p2p_get_pages_persistent (symbol_get) */
};

/* What the free callback does after recording that it ran. */
enum nv_p2p_sim_test_cb_action {
	NV_P2P_SIM_TEST_CB_NONE = 0,
	NV_P2P_SIM_TEST_CB_GET_PAGES,		/* get_pages of the same range (forbidden) */
	NV_P2P_SIM_TEST_CB_PUT_PAGES,		/* put_pages of its own table (forbidden) */
	NV_P2P_SIM_TEST_CB_DMA_MAP,		/* dma_map_pages of its own table (forbidden) */
	NV_P2P_SIM_TEST_CB_GET_PERSISTENT,	/* get_pages_persistent (forbidden) */
	/* dma_unmap each of its mappings, then the free_* no-ops (all allowed) */
	NV_P2P_SIM_TEST_CB_DMA_UNMAP,
};

struct nv_p2p_sim_test_get {
	__u64 va;		/* in */
	__u64 len;		/* in */
	__u32 mode;		/* in: enum nv_p2p_sim_test_get_mode */
	__u32 flags;		/* in: get_pages_persistent flags */
	__u32 cb_action;	/* in: enum nv_p2p_sim_test_cb_action */
	__u32 slot;		/* out: a free slot, or one whose table was put */
	__s32 ret;		/* out: what the P2P call returned */
	__u32 opts;		/* in: NV_P2P_SIM_TEST_OPT_* */
};
/* Do not read the table or its mappings (another thread may free them meanwhile). */
#define NV_P2P_SIM_TEST_OPT_NO_READ 0x1
#define NV_P2P_SIM_TEST_IOC_GET _IOWR('T', 1, struct nv_p2p_sim_test_get)

enum nv_p2p_sim_test_put_mode {
	NV_P2P_SIM_TEST_PUT_PAGES = 0,		/* nvidia_p2p_put_pages */
	NV_P2P_SIM_TEST_PUT_PERSISTENT,		/* nvidia_p2p_put_pages_persistent */
	NV_P2P_SIM_TEST_PUT_NULL,		/* nvidia_p2p_put_pages with a NULL table */
};

/* Always calls, whatever the slot's state (a stale table on purpose); ret 0 frees the slot. */
struct nv_p2p_sim_test_put {
	__u32 slot;		/* in */
	__u32 mode;		/* in: enum nv_p2p_sim_test_put_mode */
	__u64 va;		/* in: VA passed, 0: the slot's own */
	__u32 flags;		/* in: put_pages_persistent flags */
	__s32 ret;		/* out */
};
#define NV_P2P_SIM_TEST_IOC_PUT _IOWR('T', 2, struct nv_p2p_sim_test_put)

/* MAP: dma_map_pages for the edu device (1234:11e8); UNMAP: always calls, even twice. */
struct nv_p2p_sim_test_map {
	__u32 slot;		/* in */
	__u32 map;		/* MAP: out, index of the mapping; UNMAP: in */
	__s32 ret;		/* out */
	__u32 pad;
};
#define NV_P2P_SIM_TEST_IOC_MAP _IOWR('T', 3, struct nv_p2p_sim_test_map)
#define NV_P2P_SIM_TEST_IOC_UNMAP _IOWR('T', 4, struct nv_p2p_sim_test_map)

struct nv_p2p_sim_test_info {
	__u32 slot;		/* in */
	__u32 map;		/* in: which mapping to describe */
	__u32 cb_runs;		/* times the free callback ran */
	__s32 cb_ret;		/* what the callback's P2P call(s) returned (first non-zero) */
	/* The table, read when get_pages* returned, unless the callback had already run: */
	__u32 pt_valid;
	__u32 version;
	__u32 page_size;
	__u32 entries;
	__u32 flags_read;	/* 1: major version >= 2, so flags was read */
	__u32 flags;
	__u32 uuid_nonzero;	/* gpu_uuid set and not all zeroes */
	__u32 pad;
	__u64 phys0;		/* pages[0]->physical_address */
	/* The mapping, read when dma_map_pages returned: */
	__u32 map_valid;
	__u32 map_version;
	__u32 map_page_size_type;
	__u32 map_entries;
	__u32 map_peer_ok;	/* pci_dev is the peer it was mapped for */
	__u32 map_breaks;	/* i with dma_addresses[i + 1] != dma_addresses[i] + 64 KiB */
	__u32 map_differs;	/* dma_addresses[i] != pages[i]->physical_address for every i */
	__u32 pad2;
	__u64 dma0;		/* dma_addresses[0] */
};
#define NV_P2P_SIM_TEST_IOC_INFO _IOWR('T', 5, struct nv_p2p_sim_test_info)

/* "NIC DMA": copy between buf and the pages behind a live mapping's DMA addresses. */
struct nv_p2p_sim_test_rw {
	__u32 slot;
	__u32 map;
	__u64 offset;		/* from the start of the table */
	__u64 len;
	__u64 buf;		/* user buffer */
	__u32 write;		/* 1: buf -> memory, 0: memory -> buf */
	__u32 pad;
};
#define NV_P2P_SIM_TEST_IOC_RW _IOW('T', 6, struct nv_p2p_sim_test_rw)

/* The calls without state, and what the module found at load time. */
struct nv_p2p_sim_test_misc {
	__s32 free_page_table;		/* nvidia_p2p_free_page_table(NULL) */
	__s32 free_dma_mapping;		/* nvidia_p2p_free_dma_mapping(NULL) */
	__s32 init_mapping;
	__s32 destroy_mapping;
	__s32 rsync_register;		/* first registration */
	__s32 rsync_register_again;	/* second one, while the first is registered */
	__s32 rsync_register_after;	/* after unregistering */
	__s32 rsync_get_registers;
	__s32 persistent_api;		/* 1: get/put_pages_persistent found by symbol_get */
	__s32 cap_persistent_pages;	/* its value, -1: not exported */
};
#define NV_P2P_SIM_TEST_IOC_MISC _IOR('T', 7, struct nv_p2p_sim_test_misc)

/* Unmap and put everything still held (as a client's teardown would) and free every slot. */
#define NV_P2P_SIM_TEST_IOC_RESET _IO('T', 8)

#endif /* NV_P2P_SIM_TEST_H */
