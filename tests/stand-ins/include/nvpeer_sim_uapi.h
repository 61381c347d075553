/* SPDX-License-Identifier: GPL-2.0 */
/*
 * User interface of the two test stand-ins (tests only, root only):
 *   /dev/nv_p2p_sim    nv_p2p_sim.ko: "GPU memory" and the NVIDIA P2P API over host pages
 *   /dev/peer_core_sim peer_core_sim.ko: MOFED's peer-memory core, "MRs" and "NIC DMA"
 * Shared by the C modules and the Python drivers (tests/scenarios/nvsim.py, coresim.py).
 * Every struct is padded to 8-byte multiples; all fields are little-endian native.
 */
#ifndef NVPEER_SIM_UAPI_H
#define NVPEER_SIM_UAPI_H

#include <linux/ioctl.h>
#include <linux/types.h>

/* ------------------------------------------------------------------ nv_p2p_sim */

/*
 * Allocate "GPU memory": size is a multiple of 64 KiB. The caller then mmaps the device with
 * offset = mmap_offset and length = size; the mapping is 2 MiB aligned (as cudaMalloc VAs are),
 * VM_IO | VM_PFNMAP so get_user_pages/pin_user_pages cannot pin it, and its VA is the "GPU VA".
 * An allocation can be mapped once. Flags choose the physical layout of the backing pages.
 */
#define NV_P2P_SIM_ALLOC_CONTIGUOUS 0x0   /* 4 MiB physically contiguous chunks where possible */
#define NV_P2P_SIM_ALLOC_FRAGMENTED 0x1   /* every 64 KiB page physically apart from its neighbours */
/*
 * The "GPU" the memory is on (0 ... NV_P2P_SIM_GPUS - 1, default 0): each has its own UUID, which
 * the page tables of its pins carry in gpu_uuid (the per-GPU totals of issue 37).
 */
#define NV_P2P_SIM_GPUS 4
#define NV_P2P_SIM_ALLOC_GPU_SHIFT 8
#define NV_P2P_SIM_ALLOC_GPU(n) ((__u32)(n) << NV_P2P_SIM_ALLOC_GPU_SHIFT)
#define NV_P2P_SIM_ALLOC_GPU_MASK NV_P2P_SIM_ALLOC_GPU(NV_P2P_SIM_GPUS - 1)
struct nv_p2p_sim_alloc {
	__u64 size;        /* in */
	__u32 flags;       /* in: NV_P2P_SIM_ALLOC_* */
	__u32 id;          /* out: allocation id (> 0) */
	__u64 mmap_offset; /* out */
};
#define NV_P2P_SIM_IOC_ALLOC _IOWR('N', 1, struct nv_p2p_sim_alloc)

/*
 * "cudaFree" of the allocation mapped at va (the start VA): fires the free callback of every
 * non-persistent pin on it (in the caller's context, "RM API lock" held), then frees each
 * pin's page table and DMA mappings, unmaps the user mapping and frees the backing pages
 * (deferred while persistent pins remain: RM keeps the memory until put_pages_persistent).
 * munmap of the whole mapping and close/exit do the same (for munmap: from a work item, as the
 * VMA close runs under mmap_lock which RM never holds).
 */
#define NV_P2P_SIM_IOC_FREE _IOW('N', 2, __u64)

/* Functions of the P2P API, for counters and fault injection. */
enum nv_p2p_sim_fn {
	NV_P2P_SIM_FN_GET_PAGES = 0,
	NV_P2P_SIM_FN_GET_PAGES_PERSISTENT,
	NV_P2P_SIM_FN_PUT_PAGES,
	NV_P2P_SIM_FN_PUT_PAGES_PERSISTENT,
	NV_P2P_SIM_FN_DMA_MAP,
	NV_P2P_SIM_FN_DMA_UNMAP,
	NV_P2P_SIM_FN_COUNT
};

