// SPDX-License-Identifier: MIT OR Apache-2.0
//! The dma-buf path: the application exports GPU memory as a dma-buf
//! (`cuMemGetHandleForAddressRange`) and registers it with `ibv_reg_dmabuf_mr`; no peer-memory
//! module is involved. What it needs, each a failure class users meet:
//!
//! * NVIDIA's open kernel modules (the proprietary ones export no GPU memory as dma-buf), of a
//!   release that has `nv-dmabuf.c` (515 and later);
//! * `ib_umem_dmabuf_get` in the kernel (5.12 and later; before, the ioctl answers
//!   EPROTONOSUPPORT);
//! * `ibv_reg_dmabuf_mr` in the installed libibverbs (rdma-core 34 and later);
//! * a NIC driver with dma-buf MRs: NCCL's probe, `ibv_reg_dmabuf_mr(pd, 0, 0, 0, -1, 0)`,
//!   answers EBADF where it has them and EOPNOTSUPP / EPROTONOSUPPORT where not (rdma-core's
//!   `libibverbs/dummy_ops.c` answers EOPNOTSUPP for a provider without the verb, e.g. rxe);
//! * NVIDIA's GRDMA topology rule at attach time (`nv_dma_buf_attach` in
//!   `kernel-open/nvidia/nv-dmabuf.c` calls `nv_grdma_pci_topology_supported` in `nv-pci.c`,
//!   595 snapshot): allowed on a coherent platform; then `NVreg_GrdmaPciTopoCheckOverride` 1
//!   allows and 2 denies every peer; then a GPU passed through to a VM is allowed (assumed for
//!   any VM whose GPU is no vGPU: cpuinfo tells a VM, not passthrough); then, on a chipset the
//!   driver marks `NV_FLAG_PCI_P2P_UNSUPPORTED_CHIPSET`, only a GPU and NIC with a common
//!   upstream bridge (`nv_pci_has_common_pci_switch`). The regkey dates from 570.86.15, the
//!   common-switch rule from 580.65.06 (`../shared/FIELD.md` #1). Which chipsets the driver marks
//!   is in RM's chipset tables, not in sysfs: a pair without a common bridge is assumed allowed
//!   (an unflagged chipset, the common case) and the pair names that assumption (`not_probed`).

use nix::errno::Errno;

use crate::host::kernel::{release_major_minor, symbols};
use crate::host::nvidia_proc::{Flavour, Part, GRDMA_OVERRIDE_ALLOW, GRDMA_OVERRIDE_DENY};
use crate::host::verbs::{DmabufProbe, Verbs, REG_DMABUF_MR_VERSION};

use super::super::{Check, PairFacts, Require};
use super::{predicates, Ctx, GdrPath, Mapping, PairVerdict, PathResult, WhyNot};

/// The first open-module release with `nv-dmabuf.c` (dma-buf export, CUDA 11.7).
const EXPORT_SINCE: [u32; 3] = [515, 0, 0];
/// `GrdmaPciTopoCheckOverride` and the FORCE_PCIE same-IOMMU-group rule.
pub(super) const REGKEY_SINCE: [u32; 3] = [570, 86, 15];
/// The unsupported-chipset common-switch rule.
const COMMON_SWITCH_SINCE: [u32; 3] = [580, 65, 6];

fn why(reason: impl Into<String>, fix: impl Into<String>) -> WhyNot {
    WhyNot {
        reason: reason.into(),
        fix: fix.into(),
    }
}

