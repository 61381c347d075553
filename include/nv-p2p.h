/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The NVIDIA P2P kernel API (nvidia.ko), declared by nvpeer from the documented layout
 * (CONTRACT.md 2.1-2.4): drivers 515 ... 595. tests/abi checks field offsets, sizes and constants
 * against the real header at test time.
 */
#ifndef NVPEER_NV_P2P_H
#define NVPEER_NV_P2P_H

#include <linux/types.h>

struct pci_dev;

#define NVIDIA_P2P_MAJOR_VERSION_MASK 0xffff0000
#define NVIDIA_P2P_MINOR_VERSION_MASK 0x0000ffff
#define NVIDIA_P2P_MAJOR_VERSION(v) (((v) & NVIDIA_P2P_MAJOR_VERSION_MASK) >> 16)
#define NVIDIA_P2P_MINOR_VERSION(v) (((v) & NVIDIA_P2P_MINOR_VERSION_MASK))
#define NVIDIA_P2P_MAJOR_VERSION_MATCHES(p, v) \
	(NVIDIA_P2P_MAJOR_VERSION((p)->version) == NVIDIA_P2P_MAJOR_VERSION(v))
#define NVIDIA_P2P_VERSION_COMPATIBLE(p, v) \
	(NVIDIA_P2P_MAJOR_VERSION_MATCHES(p, v) && \
	 (NVIDIA_P2P_MINOR_VERSION((p)->version) >= NVIDIA_P2P_MINOR_VERSION(v)))

enum {
	NVIDIA_P2P_ARCHITECTURE_TESLA = 0,
	NVIDIA_P2P_ARCHITECTURE_FERMI,
	NVIDIA_P2P_ARCHITECTURE_CURRENT = NVIDIA_P2P_ARCHITECTURE_FERMI
};

enum {
	NVIDIA_P2P_PARAMS_ADDRESS_INDEX_GPU = 0,
	NVIDIA_P2P_PARAMS_ADDRESS_INDEX_THIRD_PARTY_DEVICE,
	NVIDIA_P2P_PARAMS_ADDRESS_INDEX_MAX = NVIDIA_P2P_PARAMS_ADDRESS_INDEX_THIRD_PARTY_DEVICE
};

#define NVIDIA_P2P_GPU_UUID_LEN 16

enum nvidia_p2p_page_size_type {
	NVIDIA_P2P_PAGE_SIZE_4KB = 0,
	NVIDIA_P2P_PAGE_SIZE_64KB,
	NVIDIA_P2P_PAGE_SIZE_128KB,
	NVIDIA_P2P_PAGE_SIZE_COUNT
};

/* Persistent-API flags (570.86.15+). */
#define NVIDIA_P2P_FLAGS_DEFAULT 0
#define NVIDIA_P2P_FLAGS_FORCE_BAR1_MAPPING 1

/* Page-table flags (page table 2.x, 580.65.06+). */
#define NVIDIA_P2P_PAGE_TABLE_FLAGS_CPU_CACHEABLE 0x1

union nvidia_p2p_mailbox_addresses {
	struct {
		uint64_t wmb_addr;
		uint64_t wmb_data;
		uint64_t rreq_addr;
		uint64_t rcomp_addr;
		uint64_t reserved[2];
	} fermi;
};

struct nvidia_p2p_params {
	uint32_t version;
	uint32_t architecture;
	union nvidia_p2p_mailbox_addresses addresses[NVIDIA_P2P_PARAMS_ADDRESS_INDEX_MAX + 1];
};
#define NVIDIA_P2P_PARAMS_VERSION 0x00010001

union nvidia_p2p_request_registers {
	struct {
		uint32_t wreqmb_h;
		uint32_t rreqmb_h;
		uint32_t rreqmb_0;
		uint32_t reserved[3];
	} fermi;
};

typedef struct nvidia_p2p_page {
	uint64_t physical_address;
	union nvidia_p2p_request_registers registers;
} nvidia_p2p_page_t;

/*
 * The page table, allocated by NVIDIA. Drivers 515 ... 575 fill version 0x00010002 (32 bytes);
 * 580.65.06+ fill 0x00020000 and add `flags` (40 bytes). A client must read `flags` only when the
 * major version is >= 2: on a 1.x table the bytes after gpu_uuid are not ours to read.
 */
typedef struct nvidia_p2p_page_table {
	uint32_t version;
	uint32_t page_size; /* enum nvidia_p2p_page_size_type */
	struct nvidia_p2p_page **pages;
	uint32_t entries;
	uint8_t *gpu_uuid;
	uint32_t flags; /* page table major version >= 2 only */
} nvidia_p2p_page_table_t;

