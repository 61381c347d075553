/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The C side of the module (nvpeer_glue.c), called from Rust: what 7.2's Rust cannot express
 * (modinfo, sysfs parameters and attributes, weak references, dynamic debug, ratelimit, sg and
 * PCI inline helpers). Kept small; the logic is in Rust.
 */
#ifndef NVPEER_GLUE_H
#define NVPEER_GLUE_H

#include <linux/types.h>
#include "../../include/rdma/peer_mem.h"
#include "../../include/nv-p2p.h"

struct device;
struct pci_dev;
struct scatterlist;

/* Module parameters: declared in C so they appear read-only under /sys/module/<name>/parameters. */
int nvpeer_glue_peerdirect_support(void);
int nvpeer_glue_persistent_api_support(void);
int nvpeer_glue_share_pins(void);

/*
 * The foreign functions, resolved at load time through weak references: a missing provider
 * gives a NULL pointer and our own diagnosis instead of the loader's "Unknown symbol".
 */
struct nvpeer_p2p_api {
	int (*get_pages)(uint64_t p2p_token, uint32_t va_space, uint64_t virtual_address,
			 uint64_t length, struct nvidia_p2p_page_table **page_table,
			 void (*free_callback)(void *data), void *data);
	int (*put_pages)(uint64_t p2p_token, uint32_t va_space, uint64_t virtual_address,
			 struct nvidia_p2p_page_table *page_table);
	int (*dma_map_pages)(struct pci_dev *peer, struct nvidia_p2p_page_table *page_table,
			     struct nvidia_p2p_dma_mapping **dma_mapping);
	int (*dma_unmap_pages)(struct pci_dev *peer, struct nvidia_p2p_page_table *page_table,
			       struct nvidia_p2p_dma_mapping *dma_mapping);
	/* 535.43.02+ only. */
	int (*get_pages_persistent)(uint64_t virtual_address, uint64_t length,
				    struct nvidia_p2p_page_table **page_table, uint32_t flags);
	int (*put_pages_persistent)(uint64_t virtual_address,
				    struct nvidia_p2p_page_table *page_table, uint32_t flags);
	/* <= 530 only: value of nvidia_p2p_cap_persistent_pages, or -1 when not exported. */
	int cap_persistent_pages;
};

struct nvpeer_core_api {
	void *(*register_client)(const struct peer_memory_client *peer_client,
				 invalidate_peer_memory *invalidate_callback);
	void (*unregister_client)(void *reg_handle);
	/* The generation markers (core_gen.rs): whether the core exports these two symbols. */
	bool exports_peer_private_data;
	bool exports_stop_invalidation_notifier;
};

void nvpeer_glue_resolve(struct nvpeer_p2p_api *p2p, struct nvpeer_core_api *core);

/* The module's version string (NVPEER_VERSION, also MODULE_VERSION), NUL-terminated. */
const char *nvpeer_glue_version(void);

/* Whether a module of that name is loaded (its /sys/module/<name> exists). */
bool nvpeer_glue_module_loaded(const char *name);

/* sg_dma_address(sg) = addr, sg_dma_len(sg) = sg->length = len (no struct page behind it). */
void nvpeer_glue_sg_set_dma(struct scatterlist *sg, uint64_t addr, unsigned int len);
unsigned int nvpeer_glue_dma_max_seg_size(struct device *dev);

/*
 * The PCI device `dev` is (NULL when it is not a PCI device), with no reference taken: the
 * core's DMA device is its ib_device's parent, which outlives every umem. In C on every kernel:
 * 6.12's Rust bindings have no PCI declarations at all.
 */
struct pci_dev *nvpeer_glue_to_pci_dev(struct device *dev);

/*
 * Thread groups (owner.rs): the calling task's thread group (struct pid *, no reference: an
 * address, to spread pins over locks; a pin's owner is its record's, nvpeer_glue_record_init),
 * whether the calling task belongs to a given one, and its pid number (init namespace) for log
 * lines.
 */
void *nvpeer_glue_current_tgid(void);
bool nvpeer_glue_current_in_tgid(const void *pid);
int nvpeer_glue_pid_nr(const void *pid);

