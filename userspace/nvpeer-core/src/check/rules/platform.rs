// SPDX-License-Identifier: MIT OR Apache-2.0
//! Checks of the PCIe platform: the GPUs and their BAR1, where the NICs sit relative to them,
//! the IOMMU mode and ACS on the bridges between them. On a Grace platform the IOMMU and ACS
//! rules are [`super::grace`]'s, on a Vera platform [`super::vera`]'s.

use crate::host::kernel::{Iommu, IommuMode};
use crate::host::limits::human_bytes;
use crate::host::pci::{acs_matches, Acs};
use crate::host::topo::{self, PathClass, Topology};

use super::super::{AcsFinding, AcsRole, Check, GpuFacts, GraceFacts, PairFacts, PairSource};
use super::predicates::{self, config_acs};
use super::{vera, Ctx};

/// The `gpus` row.
pub(super) fn gpus(ctx: &Ctx) -> Check {
    match (ctx.unreadable("gpus"), ctx.unreadable("pci")) {
        (Some(e), _) => Check::error("gpus", e),
        (None, None) => check_gpus(ctx, &ctx.f.gpus),
        // The GPUs read are listed; a function whose vendor or class is unknown may be one more.
        (None, Some(e)) => {
            let found = check_gpus(ctx, &ctx.f.gpus);
            Check::new(
                "gpus",
                super::super::Status::Unknown,
                format!("{}; could not read: {e}", found.detail),
                Some("the file should be the kernel's text; check its permissions (some need root) or report the content as a bug".to_owned()),
            )
        }
    }
}

/// `bar1`, `topology`, `iommu`, `acs`.
pub(super) fn rows(ctx: &Ctx) -> Vec<Check> {
    let f = ctx.f;
    let bar1 = match (ctx.unreadable("gpus"), ctx.unreadable("bars")) {
        (Some(_), _) => Check::not_examined("bar1", "the GPUs could not be read (see `gpus`)"),
        (None, Some(e)) => Check::error("bar1", e),
        (None, None) => check_bar1(&f.gpus),
    };
    const NO_TOPOLOGY: &str = "PCI or RDMA devices could not be read (see `gpus`, `rdma_devices`)";
    let topology = match &f.topology {
        Some(t) if t.nics.iter().all(|n| n.pci.is_none()) => {
            predicates::unknown_pair_row(f, "topology", "the nearest NIC per GPU")
                .unwrap_or_else(|| check_topology(t, &f.pairs))
        }
        Some(t) => check_topology(t, &f.pairs),
        None => Check::not_examined("topology", NO_TOPOLOGY),
    };
    let iommu = match (ctx.unreadable("iommu"), &f.iommu) {
        (Some(e), _) => Check::error("iommu", e),
        (None, Some(i)) if f.grace.is_some() => grace_iommu(i),
        (None, Some(i)) if f.vera.is_some() => vera::check_iommu(i),
        (None, Some(i)) => check_iommu(i, arch(ctx, i)),
        (None, None) => Check::not_examined("iommu", "the facts have no iommu"),
    };
    let acs = match (&f.topology, ctx.unreadable("acs"), &f.grace) {
        (None, _, _) => Check::not_examined("acs", NO_TOPOLOGY),
        (Some(_), _, Some(g)) => grace_acs(g),
        (Some(_), _, None) if f.vera.is_some() => vera::check_acs(),
        (Some(_), Some(e), None) => Check::error("acs", e),
        (Some(_), None, None) => predicates::unknown_pair_row(
            f,
            "acs",
            "whether ACS redirects traffic between a GPU and its NIC",
        )
        .filter(|_| f.acs.is_empty())
        .unwrap_or_else(|| check_acs(&f.acs, f.kernel_release.as_deref())),
    };
    let mut rows = vec![bar1, topology, iommu, acs];
    rows.extend(unread_details(ctx));
    rows
}

