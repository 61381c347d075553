// SPDX-License-Identifier: MIT OR Apache-2.0
//! What CDMM (coherent driver-managed memory on GB200/GB300) needs of the host besides the
//! driver: `nvidia_uvm` loaded (it creates the GPU's page map that peer memory and dma-buf
//! mappings take a reference on, `../shared/FIELD.md` U1) and a kernel built with
//! `CONFIG_ZONE_DEVICE`.

use crate::error::Result;
use crate::host::Host;

use super::super::CdmmFacts;

/// Reads `/sys/module/nvidia_uvm` and `CONFIG_ZONE_DEVICE` from the running kernel's config
/// (`/boot/config-<release>`, else `/lib/modules/<release>/build/.config`).
pub(super) fn cdmm(host: &Host, kernel_release: Option<&str>) -> Result<CdmmFacts> {
    let mut facts = CdmmFacts {
        nvidia_uvm_loaded: host.sys_exists("module/nvidia_uvm"),
        zone_device: None,
        kernel_config: None,
    };
    let Some(release) = kernel_release else {
        return Ok(facts);
    };
    for rel in [
        format!("boot/config-{release}"),
        format!("lib/modules/{release}/build/.config"),
    ] {
        let path = host.root_path(&rel);
        let Some(text) = crate::host::read_optional(&path)? else {
            continue;
        };
        facts.zone_device = Some(zone_device(&text));
        facts.kernel_config = Some(host.root_name(&path));
        break;
    }
    Ok(facts)
}

/// `CONFIG_ZONE_DEVICE=y` in a kernel config (it is a bool option: `y` or "is not set").
fn zone_device(config: &str) -> bool {
    config.lines().any(|l| l.trim() == "CONFIG_ZONE_DEVICE=y")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_zone_device_from_the_boot_config() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("sys/module/nvidia_uvm")).unwrap();
        std::fs::create_dir_all(dir.path().join("boot")).unwrap();
        std::fs::write(
            dir.path().join("boot/config-6.8.0-1-generic"),
            "CONFIG_MEMORY_HOTPLUG=y\nCONFIG_ZONE_DEVICE=y\n",
        )
        .unwrap();
        let host = Host::new(dir.path().join("sys"), dir.path().join("proc"));
        let f = cdmm(&host, Some("6.8.0-1-generic")).unwrap();
        assert!(f.nvidia_uvm_loaded);
        assert_eq!(f.zone_device, Some(true));
        assert_eq!(
            f.kernel_config.as_deref(),
            Some("/boot/config-6.8.0-1-generic")
        );
        std::fs::write(
            dir.path().join("boot/config-6.8.0-1-generic"),
            "# CONFIG_ZONE_DEVICE is not set\n",
        )
        .unwrap();
        assert_eq!(
            cdmm(&host, Some("6.8.0-1-generic")).unwrap().zone_device,
            Some(false)
        );
        // No config: unknown, not "off".
        let f = cdmm(&host, Some("6.9.0")).unwrap();
        assert_eq!(f.zone_device, None);
    }
}
