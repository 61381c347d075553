// SPDX-License-Identifier: MIT OR Apache-2.0
//! `nvpeer selftest`: proves that a GPU registration goes through our module. Allocates GPU
//! memory (CUDA, or the nv_p2p_sim stand-in's "GPU memory" in the test VM), checks it (pointer
//! attributes, dma-buf export, staged copies), snapshots the module's counters, registers the
//! buffer with the RDMA device, moves a verified pattern, deregisters, frees, and checks that
//! exactly one registration with the expected pages and bytes, and its release, went through
//! our client.
//!
//! Registration: `ibv_reg_mr` on the RDMA device, or, when /dev/peer_core_sim exists (the test
//! VM: upstream ib_core has no peer-memory hook), the stand-in core's REG_MR test interface,
//! which runs the same peer-memory client calls MOFED's core would.
//!
//! `sim_core.rs` is the peer_core_sim registration, `verbs.rs` the `ibv_reg_mr` one,
//! `counters.rs` the comparison of the module's counters before, during and after.

mod counters;
mod sim_core;
mod verbs;

use std::sync::Arc;

use serde::Serialize;

use crate::commands::bench::cuda::{Cuda, DmabufMapping};
use crate::commands::bench::cuda_alloc::{CudaAlloc, RegistrationPath};
use crate::commands::bench::mem::{Buffer, MemKind, RegPath};
use crate::commands::bench::registration::Got;
use crate::commands::bench::{self, BenchError};
use crate::commands::stats;
use crate::host::Host;
use counters::compare_counters;
use sim_core::sim_core_register;
use verbs::verbs_register;

pub const SCHEMA: &str = "nvpeer.selftest/1";

const PEER_CORE_SIM: &str = "/dev/peer_core_sim";

const GPU_PAGE: u64 = 64 << 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    Fail,
    Skip,
}

