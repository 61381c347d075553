// SPDX-License-Identifier: GPL-2.0
/*
 * libibverbs for a NIC that cannot read some memory: loaded in libibverbs' place
 * (NVPEER_LIBIBVERBS=.../libibverbs-noread.so), it registers the memory of the devices named in
 * NVPEER_NOREAD_DEVICES (comma-separated) without IBV_ACCESS_REMOTE_READ. The device itself
 * then refuses RDMA reads of that memory (the responder NAKs them and the requester's completion
 * is a remote access error, as in open-mpi/ompi#13183), while RDMA writes into it work: the
 * "writes work, reads fail" class, made by the NIC rather than claimed by the CLI.
 *
 * Everything else is libibverbs' own: this library links against it, and a dlsym() on this
 * library's handle finds every other entry point there (dependencies are searched after it).
 *
 * Build: gcc -shared -fPIC -o libibverbs-noread.so ibv_noread.c -libverbs -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

/* Whether NVPEER_NOREAD_DEVICES names the device. */
static int refuses_reads(const char *name)
{
	const char *list = getenv("NVPEER_NOREAD_DEVICES");
	size_t n = strlen(name);

	while (list && *list) {
		const char *end = strchrnul(list, ',');

		if ((size_t)(end - list) == n && strncmp(list, name, n) == 0)
			return 1;
		list = *end ? end + 1 : end;
	}
	return 0;
}

/* verbs.h makes ibv_reg_mr a macro over __ibv_reg_mr; the exported function is defined here. */
#undef ibv_reg_mr
struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	static struct ibv_mr *(*real)(struct ibv_pd *, void *, size_t, int);

	if (!real) {
		void *lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);

		if (lib)
			real = (struct ibv_mr *(*)(struct ibv_pd *, void *, size_t, int))
				dlvsym(lib, "ibv_reg_mr", "IBVERBS_1.1");
		if (!real) {
			errno = ENOSYS;
			return NULL;
		}
	}
	if (refuses_reads(ibv_get_device_name(pd->context->device)))
		access &= ~IBV_ACCESS_REMOTE_READ;
	return real(pd, addr, length, access);
}