/// The GPU driver exports GPU memory as dma-buf.
fn driver(ctx: &Ctx) -> Result<(), WhyNot> {
    if ctx.f.nvidia.is_none() {
        return Err(why(
            "nvidia.ko is not loaded",
            "load NVIDIA's open kernel modules (`modprobe nvidia`)",
        ));
    }
    if let Some(e) = ctx.proc_unreadable(Part::Version) {
        return Err(why(
            format!("open or proprietary kernel modules unknown: could not read {e}"),
            "/proc/driver/nvidia/version should be the driver's own text: check its permissions, or report its content as a bug",
        ));
    }
    let Some(v) = ctx.f.nvidia_proc.as_ref().and_then(|p| p.version.as_ref()) else {
        return Err(why(
            "/proc/driver/nvidia/version is absent: open or proprietary kernel modules unknown",
            "load NVIDIA's driver, whose version file says \"Open Kernel Module\" for the open modules",
        ));
    };
    if v.flavour == Flavour::Proprietary {
        return Err(why(
            "NVIDIA's proprietary kernel modules export no GPU memory as dma-buf (/proc/driver/nvidia/version has no \"Open Kernel Module\")",
            "install the open kernel modules of the same driver (the `-open` packages, or the GPU Operator's driver.kernelModuleType=open); GPUs before Turing have none: use peer memory",
        ));
    }
    if let Some(r) = v.release() {
        if !r.at_least(EXPORT_SINCE) {
            return Err(why(
                format!("driver {r} predates dma-buf export (open kernel modules 515 and later)"),
                "upgrade the driver to 515 or later (open kernel modules)",
            ));
        }
    }
    Ok(())
}

/// The kernel side: `ib_umem_dmabuf_get`, else the release.
fn kernel(ctx: &Ctx, r: &mut PathResult) -> Result<(), WhyNot> {
    let release = ctx.f.kernel_release.as_deref();
    let old = release
        .and_then(release_major_minor)
        .filter(|v| *v < (5, 12));
    match ctx.f.kallsyms.lookup(symbols::IB_UMEM_DMABUF_GET) {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(why(
            match (old, release) {
                (Some(_), Some(rel)) => format!("kernel {rel} is older than 5.12: no ib_umem_dmabuf_get, so the kernel has no dma-buf MRs"),
                _ => "the kernel exports no ib_umem_dmabuf_get (ib_core not loaded, or built without dma-buf support)".to_owned(),
            },
            "a kernel 5.12 or later with its RDMA stack loaded (`modprobe ib_core`), or MOFED/DOCA-OFED built for this kernel with dma-buf support",
        )),
        Err(_) => match (old, release) {
            (Some(_), Some(rel)) => Err(why(
                format!("kernel {rel} is older than 5.12: no dma-buf MRs"),
                "a kernel 5.12 or later",
            )),
            _ => {
                r.notes.push(format!(
                    "ib_umem_dmabuf_get not looked up (/proc/kallsyms not readable); kernel {} is 5.12 or later",
                    release.unwrap_or("(release unknown)")
                ));
                Ok(())
            }
        },
    }
}

/// How the caller gets `ibv_reg_dmabuf_mr` from libibverbs, which decides whether the symbol
/// version counts.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Lookup {
    /// NCCL: `dlvsym` at [`REG_DMABUF_MR_VERSION`] (`src/misc/ibvsymbols.cc`).
    Versioned,
    /// UCX, libfabric (linked, a direct call) and NVSHMEM (`dlsym`): the default symbol, whatever
    /// version it carries ([`super::modes`] names the sources).
    DefaultSymbol,
}

/// libibverbs has the verb (`lookup`: at the version NCCL asks for, or any).
fn libibverbs(ctx: &Ctx, r: &mut PathResult, lookup: Lookup) -> Result<(), WhyNot> {
    match &ctx.f.verbs {
        Verbs::Probed {
            reg_dmabuf_mr: Some(false),
            ..
        } => Err(why(
            "the installed libibverbs has no ibv_reg_dmabuf_mr (rdma-core older than 34)",
            "install rdma-core 34 or later (or MOFED/DOCA-OFED's userspace)",
        )),
        Verbs::Probed {
            reg_dmabuf_mr: Some(true),
            reg_dmabuf_mr_versioned: Some(false),
            ..
        } if lookup == Lookup::Versioned => Err(why(
            format!("the installed libibverbs exports ibv_reg_dmabuf_mr, but not at symbol version {REG_DMABUF_MR_VERSION}, the version NCCL loads it by (dlvsym in src/misc/ibvsymbols.cc): NCCL gets no dma-buf registration"),
            "install rdma-core's libibverbs 34 or later (its symbol map puts ibv_reg_dmabuf_mr at IBVERBS_1.12), or MOFED/DOCA-OFED's userspace",
        )),
        Verbs::Probed { .. } => Ok(()),
        Verbs::Unavailable { reason } => Err(why(
            format!("libibverbs could not be loaded: {reason}"),
            "install rdma-core's libibverbs (Debian: libibverbs1 ibverbs-providers) or MOFED's userspace",
        )),
        Verbs::Skipped { reason } => {
            r.not_probed.push(format!(
                "libibverbs' ibv_reg_dmabuf_mr and the NIC's answer to NCCL's probe ({reason})"
            ));
            Ok(())
        }
    }
}