/// `sysfs`: the device files that could not be read and decide nothing (a NUMA node, a CPU
/// list, a PCIe link, a port's physical state): unknown, said once, no verdict rests on them.
fn unread_details(ctx: &Ctx) -> Option<Check> {
    let files: Vec<&str> = ["pci_details", "rdma_details"]
        .into_iter()
        .filter_map(|k| ctx.unreadable(k))
        .collect();
    (!files.is_empty()).then(|| {
        Check::new(
            "sysfs",
            super::super::Status::Unknown,
            format!("could not read: {}", files.join("; ")),
            Some("the file should be the kernel's text; check its permissions (some need root) or report the content as a bug".to_owned()),
        )
    })
}

fn check_gpus(ctx: &Ctx, gpus: &[GpuFacts]) -> Check {
    if gpus.is_empty() {
        return Check::fail(
            "gpus",
            "no NVIDIA GPU on the PCI bus (vendor 0x10de, class 0x0300 or 0x0302)",
            "install the GPU; in a VM pass it through (VFIO); `lspci -d 10de:` should list it",
        );
    }
    Check::ok(
        "gpus",
        gpus.iter()
            .map(|g| {
                let numa = g
                    .numa_node
                    .map_or_else(|| "?".to_owned(), |n| n.to_string());
                let model = ctx
                    .f
                    .nvidia_proc
                    .iter()
                    .flat_map(|p| &p.gpus)
                    .find(|i| i.bus_location == Some(g.address))
                    .and_then(|i| i.model.as_deref())
                    .map_or_else(String::new, |m| format!(" {m}"));
                format!(
                    "{} {} [{:04x}:{:04x}]{model} NUMA {numa}",
                    g.label, g.address, g.vendor, g.device
                )
            })
            .collect::<Vec<_>>()
            .join(", "),
    )
}

/// BAR1 at or below this limits what can be pinned for RDMA at once (CONTRACT 3.3, #27).
const SMALL_BAR1: u64 = 256 << 20;

fn check_bar1(gpus: &[GpuFacts]) -> Check {
    if gpus.is_empty() {
        return Check::ok("bar1", "no GPU to examine");
    }
    let mut parts = Vec::new();
    let mut small = Vec::new();
    let mut unknown = Vec::new();
    for g in gpus {
        match &g.bar1 {
            Some(b) => {
                parts.push(format!(
                    "{} BAR{} {}{}",
                    g.label,
                    b.index,
                    human_bytes(b.size),
                    if b.is_64bit {
                        " (64-bit prefetchable)"
                    } else {
                        " (prefetchable)"
                    }
                ));
                if b.size <= SMALL_BAR1 {
                    small.push(g.label.clone());
                }
            }
            None => unknown.push(g.label.clone()),
        }
    }
    if !small.is_empty() {
        return Check::warn(
            "bar1",
            format!("{}: {} can map only that much GPU memory for peers at once", parts.join(", "), small.join(", ")),
            "enable Resizable BAR / Above 4G decoding in the firmware, or use a GPU with a large BAR1 (datacenter GPUs)",
        );
    }
    if !unknown.is_empty() {
        return Check::warn(
            "bar1",
            format!("no prefetchable BAR visible for {}", unknown.join(", ")),
            "the GPU's resource file shows no prefetchable memory BAR: check the firmware's Above 4G decoding setting",
        );
    }
    Check::ok("bar1", parts.join(", "))
}

/// On a Grace platform a GPU reaches its NIC through C2C (a NIC on the CPU's PCIe: NCCL's P2C)
/// or Data Direct (the DMA function below the GPU's switch): not "far".
fn reached_otherwise(pairs: &[PairFacts], gpu: &str) -> Option<&'static str> {
    pairs
        .iter()
        .filter(|p| p.gpu == gpu && p.coherent)
        .find_map(|p| {
            if p.source == PairSource::DmaDirect {
                Some("Data Direct through the ConnectX-8 DMA function below the GPU's switch")
            } else if matches!(p.class, PathClass::Phb | PathClass::Node) {
                Some("C2C: a NIC on the GPU's CPU, NCCL's P2C path")
            } else {
                None
            }
        })
}

