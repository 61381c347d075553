//! Checks of the software stack: the peer-memory module and its parameters and clients, the two
//! providers it needs (NVIDIA driver, peer-memory IB core), the RDMA devices, libibverbs, and the
//! process's memlock limit.

use crate::host::Host;
use crate::kernel::{symbols, Kallsyms};
use crate::limits::{human_bytes, Memlock};
use crate::peermem::{Implementation, LoadedModule};
use crate::providers::{CoreGeneration, IbCore, NvidiaDriver, PersistentApi};
use crate::rdma::RdmaDevice;
use crate::verbs::Verbs;

use super::{Check, PeerClientInfo};

pub(super) fn check_module(modules: &[LoadedModule]) -> Check {
    match modules {
        [] => Check::fail(
            "module",
            "no peer-memory module loaded (neither nvidia_peermem nor nv_peer_mem)",
            "load it: `modprobe nvidia_peermem` after `make install`, or `insmod kmod/nvidia_peermem.ko`",
        ),
        [m] => {
            let version = m.version.as_deref().unwrap_or("(no version)");
            let detail = match m.implementation {
                Implementation::Nvpeer => format!("nvpeer {version} loaded as {}", m.name),
                other => format!("{} {version} loaded as {}", other.describe(), m.name),
            };
            if m.implementation == Implementation::Nvpeer {
                Check::ok("module", detail)
            } else {
                Check::warn(
                    "module",
                    detail,
                    "GPUDirect RDMA works with it, but nvpeer's statistics and fixes are absent; see README 'Replacing nv_peer_mem / nvidia-peermem'",
                )
            }
        }
        many => Check::fail(
            "module",
            format!(
                "{} peer-memory modules loaded at once: {}",
                many.len(),
                many.iter()
                    .map(|m| format!("{} ({})", m.name, m.implementation.describe()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            "only one may be loaded: `rmmod` all but one (they register the same client name nv_mem)",
        ),
    }
}

/// What a parameter value means (CONTRACT 3.2).
fn parameter_meaning(name: &str, value: &str) -> Option<&'static str> {
    Some(match (name, value.trim()) {
        ("peerdirect_support", "0") => {
            "MOFED >= 5.1 API, peer_memory_client_ex with INVALIDATE_UNMAPS"
        }
        ("peerdirect_support", "1") => "legacy API for MOFED <= 5.0 / 4.9 LTS",
        ("persistent_api_support", "1") => "one persistent client nv_mem",
        ("persistent_api_support", "0") => "invalidating nv_mem plus persistent nv_mem_nc",
        _ => return None,
    })
}

pub(super) fn check_parameters(module: &LoadedModule, ib_core: Option<&IbCore>) -> Check {
    if module.parameters.is_empty() {
        return Check::ok("parameters", format!("{} has no parameters", module.name));
    }
    let list = module
        .parameters
        .iter()
        .map(|(k, v)| match parameter_meaning(k, v) {
            Some(m) => format!("{k}={v} ({m})"),
            None => format!("{k}={v}"),
        })
        .collect::<Vec<_>>()
        .join(", ");
    let generation = ib_core
        .and_then(|c| c.peer_core.as_ref())
        .and_then(|p| p.generation);
    let legacy = module
        .parameters
        .get("peerdirect_support")
        .map(|v| v.trim() == "1");
    match (legacy, generation) {
        (Some(false), Some(CoreGeneration::Legacy4x)) => Check::fail(
            "parameters",
            format!("{list}; but the peer-memory core is generation 4x (MOFED <= 5.0), which needs the legacy client layout"),
            format!("reload with peerdirect_support=1: `rmmod {0}; modprobe {0} peerdirect_support=1`", module.name),
        ),
        (Some(true), Some(g @ (CoreGeneration::Mofed5x | CoreGeneration::Mofed5xUnmaps))) => Check::warn(
            "parameters",
            format!("{list}; on a generation {} core the legacy mode gives up INVALIDATE_UNMAPS and is exposed to the lock inversion NVIDIA 2696789", g.label()),
            format!("reload with peerdirect_support=0 unless this really is MOFED <= 5.0: `rmmod {0}; modprobe {0}`", module.name),
        ),
        (Some(false), Some(CoreGeneration::Mofed5x)) => Check::warn(
            "parameters",
            format!("{list}; the core is generation 5x (MOFED 5.1 ... 5.4-2), which ignores INVALIDATE_UNMAPS: the lock inversion NVIDIA 2696789 can deadlock when memory is freed while registered"),
            "upgrade MOFED to 5.4-3 or later",
        ),
        _ => Check::ok("parameters", list),
    }
}

pub(super) fn check_peer_clients(
    host: &Host,
    modules: &[LoadedModule],
    memory_peers: Option<&[PeerClientInfo]>,
    nvidia: Option<&NvidiaDriver>,
) -> Check {
    let persistent = nvidia.is_none_or(|n| n.persistent_api != PersistentApi::None);
    match memory_peers {
        Some(clients) => {
            let listed = clients
                .iter()
                .map(|c| format!("{} {}", c.name, c.version.as_deref().unwrap_or("(no version)")))
                .collect::<Vec<_>>()
                .join(", ");
            if clients.is_empty() {
                return Check::fail(
                    "peer_clients",
                    "/sys/kernel/mm/memory_peers exists but no client is registered",
                    "load the peer-memory module; if it is loaded, its registration failed: see dmesg",
                );
            }
            if let [module] = modules {
                let missing: Vec<&str> = module
                    .expected_clients(persistent)
                    .into_iter()
                    .filter(|want| !clients.iter().any(|c| c.name == *want))
                    .collect();
                if !missing.is_empty() {
                    return Check::fail(
                        "peer_clients",
                        format!("memory_peers lists {listed}; {} should have registered {} too", module.name, missing.join(", ")),
                        "another module may own the name (see `module`), or the registration failed: see dmesg",
                    );
                }
            }
            Check::ok("peer_clients", format!("memory_peers: {listed}"))
        }
        None => match modules {
            [] => Check::fail(
                "peer_clients",
                "no peer-memory client: /sys/kernel/mm/memory_peers is absent and no peer-memory module is loaded",
                "load the peer-memory module (see `module`)",
            ),
            [m] if m.implementation == Implementation::Nvpeer => {
                let counters = ["acquired", "registrations", "live_contexts"]
                    .iter()
                    .filter_map(|c| {
                        let v = host.read_sys(format!("module/{}/nvpeer/stats/{c}", m.name)).ok().flatten()?;
                        Some(format!("{c}={}", v.trim()))
                    })
                    .collect::<Vec<_>>()
                    .join(" ");
                Check::warn(
                    "peer_clients",
                    format!(
                        "/sys/kernel/mm/memory_peers is absent (MOFED >= 24.04 on a kernel that no longer exports mm_kobj, or a core built without it); {} registered {} (it refuses to load otherwise){}",
                        m.name,
                        m.expected_clients(persistent).join(" and "),
                        if counters.is_empty() { String::new() } else { format!("; its counters: {counters}") }
                    ),
                    "NCCL >= 2.23.4 and UCX still detect GPUDirect RDMA through /sys/module/nvidia_peermem/version; NCCL <= 2.22 needs memory_peers: upgrade NCCL",
                )
            }
            _ => Check::warn(
                "peer_clients",
                "/sys/kernel/mm/memory_peers is absent: the registered clients cannot be listed",
                "NCCL >= 2.23.4 and UCX detect GPUDirect RDMA through /sys/module/nvidia_peermem/version; NCCL <= 2.22 needs memory_peers: upgrade NCCL",
            ),
        },
    }
}

pub(super) fn check_nvidia_driver(driver: Option<&NvidiaDriver>, kallsyms: &Kallsyms) -> Check {
    let Some(d) = driver else {
        return Check::fail(
            "nvidia_driver",
            "nvidia.ko is not loaded: nothing provides the nvidia_p2p_* API",
            "install and load the NVIDIA GPU driver (`modprobe nvidia`)",
        );
    };
    let mut detail = d.describe();
    if let Some(open) = d.open_kernel_module {
        detail.push_str(if open {
            ", open kernel modules"
        } else {
            ", proprietary kernel modules"
        });
    }
    detail.push_str(match d.persistent_api {
        PersistentApi::Explicit => ", exports nvidia_p2p_get_pages_persistent (535+ persistent API)",
        PersistentApi::CapabilityVariable => {
            ", <= 530 API: no nvidia_p2p_get_pages_persistent, persistent pins through nvidia_p2p_cap_persistent_pages"
        }
        PersistentApi::None => ", exports no persistent pinning API",
        PersistentApi::Unknown => ", persistent API unknown (/proc/kallsyms not readable)",
    });
    if matches!(kallsyms.lookup(symbols::P2P_GET_PAGES), Ok(None)) {
        return Check::fail(
            "nvidia_driver",
            format!("{detail}; but nothing exports nvidia_p2p_get_pages"),
            "this driver build lacks the P2P API: install NVIDIA's datacenter/desktop driver for Linux x86_64",
        );
    }
    if let Some(by) = &d.p2p_exported_by {
        if *by != d.module {
            detail.push_str(&format!(" (nvidia_p2p_get_pages from {by})"));
        }
    }
    Check::ok("nvidia_driver", detail)
}

pub(super) fn check_ib_core(core: &IbCore) -> Check {
    let ib = match (&core.ib_core_version, core.ib_core_loaded) {
        (Some(v), _) => format!("ib_core {v}"),
        (None, true) => "ib_core (no version: the kernel's own)".to_owned(),
        (None, false) => "ib_core is not loaded".to_owned(),
    };
    match &core.peer_core {
        Some(p) => {
            let generation = p
                .generation
                .map_or_else(|| "generation unknown".to_owned(), |g| format!("generation {}", g.label()));
            let who = if p.stand_in {
                let sysfs = match p.memory_peers_sysfs {
                    Some(true) => ", memory_peers sysfs on",
                    Some(false) => ", memory_peers sysfs off",
                    None => "",
                };
                format!("{} (test stand-in for MOFED's peer-memory core), {generation}{sysfs}; {ib}", p.provider)
            } else if p.provider == "kernel" {
                format!("the kernel exports ib_register_peer_memory_client (peer-memory patches built in: Ubuntu or NV-Kernels), {generation}; {ib}")
            } else {
                let mofed = match (&p.version, &p.srcversion) {
                    (Some(v), _) => format!(" {v}"),
                    (None, Some(src)) => format!(" (srcversion {src})"),
                    (None, None) => String::new(),
                };
                format!("MOFED {}{mofed} exports ib_register_peer_memory_client, {generation}", p.provider)
            };
            Check::ok("ib_core", who)
        }
        None if core.kallsyms_readable => Check::fail(
            "ib_core",
            format!("{ib} and nothing exports ib_register_peer_memory_client: no peer-memory (PeerDirect) core, as with the inbox RDMA stack"),
            "install MLNX_OFED / DOCA-OFED (or a kernel with the peer-memory patches); or use DMA-BUF, which needs no peer-memory module (see `dmabuf`)",
        ),
        None if !core.ib_core_loaded => Check::fail(
            "ib_core",
            "ib_core is not loaded and /proc/kallsyms is not readable",
            "load the RDMA stack (`modprobe ib_core` or MOFED's `/etc/init.d/openibd start`)",
        ),
        None => Check::warn(
            "ib_core",
            format!("{ib}; whether it has peer-memory support is unknown: /proc/kallsyms is not readable"),
            "run as root (or with kernel.kptr_restrict allowing it) so that ib_register_peer_memory_client can be looked up",
        ),
    }
}

pub(super) fn check_rdma_devices(devices: &[RdmaDevice]) -> Check {
    if devices.is_empty() {
        return Check::fail(
            "rdma_devices",
            "no RDMA device in /sys/class/infiniband",
            "load the NIC's RDMA driver (e.g. mlx5_ib) or MOFED (`/etc/init.d/openibd start`)",
        );
    }
    let mut parts = Vec::new();
    let mut active = 0;
    for dev in devices {
        let at = match (&dev.pci, &dev.driver) {
            (Some(p), Some(d)) => format!(" ({} {d})", p.address),
            (Some(p), None) => format!(" ({})", p.address),
            (None, _) => " (software device)".to_owned(),
        };
        if dev.ports.is_empty() {
            parts.push(format!("{}{at} no ports", dev.name));
        }
        for port in &dev.ports {
            active += usize::from(port.is_active());
            let link = port.link_layer.as_deref().unwrap_or("?");
            parts.push(format!(
                "{}/{}{at} {} {link}",
                dev.name, port.number, port.state
            ));
        }
    }
    let detail = parts.join(", ");
    if active == 0 {
        Check::warn(
            "rdma_devices",
            format!("{detail}: no port is ACTIVE"),
            "bring a link up: cable and switch, a subnet manager for InfiniBand (`opensm`), or the netdev for RoCE (`ip link set <dev> up`)",
        )
    } else {
        Check::ok("rdma_devices", detail)
    }
}

pub(super) fn check_verbs(verbs: &Verbs, sysfs_devices: usize) -> Check {
    match verbs {
        Verbs::Skipped { reason } => Check::ok("verbs", format!("libibverbs not probed: {reason}")),
        Verbs::Unavailable { reason } => Check::warn(
            "verbs",
            format!("{reason}; the verbs checks (device list, DMA-BUF probe) are skipped"),
            "install rdma-core's libibverbs (Debian: libibverbs1 ibverbs-providers) or MOFED's userspace",
        ),
        Verbs::Probed { devices } if devices.is_empty() && sysfs_devices > 0 => Check::warn(
            "verbs",
            format!("libibverbs sees no device although sysfs has {sysfs_devices}"),
            "install the provider library of the NIC (Debian: ibverbs-providers; MOFED: its userspace packages)",
        ),
        Verbs::Probed { devices } if devices.is_empty() => Check::ok("verbs", "libibverbs loaded; it sees no device"),
        Verbs::Probed { devices } => Check::ok(
            "verbs",
            format!(
                "libibverbs sees {}",
                devices.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join(", ")
            ),
        ),
    }
}

pub(super) fn check_memlock(memlock: Option<Memlock>) -> Check {
    let Some(m) = memlock else {
        return Check::ok("memlock", "not measured");
    };
    let show = |v: Option<u64>| v.map_or_else(|| "unlimited".to_owned(), human_bytes);
    match m.soft {
        None => Check::ok("memlock", "RLIMIT_MEMLOCK unlimited"),
        Some(_) => Check::warn(
            "memlock",
            format!("RLIMIT_MEMLOCK is {} (hard {}): under MOFED 5.x registered GPU memory counts against it, so large registrations fail with ENOMEM", show(m.soft), show(m.hard)),
            "raise it to unlimited: `ulimit -l unlimited`, `* - memlock unlimited` in /etc/security/limits.conf, LimitMEMLOCK=infinity for systemd services, --ulimit memlock=-1 for containers",
        ),
    }
}