/// The start of the reason a pair's dma-buf is unknown for: facts recorded by an older nvpeer
/// (before `facts.verbs.reg_dmabuf_mr_versioned`) say libibverbs has `ibv_reg_dmabuf_mr`, not at
/// which symbol version, and NCCL loads the verb only at [`REG_DMABUF_MR_VERSION`].
pub(super) const VERSION_UNRECORDED: &str =
    "whether NCCL can load libibverbs' ibv_reg_dmabuf_mr is unknown";

/// The reason a pair's dma-buf failed is [`VERSION_UNRECORDED`]: unknown, not a failure.
pub(super) fn version_unrecorded(w: &WhyNot) -> bool {
    w.reason.starts_with(VERSION_UNRECORDED)
}

/// libibverbs' verb at the version NCCL loads it by, where the facts do not record the version
/// (`--facts` of an older nvpeer): unknown, never taken for present or absent. Judged after every
/// other condition, so that a pair that fails for a known reason says that reason.
fn libibverbs_version(ctx: &Ctx) -> Result<(), WhyNot> {
    match &ctx.f.verbs {
        Verbs::Probed {
            reg_dmabuf_mr: Some(true),
            reg_dmabuf_mr_versioned: None,
            ..
        } => Err(why(
            format!("{VERSION_UNRECORDED}: these facts, of an older nvpeer, record that it is exported but not at which symbol version, and NCCL loads it only at {REG_DMABUF_MR_VERSION} (dlvsym in src/misc/ibvsymbols.cc)"),
            "run this nvpeer's `check` on the host (its facts record facts.verbs.reg_dmabuf_mr_versioned), or `objdump -T libibverbs.so.1 | grep ibv_reg_dmabuf_mr` there",
        )),
        _ => Ok(()),
    }
}

/// `EOPNOTSUPP`, `EBADF`, ...: the name of a probe's errno (0: the probe registered).
fn errno_name(errno: i32) -> String {
    match Errno::from_raw(errno) {
        _ if errno == 0 => "success".to_owned(),
        Errno::UnknownErrno => format!("errno {errno}"),
        e => format!("{e:?}"),
    }
}

/// The NIC's answer to NCCL's probe.
fn nic(ctx: &Ctx, p: &PairFacts) -> Result<(), WhyNot> {
    let Verbs::Probed { devices, .. } = &ctx.f.verbs else {
        return Ok(());
    };
    // EPROTONOSUPPORT: the kernel's uverbs has no dma-buf MR method at all.
    let no_method = |errno: &i32| Errno::from_raw(*errno) == Errno::EPROTONOSUPPORT;
    match devices.iter().find(|d| d.name == p.nic).map(|d| &d.dmabuf) {
        Some(DmabufProbe::Supported { .. }) => Ok(()),
        Some(DmabufProbe::Unsupported { errno }) if no_method(errno) => Err(why(
            format!("{} answers NCCL's probe (ibv_reg_dmabuf_mr with fd -1) with EPROTONOSUPPORT: the kernel has no dma-buf MR method (older than 5.12)", p.nic),
            "a kernel 5.12 or later",
        )),
        Some(DmabufProbe::Unsupported { errno }) => Err(why(
            format!("{} answers NCCL's probe (ibv_reg_dmabuf_mr with fd -1) with {}: its driver has no dma-buf MRs", p.nic, errno_name(*errno)),
            "a NIC driver with dma-buf MRs (mlx5 from kernel 5.12 / MOFED 5.5, efa, bnxt_re, irdma, ...) and its provider library",
        )),
        Some(DmabufProbe::NotRun { reason }) => Err(why(
            format!("NCCL's probe could not run on {}: {reason}", p.nic),
            "make the device usable from libibverbs (permissions on /dev/infiniband, the provider library)",
        )),
        None => Err(why(
            format!("libibverbs does not list {}", p.nic),
            "install the NIC's provider library (Debian: ibverbs-providers; MOFED: its userspace)",
        )),
    }
}

