/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The MOFED (MLNX_OFED / DOCA-OFED) peer-memory client ABI, declared by nvpeer from the
 * documented layout (CONTRACT.md 1.2-1.5). Field order, types and constants must match the cores
 * we register with; tests/abi checks them against the real header at test time.
 */
#ifndef NVPEER_RDMA_PEER_MEM_H
#define NVPEER_RDMA_PEER_MEM_H

#include <linux/types.h>

struct sg_table;
struct device;

#define IB_PEER_MEMORY_NAME_MAX 64
#define IB_PEER_MEMORY_VER_MAX 16

/* core_context is a u64 (a ticket on 4.x cores, an xarray id <= U32_MAX on 5.x cores). */
#define PEER_MEM_U64_CORE_CONTEXT

/*
 * The client's operations (136 bytes on x86_64). Cores keep a pointer to this struct for the
 * lifetime of the registration, so it must outlive ib_unregister_peer_memory_client().
 */
struct peer_memory_client {
	char name[IB_PEER_MEMORY_NAME_MAX];
	char version[IB_PEER_MEMORY_VER_MAX];
	/* 1: the range is ours (release() follows later); 0: not ours. */
	int (*acquire)(unsigned long addr, size_t size, void *peer_mem_private_data,
		       char *peer_mem_name, void **client_context);
	int (*get_pages)(unsigned long addr, size_t size, int write, int force,
			 struct sg_table *sg_head, void *client_context, u64 core_context);
	int (*dma_map)(struct sg_table *sg_head, void *client_context,
		       struct device *dma_device, int dmasync, int *nmap);
	int (*dma_unmap)(struct sg_table *sg_head, void *client_context,
			 struct device *dma_device);
	void (*put_pages)(struct sg_table *sg_head, void *client_context);
	unsigned long (*get_page_size)(void *client_context);
	void (*release)(void *client_context);
};

/*
 * MOFED 4.1 ... 5.0 ("legacy PeerDirect") read two more pointers after the common part
 * (152 bytes). A 4.x core skips clients whose get_context_private_data is set unless the user
 * context carries peer private data, so a legacy registration leaves both NULL.
 */
struct peer_memory_client_legacy {
	struct peer_memory_client client;
	void *(*get_context_private_data)(u64 peer_id);
	void (*put_context_private_data)(void *context);
};

/* peer_memory_client_ex.flags: the core makes no client calls inside invalidation. */
enum {
	PEER_MEM_INVALIDATE_UNMAPS = 1 << 0,
};

/*
 * New-style client (MOFED 5.1-2.5.8.0.60, 5.4-3.0.3.0 and later): recognised when
 * client.version[IB_PEER_MEMORY_VER_MAX - 1] != 0 and ex_size >= offsetofend(flags).
 * The version string must therefore be at most IB_PEER_MEMORY_VER_MAX - 2 characters.
 */
struct peer_memory_client_ex {
	struct peer_memory_client client;
	size_t ex_size;
	u32 flags;
};

typedef int (*invalidate_peer_memory)(void *reg_handle, u64 core_context);

/*
 * Returns an opaque handle or NULL. A non-NULL invalidate_callback makes the client an
 * invalidating one: the core writes its invalidate function there and only offers the client
 * umems that support invalidation (user MRs).
 */
void *ib_register_peer_memory_client(const struct peer_memory_client *peer_client,
				     invalidate_peer_memory *invalidate_callback);
/* Blocks until every umem acquired through this client is released. */
void ib_unregister_peer_memory_client(void *reg_handle);

#endif /* NVPEER_RDMA_PEER_MEM_H */