#define NVIDIA_P2P_PAGE_TABLE_VERSION_V1 0x00010002
#define NVIDIA_P2P_PAGE_TABLE_VERSION_V2 0x00020000
#define NVIDIA_P2P_PAGE_TABLE_VERSION NVIDIA_P2P_PAGE_TABLE_VERSION_V2
/* Size of a 1.x table: everything up to and including gpu_uuid. */
#define NVIDIA_P2P_PAGE_TABLE_V1_SIZE 32

typedef struct nvidia_p2p_dma_mapping {
	uint32_t version;
	enum nvidia_p2p_page_size_type page_size_type;
	uint32_t entries;
	uint64_t *dma_addresses;
	void *private;
	struct pci_dev *pci_dev;
} nvidia_p2p_dma_mapping_t;

#define NVIDIA_P2P_DMA_MAPPING_VERSION 0x00020003
#define NVIDIA_P2P_DMA_MAPPING_VERSION_COMPATIBLE(p) \
	NVIDIA_P2P_VERSION_COMPATIBLE(p, NVIDIA_P2P_DMA_MAPPING_VERSION)

typedef struct nvidia_p2p_rsync_driver {
	uint32_t version;
	int (*get_relaxed_ordering_mode)(int *mode, void *data);
	void (*put_relaxed_ordering_mode)(int mode, void *data);
	void (*wait_for_rsync)(struct pci_dev *gpu, void *data);
} nvidia_p2p_rsync_driver_t;
#define NVIDIA_P2P_RSYNC_DRIVER_VERSION 0x00010001

typedef struct nvidia_p2p_rsync_reg {
	void *ptr;
	size_t size;
	struct pci_dev *ibmnpu;
	struct pci_dev *gpu;
	uint32_t cluster_id;
	uint32_t socket_id;
} nvidia_p2p_rsync_reg_t;

typedef struct nvidia_p2p_rsync_reg_info {
	uint32_t version;
	nvidia_p2p_rsync_reg_t *regs;
	size_t entries;
} nvidia_p2p_rsync_reg_info_t;
#define NVIDIA_P2P_RSYNC_REG_INFO_VERSION 0x00020001

/* Declared by 535.43.02+ headers, together with the persistent calls below. */
#define NVIDIA_P2P_CAP_GET_PAGES_PERSISTENT_API

int nvidia_p2p_init_mapping(uint64_t p2p_token, struct nvidia_p2p_params *params,
			    void (*destroy_callback)(void *data), void *data);
int nvidia_p2p_destroy_mapping(uint64_t p2p_token);

/* Non-persistent pin; VA and length 64 KiB aligned; free_callback is mandatory since 535. */
int nvidia_p2p_get_pages(uint64_t p2p_token, uint32_t va_space, uint64_t virtual_address,
			 uint64_t length, struct nvidia_p2p_page_table **page_table,
			 void (*free_callback)(void *data), void *data);
int nvidia_p2p_get_pages_persistent(uint64_t virtual_address, uint64_t length,
				    struct nvidia_p2p_page_table **page_table, uint32_t flags);
int nvidia_p2p_put_pages(uint64_t p2p_token, uint32_t va_space, uint64_t virtual_address,
			 struct nvidia_p2p_page_table *page_table);
int nvidia_p2p_put_pages_persistent(uint64_t virtual_address,
				    struct nvidia_p2p_page_table *page_table, uint32_t flags);
int nvidia_p2p_free_page_table(struct nvidia_p2p_page_table *page_table);
int nvidia_p2p_dma_map_pages(struct pci_dev *peer, struct nvidia_p2p_page_table *page_table,
			     struct nvidia_p2p_dma_mapping **dma_mapping);
int nvidia_p2p_dma_unmap_pages(struct pci_dev *peer, struct nvidia_p2p_page_table *page_table,
			       struct nvidia_p2p_dma_mapping *dma_mapping);
int nvidia_p2p_free_dma_mapping(struct nvidia_p2p_dma_mapping *dma_mapping);
int nvidia_p2p_register_rsync_driver(nvidia_p2p_rsync_driver_t *driver, void *data);
void nvidia_p2p_unregister_rsync_driver(nvidia_p2p_rsync_driver_t *driver, void *data);
int nvidia_p2p_get_rsync_registers(nvidia_p2p_rsync_reg_info_t **reg_info);
void nvidia_p2p_put_rsync_registers(nvidia_p2p_rsync_reg_info_t *reg_info);

#endif /* NVPEER_NV_P2P_H */