/// NVIDIA's GRDMA topology rule for this pair, as the installed driver release has it.
fn topology(ctx: &Ctx, p: &PairFacts, r: &mut PathResult) -> Result<(), WhyNot> {
    if p.coherent {
        // "Skip topo check on coherent platforms since NIC can map over C2C anyway".
        return Ok(());
    }
    let Some(release) = &ctx.release else {
        r.notes.push(
            "NVIDIA's GRDMA topology rule not judged: the driver release is unknown".to_owned(),
        );
        return Ok(());
    };
    if !release.at_least(REGKEY_SINCE) {
        return Ok(());
    }
    // The override decides for every pair (2 refuses them all): unread, the answer is unknown.
    let override_ = ctx.params.and_then(|p| p.grdma_pci_topo_check_override());
    if let Some(e) = ctx
        .proc_unreadable(Part::Params)
        .filter(|_| override_.is_none())
    {
        return Err(why(
            format!("GrdmaPciTopoCheckOverride unknown: could not read {e}"),
            "/proc/driver/nvidia/params should be the driver's own text: check its permissions, or report its content as a bug",
        ));
    }
    match override_ {
        Some(GRDMA_OVERRIDE_ALLOW) => {
            r.notes.push(
                "GrdmaPciTopoCheckOverride=1: NVIDIA's topology check is skipped".to_owned(),
            );
            return Ok(());
        }
        Some(GRDMA_OVERRIDE_DENY) => {
            return Err(why(
                "GrdmaPciTopoCheckOverride=2 makes NVIDIA's driver refuse every GPUDirect RDMA dma-buf attach",
                "remove NVreg_GrdmaPciTopoCheckOverride=2 from the nvidia module options",
            ))
        }
        _ => {}
    }
    // NV_FLAG_PASSTHRU is set by RmInitAdapter (osinit.c) for a GPU passed through to a VM
    // (IS_PASSTHRU), not for a vGPU; cpuinfo's `hypervisor` tells a VM, not which of the two.
    if ctx.f.hypervisor == Some(true) {
        if predicates::is_vgpu(ctx, &p.gpu) {
            r.notes.push(format!(
                "a vGPU guest: NVIDIA's allowance for passed-through GPUs (NV_FLAG_PASSTHRU) does not apply to {}",
                p.gpu
            ));
        } else {
            r.notes.push(format!(
                "a VM (cpuinfo: hypervisor), {} assumed passed through: NVIDIA's driver allows GPUDirect RDMA there (NV_FLAG_PASSTHRU), not to a vGPU",
                p.gpu
            ));
            return Ok(());
        }
    }
    if release.at_least(COMMON_SWITCH_SINCE) && !p.common_bridge {
        // Refused only where RM set NV_FLAG_PCI_P2P_UNSUPPORTED_CHIPSET, which nothing outside
        // the driver shows: assumed unflagged, and said so.
        r.not_probed.push(format!(
            "NVIDIA's unsupported-chipset rule for {}-{} ({}, no common PCIe bridge): driver {release} refuses its dma-buf attach (error 524) only where RM flags this chipset NV_FLAG_PCI_P2P_UNSUPPORTED_CHIPSET, which sysfs does not show (NVreg_GrdmaPciTopoCheckOverride=1 lifts it)",
            p.gpu, p.nic, p.class
        ));
    }
    Ok(())
}