fn check_topology(t: &Topology, pairs: &[PairFacts]) -> Check {
    if t.gpus.is_empty() {
        return Check::ok("topology", "no GPU: nothing to place");
    }
    if t.nics.iter().all(|n| n.pci.is_none()) {
        return Check::ok(
            "topology",
            "no RDMA NIC on PCI (software devices only): nothing to place",
        );
    }
    let describe = |n: &topo::Nearest| {
        let otherwise =
            reached_otherwise(pairs, &n.gpu).map_or_else(String::new, |how| format!("; {how}"));
        format!(
            "{} -> {} {} (NCCL {}{otherwise})",
            n.gpu,
            n.nics.join("/"),
            n.class,
            n.nccl_class
        )
    };
    let far: Vec<&topo::Nearest> = t
        .nearest
        .iter()
        .filter(|n| n.class > PathClass::Pxb && reached_otherwise(pairs, &n.gpu).is_none())
        .collect();
    let detail = t
        .nearest
        .iter()
        .map(describe)
        .collect::<Vec<_>>()
        .join(", ");
    if far.is_empty() {
        Check::ok("topology", format!("nearest NIC per GPU: {detail}"))
    } else {
        Check::warn(
            "topology",
            format!(
                "nearest NIC per GPU: {detail}; no NIC below a PCIe switch shared with {} (paths through the CPU root complex: NCCL disables GPUDirect RDMA beyond PXB by default)",
                far.iter().map(|n| n.gpu.as_str()).collect::<Vec<_>>().join(", ")
            ),
            "put GPU and NIC under one PCIe switch (`nvpeer topo` shows the matrix), or accept the lower bandwidth with NCCL_NET_GDR_LEVEL=PHB (or SYS)",
        )
    }
}

/// The platform, as far as the kernel parameters that set the IOMMU differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Arch {
    Intel,
    Amd,
    Arm64,
    /// x86 of an unknown vendor.
    X86,
    Unknown,
}

/// The platform from the IOMMU's units (`dmar*` Intel, `ivhd*` AMD, `smmu*` Arm) or the NVIDIA
/// driver's build (`for aarch64`, `x86_64`).
fn arch(ctx: &Ctx, i: &Iommu) -> Arch {
    let unit = |prefix: &str| i.units.iter().any(|u| u.starts_with(prefix));
    if unit("dmar") {
        return Arch::Intel;
    }
    if unit("ivhd") {
        return Arch::Amd;
    }
    if unit("smmu") || unit("arm-smmu") {
        return Arch::Arm64;
    }
    let built_for = ctx
        .f
        .nvidia_proc
        .as_ref()
        .and_then(|p| p.version.as_ref())
        .and_then(|v| v.arch.as_deref());
    match built_for {
        Some("aarch64") => Arch::Arm64,
        Some("x86_64") => Arch::X86,
        _ => Arch::Unknown,
    }
}

/// The persistent fix for a translating IOMMU on `arch`, with what it costs.
fn passthrough_fix(arch: Arch) -> String {
    let param = match arch {
        Arch::Intel => "`intel_iommu=on iommu=pt`",
        Arch::Amd | Arch::X86 => "`iommu=pt`",
        Arch::Arm64 => "`iommu.passthrough=1`",
        Arch::Unknown => "the IOMMU passthrough parameter of this architecture (x86: `iommu=pt`; arm64: `iommu.passthrough=1`)",
    };
    format!(
        "add {param} to the kernel command line (GRUB_CMDLINE_LINUX in /etc/default/grub, then update-grub or grub2-mkconfig) and reboot; it costs the IOMMU's protection against stray DMA of host drivers' devices (devices passed to VMs through VFIO keep translated domains)"
    )
}