/* try_module_get / module_put: static inline (no Rust helper) without CONFIG_MODULE_UNLOAD. */
struct module;
bool nvpeer_glue_module_get(struct module *module);
void nvpeer_glue_module_put(struct module *module);

/*
 * The module's work item that drops the pins NVIDIA's free callbacks handed over
 * (nvpeer_drain_deferred, in pin.rs); flushed at module exit.
 */
void nvpeer_glue_schedule_deferred(void);
void nvpeer_glue_flush_deferred(void);
void nvpeer_drain_deferred(void);

/*
 * lockdep_assert_held() for a registry shard: WARNs once when state guarded by one shard's lock is
 * reached with another's held (a bug of ours; the VM suites fail on the WARN).
 */
void nvpeer_glue_warn_wrong_shard(unsigned int held, unsigned int guarding);

/*
 * Rate limits of the error and warning lines, one budget per class (5 s, burst 10 each), so
 * that lines an application can cause at any rate never hide the rare ones.
 */
enum nvpeer_log_budget {
	/* per-registration failures (freed before mapped, refused pins, core misuse) */
	NVPEER_LOG_REGISTRATION,
	/* pin lifetime events (an unpin NVIDIA refused or left to its callback, a lost reference) */
	NVPEER_LOG_PIN_LIFETIME,
	NVPEER_LOG_BUDGETS
};
bool nvpeer_glue_ratelimit(unsigned int budget);
/* Dynamic debug: `echo 'module nvidia_peermem +p' > /proc/dynamic_debug/control`. */
bool nvpeer_glue_debug_enabled(void);
void nvpeer_glue_debug(const char *msg);

/*
 * The files under /sys/module/<name>/nvpeer/: the glue makes them, Rust (show.rs) writes their
 * text into a show's buffer of `size` bytes and returns its length (or -errno). The counters are
 * stats.rs': NVPEER_STATS files under nvpeer/stats/, named by nvpeer_stat_name.
 */
#define NVPEER_STATS 16
const char *nvpeer_stat_name(unsigned int stat);
ssize_t nvpeer_show_stat(unsigned int stat, char *buf, size_t size);
ssize_t nvpeer_show_failures(char *buf, size_t size);

/*
 * /sys/module/<name>/nvpeer/: returns 0 or -errno. core_id (a static string) is shown in
 * nvpeer/core.
 */
int nvpeer_glue_sysfs_init(const char *core_id);
void nvpeer_glue_sysfs_exit(void);

/*
 * NVIDIA's free callback (nvpeer_callback.c): takes a module reference, runs the body (Rust,
 * pin.rs), and drops the reference by a tail jump into module_put.
 */
void nvpeer_glue_free_callback(void *data);
void nvpeer_free_callback(void *data);
/* Test only (NVPEER_PLANT=callback-stall*): stalls the callback after its body's hand-off. */
void nvpeer_glue_plant_callback_stall(void);

/*
 * Who holds pinned GPU memory (issue 37; kmod/README.md "Who holds pinned GPU memory").
 *
 * Each registration keeps its record in its own object (records.rs): what is fixed at acquire
 * (a struct nvpeer_record: process, cgroup, range, comm, time) and its place in its shard's list
 * of registrations, linked and unlinked in critical sections the registration takes anyway, so
 * recording takes no lock and allocates nothing. The reader walks the shards one registration
 * at a time (nvpeer_records_at, in Rust) and prints with no lock held.
 */
struct pid;
struct cgroup;
struct nvpeer_record {
	struct pid *tgid;	/* a reference: the registering thread group */
	struct cgroup *cgroup;	/* a reference (NULL without CONFIG_CGROUPS): its cgroup v2 */
	uint64_t va;
	uint64_t bytes;
	uint64_t since;		/* jiffies at acquire */
	char comm[16];		/* TASK_COMM_LEN */
};
/* Fills `rec` for the current task (takes its references; neither sleeps nor allocates). */
void nvpeer_glue_record_init(struct nvpeer_record *rec, uint64_t va, uint64_t bytes);
/* Drops the references of a record made by nvpeer_glue_record_init or _copy. */
void nvpeer_glue_record_fini(struct nvpeer_record *rec);
/* `*dst = *src` with references of its own (under a shard lock: atomic increments only). */
void nvpeer_glue_record_copy(struct nvpeer_record *dst, const struct nvpeer_record *src);