#[derive(Clone, Debug, Serialize)]
pub struct Step {
    pub name: &'static str,
    pub status: Status,
    pub detail: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct SelftestReport {
    pub schema: &'static str,
    pub passed: bool,
    pub memory: String,
    pub registration: String,
    pub size: u64,
    pub steps: Vec<Step>,
    /// The mode this run got, in `check`'s words: `GDR, peer memory` where a registration
    /// went through, `staged` where only the host copies did, `none` where neither did.
    pub got: Got,
}

#[derive(Clone, Debug)]
pub struct SelftestOpts {
    pub mem: Option<MemKind>,
    /// How CUDA memory is allocated.
    pub alloc: CudaAlloc,
    pub size: usize,
    pub device: Option<String>,
    pub gpu: i32,
    pub port: u8,
    pub gid_index: Option<i32>,
}

struct Run {
    steps: Vec<Step>,
}

impl Run {
    fn ok(&mut self, name: &'static str, detail: impl Into<String>) {
        self.steps.push(Step {
            name,
            status: Status::Ok,
            detail: detail.into(),
        });
    }
    fn fail(&mut self, name: &'static str, detail: impl Into<String>) {
        self.steps.push(Step {
            name,
            status: Status::Fail,
            detail: detail.into(),
        });
    }
    fn skip(&mut self, name: &'static str, detail: impl Into<String>) {
        self.steps.push(Step {
            name,
            status: Status::Skip,
            detail: detail.into(),
        });
    }
}

fn choose_mem(opts: &SelftestOpts) -> Result<MemKind, String> {
    if let Some(m) = opts.mem {
        return Ok(m);
    }
    if bench::cuda::available().is_ok() {
        return Ok(MemKind::Cuda);
    }
    if std::path::Path::new("/dev/nv_p2p_sim").exists() {
        return Ok(MemKind::Sim);
    }
    Err(format!(
        "no GPU memory to test: {}, and no nv_p2p_sim stand-in (/dev/nv_p2p_sim)",
        bench::cuda::available()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    ))
}

/// Runs the self-test; every step is recorded, later steps run where they still make sense.
pub fn run(host: &Host, opts: &SelftestOpts) -> SelftestReport {
    let mut r = Run { steps: Vec::new() };
    let size = opts.size.max(1).div_ceil(GPU_PAGE as usize) * GPU_PAGE as usize;
    let via_sim_core = std::path::Path::new(PEER_CORE_SIM).exists();
    let mut report = SelftestReport {
        schema: SCHEMA,
        passed: false,
        memory: String::new(),
        registration: String::new(),
        size: size as u64,
        steps: Vec::new(),
        got: Got::none("not run"),
    };

    // ---------------------------------------------------------------- the module
    let before = match stats::read(host) {
        Ok(s) if s.module.is_some() => {
            r.ok(
                "module",
                format!(
                    "{} loaded (nvpeer), counters readable",
                    s.module.clone().unwrap_or_default()
                ),
            );
            Some(s)
        }
        Ok(_) => {
            r.fail(
                "module",
                "the nvpeer peer-memory module is not loaded (no /sys/module/nvidia_peermem/nvpeer): \
                 load it with `modprobe nvidia_peermem` (or insmod kmod/nvidia_peermem.ko)",
            );
            None
        }
        Err(e) => {
            r.fail("module", format!("cannot read the module's counters: {e}"));
            None
        }
    };

    // ---------------------------------------------------------------- GPU memory
    let mem = match choose_mem(opts) {
        Ok(m) => m,
        Err(e) => {
            r.fail("gpu_memory", e);
            report.got = got(&r.steps, via_sim_core);
            report.steps = r.steps;
            return report;
        }
    };
    report.memory = mem.label().to_owned();
    if opts.alloc != CudaAlloc::Device && mem != MemKind::Cuda {
        r.fail(
            "allocate",
            format!(
                "--alloc {} is a CUDA allocation: it needs --mem cuda",
                opts.alloc.api()
            ),
        );
        report.got = got(&r.steps, via_sim_core);
        report.steps = r.steps;
        return report;
    }
    let cuda = if mem == MemKind::Cuda {
        match Cuda::open(opts.gpu) {
            Ok(c) => {
                r.ok(
                    "cuda",
                    format!(
                        "GPU {}: {}, CUDA driver API {}, GPUDirect RDMA {}, dma-buf {}",
                        c.info.ordinal,
                        c.info.name,
                        bench::cuda::version_str(c.info.driver_version),
                        if c.info.gpudirect_rdma_supported {
                            "supported"
                        } else {
                            "NOT supported"
                        },
                        if c.info.dmabuf_supported {
                            "supported"
                        } else {
                            "not supported"
                        }
                    ),
                );
                Some(Arc::new(c))
            }
            Err(e) => {
                r.fail("cuda", e.to_string());
                report.steps = r.steps;
                return report;
            }
        }
    } else {
        None
    };
    let buf = match mem {
        MemKind::Cuda => cuda
            .as_ref()
            .ok_or_else(|| BenchError::Cuda("not initialised".to_owned()))
            .and_then(|c| Buffer::cuda(c.clone(), opts.alloc, size)),
        MemKind::Sim => Buffer::sim(size),
        MemKind::Host => Buffer::host(size),
    };
    let buf = match buf {
        Ok(b) => {
            report.memory = b.describe();
            r.ok(
                "allocate",
                format!(
                    "{} bytes of {} memory at {:#x}",
                    b.len,
                    b.describe(),
                    b.addr
                ),
            );
            b
        }
        Err(e) => {
            r.fail("allocate", e.to_string());
            report.got = got(&r.steps, via_sim_core);
            report.steps = r.steps;
            return report;
        }
    };
    // The registration path the pointer takes, from the pointer and allocation-property
    // queries: only GPU memory through the peer-memory client is what this self-test proves.
    let mut path = RegistrationPath::PeerMemory;
    if let Some(c) = &cuda {
        match c.pointer_facts(buf.addr) {
            Ok(f) => {
                path = f.path();
                let attrs = format!(
                    "MEMORY_TYPE={}, IS_MANAGED={}, IS_GPU_DIRECT_RDMA_CAPABLE={}{}",
                    f.memory_type,
                    u8::from(f.is_managed),
                    f.gpudirect_rdma_capable
                        .map_or("unanswered".to_owned(), |v| u8::from(v).to_string()),
                    f.vmm_rdma_flag.map_or(String::new(), |v| format!(
                        ", VMM allocation gpuDirectRDMACapable={}",
                        u8::from(v)
                    ))
                );
                if path == RegistrationPath::PeerMemory {
                    r.ok("pointer_attributes", format!("{attrs}: {}", f.explain()));
                } else {
                    r.fail("pointer_attributes", format!("{attrs}: {}", f.explain()));
                }
            }
            Err(e) => r.fail("pointer_attributes", e.to_string()),
        }
        let dmabuf = if path == RegistrationPath::HostPages {
            Err(None)
        } else {
            c.dmabuf_fd(buf.addr, buf.len, DmabufMapping::Default)
                .map_err(Some)
        };
        match dmabuf {
            Ok(fd) => {
                r.ok(
                    "dmabuf_export",
                    format!(
                        "cuMemGetHandleForAddressRange gave dma-buf fd {fd} for {} bytes",
                        buf.len
                    ),
                );
                // The fd we were just given; a failed close leaves nothing to do.
                let _ = nix::unistd::close(fd);
            }
            Err(Some(e)) => r.fail("dmabuf_export", e.to_string()),
            Err(None) => r.skip(
                "dmabuf_export",
                "dma-buf export is for device memory; this pointer is host pages",
            ),
        }
    } else {
        r.skip("pointer_attributes", "not CUDA memory");
        r.skip("dmabuf_export", "not CUDA memory");
    }
    // Staged copies: host -> GPU -> host, verified, and the copy time.
    let mut bounce = vec![0u8; size];
    match bench::copy_time_us(&buf, &mut bounce, size, 10) {
        Ok(us) => r.ok(
            "staged_copy",
            format!(
                "{} bytes host -> {} -> host verified; GPU -> host copy {:.1} us ({:.2} GB/s)",
                size,
                mem.label(),
                us,
                size as f64 / us / 1e3
            ),
        ),
        Err(e) => r.fail("staged_copy", e.to_string()),
    }

    // ---------------------------------------------------------------- registration
    let during;
    if path != RegistrationPath::PeerMemory {
        report.registration = buf.reg_label(RegPath::RegMr).to_owned();
        r.skip(
            "register",
            "not attempted: this pointer does not take the peer-memory path (pointer_attributes)",
        );
        during = None;
    } else if via_sim_core && mem == MemKind::Sim {
        report.registration =
            "peer_core_sim test interface (REG_MR ioctl: the MOFED core stand-in)".to_owned();
        during = sim_core_register(&mut r, host, &buf, size);
    } else {
        report.registration = RegPath::RegMr.label(mem).to_owned();
        during = verbs_register(&mut r, host, opts, mem, cuda.clone(), size);
    }
    drop(buf);
    r.ok("free", "GPU memory freed");

    // ---------------------------------------------------------------- the counters
    match (before, during, stats::read(host)) {
        _ if path != RegistrationPath::PeerMemory => {
            r.skip("counters", "no registration through our client to count")
        }
        (Some(b), Some(d), Ok(a)) => compare_counters(&mut r, &b, &d, &a, size as u64),
        (None, _, _) => r.fail("counters", "module not loaded: nothing to compare"),
        (_, None, _) => r.fail("counters", "no registration went through"),
        (_, _, Err(e)) => r.fail("counters", e.to_string()),
    }
    report.passed = r.steps.iter().all(|s| s.status != Status::Fail);
    report.got = got(&r.steps, via_sim_core);
    report.steps = r.steps;
    report
}

/// The mode the steps showed, in `check`'s words: the registration (`register`) and the
/// verified transfer (`transfer`) are GPUDirect RDMA through peer memory, the only path this
/// self-test registers; failing that, verified host copies (`staged_copy`) are what a library
/// falls back to (staged), with the dma-buf export (`dmabuf_export`, the GPU's half of the
/// dma-buf path) said where it worked.
fn got(steps: &[Step], via_sim_core: bool) -> Got {
    let ok = |name: &str| {
        steps
            .iter()
            .any(|s| s.name == name && s.status == Status::Ok)
    };
    let detail = |name: &str| {
        steps
            .iter()
            .find(|s| s.name == name)
            .map(|s| format!("{name}: {}", s.detail))
    };
    let peer =
        crate::commands::bench::registration::Registration::of(RegPath::RegMr, MemKind::Cuda, None);
    if ok("register") && ok("transfer") {
        return Got::moved(
            &peer,
            "register and transfer: ibv_reg_mr of GPU memory through the peer-memory client, RDMA write and read verified",
        );
    }
    if ok("register") && via_sim_core {
        return Got::moved(
            &peer,
            "register: the peer_core_sim test interface (the MOFED core stand-in) registered GPU memory through the peer-memory client; no NIC moved data",
        );
    }
    let why = detail("register").unwrap_or_else(|| "register: not reached".to_owned());
    if ok("staged_copy") {
        let export = if ok("dmabuf_export") {
            "; dmabuf_export: the GPU exports its memory as dma-buf (the GPU's half of the dma-buf path)"
        } else {
            ""
        };
        return Got::staged(format!(
            "staged_copy: host -> GPU -> host copies verified; no GPUDirect RDMA registration ({why}){export}"
        ));
    }
    Got::none(why)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(name: &'static str, status: Status, detail: &str) -> Step {
        Step {
            name,
            status,
            detail: detail.to_owned(),
        }
    }

    /// A GPU host without an RDMA NIC (the real H200 record): the GPU side works, nothing
    /// registers: staged, in the word check's per-library lines use there.
    #[test]
    fn a_gpu_host_without_a_nic_got_staged() {
        let steps = [
            step("allocate", Status::Ok, ""),
            step("dmabuf_export", Status::Ok, "fd 7"),
            step("staged_copy", Status::Ok, ""),
            step("register", Status::Fail, "no RDMA device"),
        ];
        let g = got(&steps, false);
        assert_eq!((g.mode.as_str(), g.path), ("staged", None));
        assert_eq!(g.mode, crate::check::gdr_words(None));
        assert!(
            g.shown_by.contains("(register: no RDMA device)")
                && g.shown_by.contains("dmabuf_export: the GPU exports"),
            "{}",
            g.shown_by
        );
        let json = serde_json::to_value(&g).unwrap();
        assert!(json["path"].is_null());
    }

    #[test]
    fn a_registration_that_moved_data_is_gdr_through_peer_memory() {
        let steps = [
            step("staged_copy", Status::Ok, ""),
            step("register", Status::Ok, "ibv_reg_mr"),
            step("transfer", Status::Ok, ""),
        ];
        let g = got(&steps, false);
        assert_eq!(g.mode, "GDR, peer memory");
        assert_eq!(g.path, Some(crate::check::GdrPath::PeerMemory));
        // The stand-in core registers without a NIC: still peer memory, said so.
        let g = got(&steps[..2], true);
        assert_eq!(g.mode, "GDR, peer memory");
        assert!(g.shown_by.contains("no NIC moved data"));
        // Registered without a transfer on a real NIC: not shown.
        assert_eq!(got(&steps[..2], false).mode, "staged");
        // Nothing worked.
        assert_eq!(
            got(&[step("allocate", Status::Fail, "")], false).mode,
            "none"
        );
    }
}