fn check_iommu(i: &Iommu, arch: Arch) -> Check {
    let cmdline = if i.cmdline.is_empty() {
        "no iommu options on the kernel command line".to_owned()
    } else {
        format!("kernel command line: {}", i.cmdline.join(" "))
    };
    let units = if i.units.is_empty() {
        String::new()
    } else {
        format!("units {}, ", i.units.join(" "))
    };
    let domains = if i.device_domains.is_empty() {
        String::new()
    } else {
        format!(
            ", domains {}",
            i.device_domains
                .iter()
                .map(|(d, t)| format!("{d}={t}"))
                .collect::<Vec<_>>()
                .join(" ")
        )
    };
    let groups = if i.groups == 1 {
        "1 group".to_owned()
    } else {
        format!("{} groups", i.groups)
    };
    let facts = format!("{units}{groups}{domains}; {cmdline}");
    match i.mode {
        IommuMode::Off => Check::ok("iommu", format!("off ({facts})")),
        IommuMode::Passthrough => Check::ok("iommu", format!("passthrough ({facts})")),
        IommuMode::Translated => Check::warn(
            "iommu",
            format!("translating DMA ({facts}): peer-to-peer addresses go through IOMMU translation, which GPUDirect RDMA does not expect and which routes P2P traffic through the root complex"),
            passthrough_fix(arch),
        ),
        IommuMode::Unknown => Check::warn(
            "iommu",
            format!("an IOMMU is present but its domain type is unknown ({facts})"),
            "read /sys/kernel/iommu_groups/*/type as root; identity (passthrough) is what GPUDirect RDMA wants",
        ),
    }
}

/// `pci=config_acs=` clearing the bits that hurt peer-to-peer DMA (Request Redirect, bit 2;
/// Completion Redirect, bit 3; Egress Control, bit 5; the mask is bit 6 .. bit 0) on `bridges`.
fn config_acs_clearing(bridges: &[String]) -> String {
    let entries: Vec<String> = bridges.iter().map(|b| format!("x0x00xx@{b}")).collect();
    format!("pci=config_acs=\"{}\"", entries.join(";"))
}

/// The fix for ACS redirection on `bridges`: the kernel parameter where the kernel has it
/// (6.11), else the firmware setting; `setpci` of exactly those bits (`value:mask`) as a
/// runtime stopgap, lost at reboot; and what it costs.
fn acs_fix(bridges: &[String], kernel: Option<&str>) -> String {
    let has_config_acs = kernel
        .and_then(crate::host::kernel::release_major_minor)
        .is_some_and(|v| v >= (6, 11));
    let persistent = if has_config_acs {
        format!(
            "add {} to the kernel command line (GRUB_CMDLINE_LINUX, update-grub) and reboot",
            config_acs_clearing(bridges)
        )
    } else {
        format!(
            "turn ACS off for these ports in the firmware (BIOS: PCIe ACS / ACS control), or on a kernel 6.11 or later boot with {}",
            config_acs_clearing(bridges)
        )
    };
    let setpci: Vec<String> = bridges
        .iter()
        .map(|b| format!("setpci -s {b} ECAP_ACS+6.w=0000:002c"))
        .collect();
    format!(
        "{persistent}; until the reboot `{}` clears just those bits (lost at reboot); it costs isolation: the GPU, the NIC and their switch then share one IOMMU group, so none can be passed to a VM alone, and their peer-to-peer traffic bypasses the IOMMU",
        setpci.join("; ")
    )
}

fn check_acs(findings: &[AcsFinding], kernel: Option<&str>) -> Check {
    if findings.is_empty() {
        return Check::ok("acs", "no GPU-NIC path below a root complex to examine");
    }
    let hurting: Vec<String> = findings
        .iter()
        .filter(|f| !f.redirecting.is_empty())
        .map(|f| {
            format!(
                "{} on {} ({}-{})",
                f.redirecting.join(" + "),
                f.bridge,
                f.gpu,
                f.nic
            )
        })
        .collect();
    if !hurting.is_empty() {
        let mut bridges: Vec<String> = findings
            .iter()
            .filter(|f| !f.redirecting.is_empty())
            .map(|f| f.bridge.to_string())
            .collect();
        bridges.sort();
        bridges.dedup();
        return Check::warn(
            "acs",
            format!(
                "ACS redirects peer-to-peer traffic up to the root complex: {}",
                hurting.join("; ")
            ),
            acs_fix(&bridges, kernel),
        );
    }
    let unreadable: Vec<String> = findings
        .iter()
        .filter(|f| matches!(f.acs, None | Some(Acs::NotReadable { .. })))
        .map(|f| f.bridge.to_string())
        .collect();
    if !unreadable.is_empty() {
        return Check::warn(
            "acs",
            format!(
                "config space of {} not readable beyond the first 64 bytes: ACS unknown",
                unreadable.join(", ")
            ),
            "run nvpeer check as root to read the ACS control registers",
        );
    }
    let bridges: Vec<String> = findings.iter().map(|f| f.bridge.to_string()).collect();
    Check::ok(
        "acs",
        format!("no P2P redirection on {}", bridges.join(", ")),
    )
}

