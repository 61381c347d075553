/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * The rdma-core headers that build.rs hands to bindgen. A missing header stops the build with
 * one line, this #error as libclang prints it, naming the Debian package that ships it.
 */
#if !__has_include(<infiniband/verbs.h>)
#error "nvpeer-core: <infiniband/verbs.h> not found: install libibverbs-dev"
#elif !__has_include(<rdma/rdma_cma.h>)
#error "nvpeer-core: <rdma/rdma_cma.h> not found: install librdmacm-dev"
#else
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#endif