/// Every condition in the order a registration meets them, then the mapping NCCL asks for at
/// attach time; last, the verb's symbol version where the facts do not record it (only for a
/// caller that looks it up by version): unknown only where nothing else already fails.
fn conditions(
    ctx: &Ctx,
    p: &PairFacts,
    r: &mut PathResult,
    lookup: Lookup,
) -> Result<Mapping, WhyNot> {
    driver(ctx)?;
    kernel(ctx, r)?;
    libibverbs(ctx, r, lookup)?;
    nic(ctx, p)?;
    topology(ctx, p, r)?;
    let mapping = predicates::dmabuf_mapping(ctx, p)?;
    match lookup {
        Lookup::Versioned => libibverbs_version(ctx)?,
        Lookup::DefaultSymbol => {}
    }
    Ok(mapping)
}

/// The first release whose `nv-dmabuf.c` exports CDMM memory (`MEMORY_DEVICE_COHERENT` pages).
const CDMM_EXPORT_SINCE: [u32; 3] = [595, 0, 0];

/// dma-buf for one pair as NCCL meets it: the conditions, then the mapping NCCL asks for at
/// attach time.
pub(super) fn pair(ctx: &Ctx, p: &PairFacts) -> PathResult {
    pair_by(ctx, p, Lookup::Versioned)
}

/// dma-buf for one pair as a caller that looks the verb up by `lookup` meets it.
pub(super) fn pair_by(ctx: &Ctx, p: &PairFacts, lookup: Lookup) -> PathResult {
    let mut r = PathResult::works(Mapping::Pcie);
    match conditions(ctx, p, &mut r, lookup) {
        Ok(mapping) => {
            // After the probes' own entries, which the registration rests on first.
            let cdmm = ctx.params.and_then(|p| p.coherent_gpu_memory_mode()) == Some("driver");
            if p.coherent
                && cdmm
                && !ctx
                    .release
                    .as_ref()
                    .is_some_and(|r| r.at_least(CDMM_EXPORT_SINCE))
            {
                r.not_probed.push(format!(
                    "dma-buf export of CDMM memory on driver {} (595's nv-dmabuf.c added the CDMM path; before it, not judged)",
                    ctx.release
                        .as_ref()
                        .map_or_else(|| "(release unknown)".to_owned(), ToString::to_string)
                ));
            }
            PathResult {
                mapping: Some(mapping),
                ..r
            }
        }
        Err(w) => PathResult {
            works: Err(w),
            mapping: None,
            not_probed: Vec::new(),
            notes: r.notes,
        },
    }
}