/// The `acs` row on a Grace platform: `rdma_topo`'s masks, never a config-space write.
fn grace_acs(g: &GraceFacts) -> Check {
    let mut wrong = Vec::new();
    let mut unknown = Vec::new();
    for p in &g.acs_ports {
        let needs = p.role.mask();
        match &p.acs {
            Some(Acs::Present { control, .. }) if !acs_matches(*control, needs) => {
                wrong.push(format!(
                    "{} ({}) has {control:#06x}, needs {needs}",
                    p.bridge,
                    p.role.describe()
                ))
            }
            Some(Acs::Present { .. }) => {}
            Some(Acs::Absent) if p.role != AcsRole::Other => wrong.push(format!(
                "{} ({}) has no ACS capability, needs {needs}",
                p.bridge,
                p.role.describe()
            )),
            Some(Acs::Absent) => {}
            None | Some(Acs::NotReadable { .. }) => unknown.push(p.bridge.to_string()),
        }
    }
    let boot = match config_acs(g) {
        Some(line) => format!(
            "set ACS at boot as rdma_topo does: add {line} to the kernel command line (`rdma_topo write-grub-acs` writes it to /etc/default/grub.d/config-acs.cfg), run update-grub and reboot, then `rdma_topo check` must pass: config_acs came in kernel 6.11, and a list of several devices is parsed right only with Tushar Dave's 2025 fix \"PCI: Fix Extend ACS configurability\" (in NVIDIA's NV-Kernels; on another kernel look for it or its backport)"
        ),
        None => "reboot without ACS changes: the kernel's default (xx111x1) is what rdma_topo requires here".to_owned(),
    };
    let never = "do not change ACS from userspace on this platform (rdma_topo: unprivileged userspace can then trigger platform RAS failures)";
    if !wrong.is_empty() {
        return Check::warn(
            "acs",
            format!(
                "ACS differs from what rdma_topo requires on this Grace platform: {}",
                wrong.join("; ")
            ),
            format!("{boot}; {never}"),
        );
    }
    if !unknown.is_empty() {
        return Check::warn(
            "acs",
            format!(
                "config space of {} not readable beyond the first 64 bytes: ACS unknown",
                unknown.join(", ")
            ),
            "run nvpeer check as root to read the ACS control registers",
        );
    }
    let ports = g.acs_ports.len();
    if g.complexes.is_empty() {
        Check::ok(
            "acs",
            format!("Grace platform without a DMA-Direct complex: the kernel's default ACS on its {ports} Grace/ConnectX bridges, as rdma_topo requires; GPU memory is reached through C2C"),
        )
    } else {
        Check::ok(
            "acs",
            format!("as rdma_topo requires on all {ports} Grace/ConnectX bridges (DMA-Direct complexes: {})", config_acs(g).unwrap_or_default()),
        )
    }
}

/// The `iommu` row on a Grace platform: the SMMU translating is normal there; what matters is
/// the DMA-Direct complex's IOMMU group (`grace`).
fn grace_iommu(i: &Iommu) -> Check {
    let mode = match i.mode {
        IommuMode::Off => "off",
        IommuMode::Passthrough => "passthrough",
        IommuMode::Translated => "translating DMA",
        IommuMode::Unknown => "domain type unknown",
    };
    Check::ok(
        "iommu",
        format!("{mode} ({} groups); on a Grace platform translated DMA is the default, and what GPUDirect RDMA needs is each DMA-Direct function in its GPU's IOMMU group (see `grace`)", i.groups),
    )
}
