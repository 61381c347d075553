// SPDX-License-Identifier: MIT OR Apache-2.0
//! Facts that say a platform cannot do GPUDirect RDMA, read without CUDA. The GPU's model
//! (GeForce, vGPU types), PCI ids (GB10) and device minor come with the other facts
//! (`/proc/driver/nvidia/gpus/*/information`, the PCI tree); here the rest:
//!
//! - Tegra: `family` of the SoC device, `Tegra` on every Tegra (Linux's
//!   `drivers/soc/tegra/fuse/fuse-tegra.c`, `tegra_soc_device_register`). Its GPU is no PCI
//!   function, so the GPU facts have none.
//! - A confidential VM: the `tdx_guest` CPU flag (`arch/x86/include/asm/cpufeatures.h`,
//!   `X86_FEATURE_TDX_GUEST`) or the guest drivers' misc devices `tdx_guest` and `sev-guest`
//!   (`drivers/virt/coco/{tdx-guest,sev-guest}`). NVIDIA's driver turns confidential computing
//!   on from the same thing, the guest's memory encryption (`os_cc_enabled`,
//!   `kernel-open/nvidia/os-interface.c`); the driver's own files show no CC marker (neither
//!   `params` nor `information` has one in open-gpu-kernel-modules' `nv-procfs.c`), so a GPU in
//!   CC mode on a host that is no confidential VM is not seen.
//! - MIG: the capability files the driver makes for each GPU instance,
//!   `/proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<id>/access` (as NVIDIA's
//!   nvidia-container-toolkit and k8s-device-plugin read them; MIG user guide, "Device Nodes and
//!   Capabilities"). A GPU in MIG mode without GPU instances has none: it is not seen either.

use std::collections::BTreeMap;

use crate::error::Result;
use crate::host::nvidia_proc;
use crate::host::Host;

use super::super::CapabilityFacts;

pub(super) fn capability(host: &Host) -> Result<CapabilityFacts> {
    let mut soc_family = None;
    for soc in host.list_sys("bus/soc/devices")? {
        if let Some(f) = host.read_sys(format!("bus/soc/devices/{soc}/family"))? {
            soc_family = Some(f.trim().to_owned());
            break;
        }
    }
    let tdx_flag = host
        .read_proc("cpuinfo")?
        .is_some_and(|t| cpu_flag(&t, "tdx_guest"));
    let confidential = if tdx_flag || host.sys_exists("class/misc/tdx_guest") {
        Some("tdx".to_owned())
    } else if host.sys_exists("class/misc/sev-guest") {
        Some("sev-snp".to_owned())
    } else {
        None
    };
    Ok(CapabilityFacts {
        soc_family,
        confidential,
        mig: mig_instances(host)?,
    })
}

/// Whether a `flags` (x86) or `Features` (arm64) line of `/proc/cpuinfo` has `flag`.
fn cpu_flag(cpuinfo: &str, flag: &str) -> bool {
    cpuinfo.lines().any(|l| {
        l.split_once(':').is_some_and(|(k, v)| {
            matches!(k.trim(), "flags" | "Features") && v.split_whitespace().any(|f| f == flag)
        })
    })
}

/// GPU device minor -> the ids of its MIG GPU instances.
fn mig_instances(host: &Host) -> Result<BTreeMap<u32, Vec<u32>>> {
    let caps = host.proc_path(format!("{}/capabilities", nvidia_proc::DIR));
    let mut out = BTreeMap::new();
    for gpu in crate::host::list_dir(&caps)? {
        let Some(minor) = gpu.strip_prefix("gpu").and_then(|m| m.parse::<u32>().ok()) else {
            continue;
        };
        let instances: Vec<u32> = crate::host::list_dir(&caps.join(&gpu).join("mig"))?
            .iter()
            .filter_map(|gi| gi.strip_prefix("gi")?.parse().ok())
            .collect();
        if !instances.is_empty() {
            out.insert(minor, instances);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &std::path::Path, rel: &str, content: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }

    #[test]
    fn tegra_tdx_and_mig_instances() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        write(r, "sys/bus/soc/devices/soc0/family", "Tegra\n");
        write(
            r,
            "proc/cpuinfo",
            "processor\t: 0\nflags\t\t: fpu vme hypervisor tdx_guest\n",
        );
        let caps = "proc/driver/nvidia/capabilities";
        write(r, &format!("{caps}/mig/config"), "DeviceFileMinor: 1\n");
        write(
            r,
            &format!("{caps}/gpu0/mig/gi1/access"),
            "DeviceFileMinor: 12\n",
        );
        write(
            r,
            &format!("{caps}/gpu0/mig/gi2/ci0/access"),
            "DeviceFileMinor: 22\n",
        );
        write(r, &format!("{caps}/gpu1/mig/.keep"), "");
        let c = capability(&Host::new(r.join("sys"), r.join("proc"))).unwrap();
        assert_eq!(c.soc_family.as_deref(), Some("Tegra"));
        assert_eq!(c.confidential.as_deref(), Some("tdx"));
        assert_eq!(c.mig, BTreeMap::from([(0, vec![1, 2])]));
    }

    #[test]
    fn an_snp_guest_and_a_plain_host() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        write(r, "sys/class/misc/sev-guest/dev", "10:121\n");
        write(r, "proc/cpuinfo", "flags\t\t: fpu sev sev_es\n");
        let c = capability(&Host::new(r.join("sys"), r.join("proc"))).unwrap();
        assert_eq!(c.confidential.as_deref(), Some("sev-snp"));
        std::fs::remove_dir_all(r.join("sys/class/misc")).unwrap();
        let c = capability(&Host::new(r.join("sys"), r.join("proc"))).unwrap();
        assert_eq!(c, CapabilityFacts::default());
    }
}