/* What a line shows of one registration, filled by nvpeer_records_at under its shard lock. */
struct nvpeer_record_view {
	struct nvpeer_record rec;	/* a copy with references of its own */
	uint64_t id;			/* unique for the module's lifetime */
	const char *client;		/* a static string */
	const char *state;		/* a static string */
	const void *pin;		/* the pin (compared and hashed, never dereferenced); NULL: none */
	uint64_t pin_bytes;
	uint32_t shares;		/* registrations on the pin */
	bool has_gpu;
	uint8_t gpu[16];		/* NVIDIA's UUID of the pin's GPU, when has_gpu */
	char nic[48];			/* the mapped DMA device's name; "": not mapped */
};
/*
 * The records file's seq_file, in Rust (records.rs, show.rs): nvpeer_records_at fills `view`
 * with the registration at or after position *pos (not 0, the header's; a step is + 1), moves
 * *pos to it and returns true, false after the last; it takes one shard lock at a time, so call
 * it with no lock held. nvpeer_show_record writes the line of `view` into `m` (the header for a
 * NULL view), with `path` (path_size bytes) for its cgroup's path.
 */
bool nvpeer_records_at(loff_t *pos, struct nvpeer_record_view *view);
void nvpeer_show_record(void *m, const struct nvpeer_record_view *view, char *path, size_t path_size);
/* For nvpeer_show_record: what the reader sees of a record, and its seq_file. */
void nvpeer_glue_seq_write(void *m, const char *s, size_t len);
/*
 * The number of thread group `pid` in the reader's pid namespace, 0 once it has exited;
 * *visible says whether the reader's namespace sees it at all.
 */
int nvpeer_glue_reader_tgid(struct pid *pid, bool *visible);
/*
 * `cgroup`'s path in the reader's cgroup namespace into buf, NUL-terminated within `size` bytes;
 * false (buf untouched or cut) when it has none ("?").
 */
bool nvpeer_glue_reader_cgroup_path(struct cgroup *cgroup, char *buf, size_t size);
/* Milliseconds since `since` (jiffies). */
uint64_t nvpeer_glue_age_ms(uint64_t since);
/* The pin's address hashed with a key drawn at load: the `pin` column (never an address). */
uint64_t nvpeer_glue_pin_hash(const void *pin);

/* The name of the PCI device `pdev` into buf (records.rs: the NIC of a DMA mapping). */
void nvpeer_glue_pci_name(const struct pci_dev *pdev, char *buf, unsigned int len);

/*
 * Per-GPU totals under /sys/module/<name>/nvpeer/gpus/GPU-<uuid>/ (pinned_bytes, pins,
 * registrations): the table of GPUs is Rust's (gpus.rs), the directories the glue's.
 * nvpeer_glue_gpu_publish creates GPU `gpu`'s directory `name` (may sleep: no lock held);
 * nvpeer_show_gpu writes a file's text, summed when read (as nvpeer_show_stat).
 */
#define NVPEER_MAX_GPUS 64
enum nvpeer_gpu_file {
	NVPEER_GPU_PINNED_BYTES,
	NVPEER_GPU_PINS,
	NVPEER_GPU_REGISTRATIONS,
};
void nvpeer_glue_gpu_publish(unsigned int gpu, const char *name);
ssize_t nvpeer_show_gpu(unsigned int gpu, unsigned int file, char *buf, size_t size);

/*
 * /sys/kernel/debug/<name>/registrations and nvpeer/gpus/: created after the pin registry,
 * removed before it (their readers walk it). Without debugfs (or on failure: logged) no
 * records file; the module works as before.
 */
int nvpeer_glue_records_init(void);
void nvpeer_glue_records_exit(void);

#endif