/* Make the nth (1 = the next) call of fn from now fail with -err (positive errno). */
struct nv_p2p_sim_fault {
	__u32 fn;  /* enum nv_p2p_sim_fn */
	__u32 nth;
	__s32 err;
	__u32 pad;
};
#define NV_P2P_SIM_IOC_FAULT _IOW('N', 3, struct nv_p2p_sim_fault)

/*
 * Fire the free callbacks of the allocation at va (as a concurrent cudaFree would) at a chosen
 * point of the next P2P call on that allocation:
 */
enum nv_p2p_sim_revoke_point {
	/* inside get_pages, after the callback is registered, before get_pages returns 0 */
	NV_P2P_SIM_REVOKE_IN_GET_PAGES = 1,
	/* inside dma_map_pages, after it read the table and the RM part ran, before it links the
	 * new mapping into the table's list: every callback pin of the allocation is revoked and
	 * freed, the call being mapped included. As nvidia.ko, dma_map_pages then writes into the
	 * freed pin (SLUB poisoning or KFENCE report it), counts a stale table use and returns 0
	 * with a mapping nobody frees. Harmless for persistent pins (no callback). */
	NV_P2P_SIM_REVOKE_IN_DMA_MAP,
	/* inside put_pages, before it takes the RM lock: the callback wins the race and put_pages
	 * returns 0 without freeing anything (nv_p2p_sim_530.ko then reads the freed table, as
	 * 515-530 do, and counts a stale table use) */
	NV_P2P_SIM_REVOKE_IN_PUT_PAGES,
};
struct nv_p2p_sim_revoke_at {
	__u64 va;
	__u32 point; /* enum nv_p2p_sim_revoke_point */
	__u32 pad;
};
#define NV_P2P_SIM_IOC_REVOKE_AT _IOW('N', 4, struct nv_p2p_sim_revoke_at)

struct nv_p2p_sim_counters {
	__u64 calls[NV_P2P_SIM_FN_COUNT];     /* every call, successful or not */
	__u64 failures[NV_P2P_SIM_FN_COUNT];  /* calls that returned an error */
	__u64 free_callbacks;       /* client free callbacks invoked */
	__u64 calls_in_callback;    /* P2P calls (other than dma_unmap) made from inside a callback */
	/* calls passing a page table or mapping already freed; dma_maps whose table was freed
	 * while they ran; (530 build) put_pages reading a table its free callback freed */
	__u64 stale_table_uses;
	__u64 pins;                 /* outstanding non-persistent pins (page tables) */
	__u64 persistent_pins;      /* outstanding persistent pins */
	__u64 mappings;             /* outstanding DMA mappings */
	__u64 allocations;          /* live allocations */
	__u64 pages_pinned;         /* 64 KiB pages in outstanding pins, both kinds */
	__u64 put_pages_not_found;  /* put_pages of a table its free callback freed: 0, as RM */
	/* put_pages of a callback pin by another process than the one that pinned it: RM looks pins
	 * up among the calling process's objects, finds none and answers 0; the pin, its table and
	 * its free callback stay (an event counter, zeroed by RESET) */
	__u64 put_pages_other_process;
};
#define NV_P2P_SIM_IOC_COUNTERS _IOR('N', 5, struct nv_p2p_sim_counters)
/* Zero the call/failure/callback counters (not the outstanding ones); clear faults, revocation
 * points and an armed (not yet stalled) stall. */
#define NV_P2P_SIM_IOC_RESET _IO('N', 6)

/*
 * Stall the next P2P call on the allocation at va (of this process) at a chosen point until
 * NV_P2P_SIM_IOC_STALL_RESUME, holding neither the RM lock nor any lock of the stand-in, so a
 * test can act (cudaFree another buffer, rmmod the client) while the call is in flight. One
 * armed or stalled call at a time (-EBUSY otherwise). A stalled call goes on by itself after
 * 60 s or on a signal; unloading the stand-in disarms a pending stall.
 */