/// The host-wide facts, for the row.
fn summary(ctx: &Ctx) -> String {
    let f = ctx.f;
    let gpu = match f.nvidia_proc.as_ref().and_then(|p| p.version.as_ref()) {
        Some(v) => format!(
            "{} kernel modules{}",
            match v.flavour {
                Flavour::Open => "open",
                Flavour::Proprietary => "proprietary",
            },
            v.release
                .as_deref()
                .map_or_else(String::new, |r| format!(" {r}"))
        ),
        None if ctx.proc_unreadable(Part::Version).is_some() => {
            "/proc/driver/nvidia/version unreadable".to_owned()
        }
        None if f.nvidia.is_some() => "no /proc/driver/nvidia/version".to_owned(),
        None => "not loaded".to_owned(),
    };
    let kernel = match f.kallsyms.lookup(symbols::IB_UMEM_DMABUF_GET) {
        Ok(Some(_)) => "ib_umem_dmabuf_get exported",
        Ok(None) => "no ib_umem_dmabuf_get",
        Err(_) => "ib_umem_dmabuf_get unknown",
    };
    let kernel = match &f.kernel_release {
        Some(rel) => format!("kernel {rel}: {kernel}"),
        None => format!("kernel: {kernel}"),
    };
    let verbs = match &f.verbs {
        Verbs::Probed {
            devices,
            reg_dmabuf_mr,
            reg_dmabuf_mr_versioned,
        } => {
            let has = match (reg_dmabuf_mr, reg_dmabuf_mr_versioned) {
                (Some(true), Some(true)) => format!("ibv_reg_dmabuf_mr@{REG_DMABUF_MR_VERSION}"),
                (Some(true), Some(false)) => {
                    format!("ibv_reg_dmabuf_mr, not at {REG_DMABUF_MR_VERSION}")
                }
                (Some(true), None) => {
                    "ibv_reg_dmabuf_mr present, its symbol version not recorded".to_owned()
                }
                (Some(false), _) => "no ibv_reg_dmabuf_mr".to_owned(),
                (None, _) => "ibv_reg_dmabuf_mr unknown".to_owned(),
            };
            let probes = if devices.is_empty() {
                "no verbs device to probe".to_owned()
            } else {
                devices
                    .iter()
                    .map(|d| match &d.dmabuf {
                        DmabufProbe::Supported { errno } => {
                            format!("{} supports it ({})", d.name, errno_name(*errno))
                        }
                        DmabufProbe::Unsupported { errno } => {
                            format!("{} does not ({})", d.name, errno_name(*errno))
                        }
                        DmabufProbe::NotRun { reason } => {
                            format!("{} not probed ({reason})", d.name)
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            format!("libibverbs: {has}; NIC probe (NCCL's ibv_reg_dmabuf_mr(fd=-1)): {probes}")
        }
        Verbs::Skipped { reason } | Verbs::Unavailable { reason } => {
            format!("libibverbs and the NIC probe: not probed ({reason})")
        }
    };
    let topo = match ctx.params.and_then(|p| p.grdma_pci_topo_check_override()) {
        Some(v) => format!("; GrdmaPciTopoCheckOverride={v}"),
        None => String::new(),
    };
    format!(
        "GPU driver: {gpu}; {kernel}; {verbs}{topo}; NCCL_DMABUF_ENABLE={}",
        u8::from(f.nccl_env.dmabuf_enable)
    )
}

/// The `dmabuf` row: the host's dma-buf facts, and the pairs it does not carry.
pub(super) fn row(ctx: &Ctx, pairs: &[PairVerdict]) -> Check {
    let detail = summary(ctx);
    let missing: Vec<(&PairVerdict, &WhyNot)> = pairs
        .iter()
        .filter_map(|p| Some((p, p.why_not.get(&GdrPath::Dmabuf)?)))
        .collect();
    let host = driver(ctx).err();
    let (first, fix) = match (missing.first(), &host) {
        (Some((p, w)), _) => (format!("{}: {}", p.name(), w.reason), w.fix.clone()),
        (None, Some(w)) if pairs.is_empty() => (w.reason.clone(), w.fix.clone()),
        _ => return Check::ok("dmabuf", detail),
    };
    let more = if missing.len() > 1 {
        format!(" (and {} more pairs)", missing.len() - 1)
    } else {
        String::new()
    };
    let detail = format!("{detail}: not for {first}{more}");
    // A driver file that could not be read decides this: unknown, not a failure.
    let override_known = ctx
        .params
        .and_then(|p| p.grdma_pci_topo_check_override())
        .is_some();
    let unread = ctx.proc_unreadable(Part::Version).or(ctx
        .proc_unreadable(Part::Params)
        .filter(|_| !override_known));
    if let Some(e) = unread {
        return Check::new(
            "dmabuf",
            super::super::Status::Unknown,
            format!("{detail}; could not read: {e}"),
            Some(fix),
        );
    }
    // Only the verb's symbol version, which the facts do not record, stands in the way.
    if missing.iter().all(|(_, w)| version_unrecorded(w)) && !missing.is_empty() {
        return Check::new("dmabuf", super::super::Status::Unknown, detail, Some(fix));
    }
    if ctx.options.require == Require::Dmabuf {
        Check::fail("dmabuf", detail, fix)
    } else {
        Check::warn("dmabuf", detail, fix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_names_are_nix_s() {
        assert_eq!(errno_name(Errno::EOPNOTSUPP as i32), "EOPNOTSUPP");
        assert_eq!(errno_name(Errno::EPROTONOSUPPORT as i32), "EPROTONOSUPPORT");
        assert_eq!(errno_name(Errno::EBADF as i32), "EBADF");
        // Any errno by its name (it was "errno 22"), 0 as the probe's success.
        assert_eq!(errno_name(Errno::EINVAL as i32), "EINVAL");
        assert_eq!(errno_name(0), "success");
        assert_eq!(errno_name(100_000), "errno 100000");
    }
}
