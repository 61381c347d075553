/* SPDX-License-Identifier: GPL-2.0 */
/* Everything bindgen turns into kmod/nvpeer_bindings.rs (see Kbuild). */
#include "../../include/rdma/peer_mem.h"
#include "../../include/nv-p2p.h"
#include "nvpeer_glue.h"
