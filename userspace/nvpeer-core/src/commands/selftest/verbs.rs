// SPDX-License-Identifier: MIT OR Apache-2.0
//! Registration through `ibv_reg_mr` on an RDMA device: a loopback transfer whose client
//! buffer is the memory under test, write then read, every byte verified.

use std::sync::Arc;

use super::{Run, SelftestOpts};
use crate::commands::bench::cuda::Cuda;
use crate::commands::bench::mem::{MemKind, RegPath};
use crate::commands::bench::{self, BenchError, BenchOpts, Mode, Op};
use crate::commands::stats;
use crate::host::Host;

pub(super) fn verbs_register(
    r: &mut Run,
    host: &Host,
    opts: &SelftestOpts,
    mem: MemKind,
    cuda: Option<Arc<Cuda>>,
    size: usize,
) -> Option<stats::Stats> {
    let ctx = match bench::ibv::Context::open(opts.device.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            let why = match &e {
                BenchError::NoDevice(_) | BenchError::NoVerbs(_) => format!(
                    "{e}. GPUDirect RDMA needs an RDMA NIC (ConnectX/BlueField with MOFED/DOCA-OFED, or \
                     any verbs device for dma-buf); this host has none, so the registration and the \
                     transfer cannot be tested here (the GPU side above was)"
                ),
                _ => e.to_string(),
            };
            r.fail("register", why);
            return None;
        }
    };
    drop(ctx);
    // A loopback transfer: the client's buffer is the GPU memory under test, the server's is
    // host memory, so exactly one GPU registration happens. Write then read, every byte checked.
    let side = crate::commands::bench::engine::SideOpts {
        device: opts.device.clone(),
        port: opts.port,
        gid_index: opts.gid_index,
        depth: 1,
        mtu: None,
        qps: 1,
    };
    let bo = BenchOpts {
        mode: Mode::Loopback,
        op: Op::Write,
        sizes: vec![size / 2],
        iters: 4,
        latency: false,
        validate: true,
        verify_first: 0,
        mem,
        alloc: opts.alloc,
        reg: RegPath::RegMr,
        gpu: opts.gpu,
        side,
        compare_staged: false,
        duration: None,
        max_size: size / 2,
        bidirectional: false,
        rdma_cm: false,
    };
    match bench::selftest_transfer(&bo, cuda, |_| stats::read(host).ok()) {
        Ok((bytes, during)) => {
            r.ok(
                "register",
                format!(
                    "ibv_reg_mr of {size} bytes of {} memory (peer-memory path)",
                    mem.label()
                ),
            );
            r.ok(
                "transfer",
                format!("RDMA write into and read from GPU memory, {bytes} bytes verified"),
            );
            r.ok("deregister", "ibv_dereg_mr");
            during
        }
        Err(e) => {
            let msg = match &e {
                BenchError::Register(m) => m.clone(),
                other => other.to_string(),
            };
            r.fail("register", msg);
            None
        }
    }
}