enum nv_p2p_sim_stall_point {
	/* inside get_pages or get_pages_persistent: the pin is registered (a cudaFree revokes it)
	 * and the RM lock dropped, before the call returns 0 */
	NV_P2P_SIM_STALL_IN_GET_PAGES = 1,
};
struct nv_p2p_sim_stall_at {
	__u64 va;
	__u32 point; /* enum nv_p2p_sim_stall_point */
	__u32 pad;
};
#define NV_P2P_SIM_IOC_STALL_AT _IOW('N', 7, struct nv_p2p_sim_stall_at)
/* Waits until a call is stalled (-ETIMEDOUT after 10 s), then returns 0. */
#define NV_P2P_SIM_IOC_STALL_WAIT _IO('N', 8)
/* Lets the stalled call go on (-ESRCH when none is stalled). */
#define NV_P2P_SIM_IOC_STALL_RESUME _IO('N', 9)

/* ------------------------------------------------------------------ peer_core_sim */

enum peer_core_sim_umem_kind {
	/* a user MR: IB_PEER_MEM_ALLOW | IB_PEER_MEM_INVAL_SUPP (invalidating clients allowed) */
	PEER_CORE_SIM_UMEM_MR = 0,
	/* a CQ/QP/SRQ/doorbell/DEVX umem: IB_PEER_MEM_ALLOW only (persistent clients only) */
	PEER_CORE_SIM_UMEM_CQ = 1,
};

#define PEER_CORE_SIM_ACCESS_WRITE 0x1 /* umem->writable: get_pages force = !writable */

/* Make the registration fail after the peer mapping, as mlx5 does when mkey creation fails. */
#define PEER_CORE_SIM_REG_FAIL_AFTER_MAP 0x1
/*
 * Stall the registration at one step until PEER_CORE_SIM_IOC_STALL_RESUME, so a test can free
 * the buffer exactly there: after the client's acquire (before the core locks the umem), after
 * get_pages, after dma_map (both with the umem's mapping_lock held, as MOFED holds it until
 * the MR is activated). One stalled registration (or deregistration) at a time.
 */
#define PEER_CORE_SIM_REG_STALL_AFTER_ACQUIRE 0x2
#define PEER_CORE_SIM_REG_STALL_AFTER_GET_PAGES 0x4
#define PEER_CORE_SIM_REG_STALL_AFTER_MAP 0x8
/* Stall this MR's DEREG_MR once the core holds what it holds while unmapping (5.x: the umem's
 * mapping_lock, taken by ib_umem_stop_invalidation_notifier; 4.x: nothing, after the mkey is
 * revoked), before it calls dma_unmap. */
#define PEER_CORE_SIM_REG_STALL_IN_DEREG 0x10
/* 5.x core with a PEER_MEM_INVALIDATE_UNMAPS client only: stall this MR's DEREG_MR after
 * ib_umem_stop_invalidation_notifier flipped the umem to UNMAPPED and dropped mapping_lock,
 * before it calls dma_unmap + put_pages (an invalidate now finds nothing to unmap). */
#define PEER_CORE_SIM_REG_STALL_DEREG_UNLOCKED 0x20
/* Stall the core's invalidate for this MR once its work is done and its locks dropped, before
 * it returns into the client's free callback (a dereg can then run to release()). */
#define PEER_CORE_SIM_REG_STALL_INVALIDATE_RETURN 0x40
#define PEER_CORE_SIM_REG_INJECT_ALL 0x7f

struct peer_core_sim_reg {
	__u64 addr;       /* in: user VA of the calling process */
	__u64 size;       /* in */
	__u32 access;     /* in: PEER_CORE_SIM_ACCESS_* */
	__u32 kind;       /* in: enum peer_core_sim_umem_kind */
	__u32 inject;     /* in: PEER_CORE_SIM_REG_* */
	__u32 id;         /* out: MR id (> 0) */
	__u32 peer;       /* out: 1 when a peer client owns it, 0 when host memory was pinned */
	__u32 pad;
	char client[64];  /* out: name of the client that acquired it */
};
/* Returns 0 or -errno exactly as ib_umem_get would (e.g. -EFAULT when nobody takes a GPU VA). */
#define PEER_CORE_SIM_IOC_REG_MR _IOWR('P', 1, struct peer_core_sim_reg)
/* DEREG_MR, DMA and MR_INFO: -ENOENT for an id this open file did not register. */
#define PEER_CORE_SIM_IOC_DEREG_MR _IOW('P', 2, __u32)

#define PEER_CORE_SIM_DMA_TO_MR 0   /* "NIC" writes user bytes into the MR (RDMA write target) */
#define PEER_CORE_SIM_DMA_FROM_MR 1 /* "NIC" reads the MR into user bytes (RDMA read source) */
struct peer_core_sim_dma {
	__u32 id;
	__u32 dir;
	__u64 offset; /* from the MR's start address */
	__u64 len;
	__u64 buf;    /* user buffer */
};
/* -EIO when the MR is invalidated (the mkey was revoked), -EINVAL out of range,
 * -EFAULT when a DMA address does not resolve to stand-in GPU memory (RAM),
 * -EACCES for DMA_TO_MR into an MR registered without PEER_CORE_SIM_ACCESS_WRITE. */
#define PEER_CORE_SIM_IOC_DMA _IOW('P', 3, struct peer_core_sim_dma)

enum peer_core_sim_mr_state {
	PEER_CORE_SIM_MR_MAPPED = 1,
	PEER_CORE_SIM_MR_INVALIDATED, /* revoked through the invalidate callback */
	PEER_CORE_SIM_MR_HOST,        /* host memory, pinned by GUP */
};
struct peer_core_sim_sge {
	__u64 dma_address;
	__u64 length;
};
struct peer_core_sim_mr_info {
	__u32 id;          /* in */
	__u32 state;       /* out: enum peer_core_sim_mr_state */
	__u32 nmap;        /* out: *nmap as returned by dma_map */
	__u32 nents;       /* out: entries of the client's sg_table */
	__u64 page_size;   /* out: get_page_size() */
	__u64 core_context;/* out: what get_pages received */
	__u64 sg;          /* in: user array of struct peer_core_sim_sge, may be 0 */
	__u32 sg_max;      /* in: its capacity */
	__u32 pad;
};
#define PEER_CORE_SIM_IOC_MR_INFO _IOWR('P', 4, struct peer_core_sim_mr_info)
/*
 * The stalls run on two channels, stalled and resumed apart: 1 for the registration and dereg
 * points, 2 for STALL_INVALIDATE_RETURN (one stalled call on each at a time). The ioctl argument
 * is the channel; 0 means any.
 * STALL_WAIT waits until a call is stalled on the channel (-ETIMEDOUT after 10 s), then returns 0.
 */
#define PEER_CORE_SIM_IOC_STALL_WAIT _IO('P', 5)
/* Lets the stalled call of the channel (0: every stalled one) go on (-ESRCH when none is). */
#define PEER_CORE_SIM_IOC_STALL_RESUME _IO('P', 6)

/*
 * What uverbs' experimental SET_CONTEXT_PEER_INFO does on a 4.1 ... 5.0 core (any user may):
 * ib_get_peer_private_data(context, peer_id, name), whose result it returns (peer_core_sim_4x:
 * 0 data returned, -EINVAL the clients of that name returned NULL, -ENOENT no client of that
 * name implements both legacy ctx callbacks). -EOPNOTSUPP on the other builds, whose cores
 * have no such function.
 */
struct peer_core_sim_peer_info {
	__u64 peer_id;
	char name[64];    /* NUL-terminated client name */
};
#define PEER_CORE_SIM_IOC_PEER_PRIVATE_DATA _IOW('P', 7, struct peer_core_sim_peer_info)

/*
 * The device goes away (mlx5 firmware-fatal recovery, devlink reload, unbind, hot-unplug): uverbs'
 * disassociate deregisters every MR of this file from a kernel worker while the process keeps the
 * fd. Returns how many MRs it deregistered; their ids are gone (-ENOENT) afterwards.
 */
#define PEER_CORE_SIM_IOC_DISASSOCIATE _IO('P', 8)

#endif /* NVPEER_SIM_UAPI_H */
