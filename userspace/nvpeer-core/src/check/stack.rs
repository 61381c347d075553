// SPDX-License-Identifier: MIT OR Apache-2.0
//! Checks of the software stack: the peer-memory module and its parameters and clients, the two
//! providers it needs (NVIDIA driver, peer-memory IB core), the RDMA devices, libibverbs, and the
//! process's memlock limit.

use std::collections::BTreeMap;

use crate::kernel::{symbols, Kallsyms};
use crate::limits::{human_bytes, Memlock};
use crate::peermem::{Implementation, LoadedModule};
use crate::providers::{
    CoreGeneration, GenerationSource, IbCore, MofedVersion, NvidiaDriver, PersistentApi,
    StopNotifierBug,
};
use crate::rdma::RdmaDevice;
use crate::verbs::Verbs;

use super::{Check, PeerClientInfo, Status, MODULE_COUNTERS};

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
    let follows_core = module.implementation == Implementation::Nvpeer;
    match (legacy, generation) {
        // nvpeer detects the core's generation at load and overrides a contradicting value
        // (its log says so in one line); NVIDIA's and Mellanox's modules register what it says.
        (Some(false), Some(CoreGeneration::Legacy4x))
        | (Some(true), Some(CoreGeneration::Mofed5xUnmaps))
            if follows_core =>
        {
            Check::ok(
                "parameters",
                format!("{list}; contradicts the detected core, which nvpeer follows instead (see its load log)"),
            )
        }
        (Some(false), Some(g @ CoreGeneration::Legacy4x)) => Check::fail(
            "parameters",
            format!("{list}; but the peer-memory core is generation 4x, {}, which needs the legacy client layout", g.describe()),
            format!("reload with peerdirect_support=1: `rmmod {0}; modprobe {0} peerdirect_support=1`", module.name),
        ),
        (Some(true), Some(g @ (CoreGeneration::Mofed5x | CoreGeneration::Mofed5xUnmaps))) => Check::warn(
            "parameters",
            format!("{list}; on a generation {} core the legacy mode gives up INVALIDATE_UNMAPS and is exposed to the lock inversion NVIDIA 2696789", g.label()),
            format!("reload with peerdirect_support=0 unless this really is MOFED <= 5.0: `rmmod {0}; modprobe {0}`", module.name),
        ),
        (Some(false), Some(g @ CoreGeneration::Mofed5x)) => Check::warn(
            "parameters",
            format!("{list}; the core is generation 5x, {}, which ignores INVALIDATE_UNMAPS: on 5.1 ... 5.4-2 the lock inversion NVIDIA 2696789 can deadlock when memory is freed while registered", g.describe()),
            "upgrade MOFED to 5.4-3 or later",
        ),
        _ => Check::ok("parameters", list),
    }
}

pub(super) fn check_peer_clients(
    modules: &[LoadedModule],
    memory_peers: Option<&[PeerClientInfo]>,
    nvidia: Option<&NvidiaDriver>,
    module_counters: &BTreeMap<String, BTreeMap<String, String>>,
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
                let counters = MODULE_COUNTERS
                    .iter()
                    .filter_map(|c| {
                        let v = module_counters.get(&m.name)?.get(*c)?;
                        Some(format!("{c}={v}"))
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

pub(super) fn check_ib_core(core: &IbCore, modules: &[LoadedModule]) -> Check {
    let ib = match (&core.ib_core_version, core.ib_core_loaded) {
        (Some(v), _) => format!("ib_core {v}"),
        (None, true) => "ib_core (no version: the kernel's own)".to_owned(),
        (None, false) => "ib_core is not loaded".to_owned(),
    };
    let Some(p) = &core.peer_core else {
        return if core.kallsyms_readable {
            Check::fail(
                "ib_core",
                format!("{ib} and nothing exports ib_register_peer_memory_client: no peer-memory (PeerDirect) core, as with the inbox RDMA stack"),
                "install MLNX_OFED / DOCA-OFED (or a kernel with the peer-memory patches); or use DMA-BUF, which needs no peer-memory module (see `dmabuf`)",
            )
        } else if !core.ib_core_loaded {
            Check::fail(
                "ib_core",
                "ib_core is not loaded and /proc/kallsyms is not readable",
                "load the RDMA stack (`modprobe ib_core` or MOFED's `/etc/init.d/openibd start`)",
            )
        } else {
            Check::warn(
                "ib_core",
                format!("{ib}; whether it has peer-memory support is unknown: /proc/kallsyms is not readable"),
                "run as root (or with kernel.kptr_restrict allowing it) so that ib_register_peer_memory_client can be looked up",
            )
        };
    };
    let generation = match (p.generation, p.generation_from) {
        (Some(g), Some(from)) => {
            format!(
                "generation {}: {} (from {})",
                g.label(),
                g.describe(),
                from.describe()
            )
        }
        (Some(g), None) => format!("generation {}: {}", g.label(), g.describe()),
        (None, _) if core.kallsyms_readable && !p.stand_in => format!(
            "generation unknown ({} and {} both exported, as by no known core)",
            symbols::GET_PEER_PRIVATE_DATA,
            symbols::STOP_INVALIDATION_NOTIFIER
        ),
        (None, _) => "generation unknown".to_owned(),
    };
    let mut detail = if p.stand_in {
        let sysfs = match p.memory_peers_sysfs {
            Some(true) => ", memory_peers sysfs on",
            Some(false) => ", memory_peers sysfs off",
            None => "",
        };
        format!(
            "{} (test stand-in for MOFED's peer-memory core), {generation}{sysfs}; {ib}",
            p.provider
        )
    } else if p.provider == "kernel" {
        format!("the kernel exports ib_register_peer_memory_client (peer-memory patches built in: Ubuntu or NV-Kernels), {generation}; {ib}")
    } else {
        // MOFED moved peer_mem.o from ib_core into ib_uverbs in 24.07 (CONTRACT 1.1); the
        // version stays on ib_core.
        let place = match p.provider.as_str() {
            "ib_core" => " (the core in ib_core, as MLNX_OFED <= 23.x builds it)",
            "ib_uverbs" => {
                " (the core in ib_uverbs, as DOCA-OFED >= 24.07 and NV-Kernels build it)"
            }
            _ => "",
        };
        let release = match (&p.version, &p.srcversion) {
            (Some(v), _) => format!("MOFED {v} (/sys/module/ib_core/version)"),
            (None, Some(src)) => format!("ib_core srcversion {src}, no version"),
            (None, None) => "ib_core has no version: not MOFED's, a distribution kernel's copy (Ubuntu, NV-Kernels)".to_owned(),
        };
        format!(
            "{} exports ib_register_peer_memory_client{place}; {release}; {generation}",
            p.provider
        )
    };
    // What our module detected at load time must be what the core is: it chose its client
    // layout and its invalidation protocol from it.
    let mut status = Status::Ok;
    let mut fixes = Vec::new();
    for m in modules {
        let Some(raw) = &m.core else { continue };
        let file = format!("/sys/module/{}/nvpeer/core", m.name);
        match (CoreGeneration::from_label(raw), p.generation) {
            (None, _) => {
                status = status.max(Status::Warn);
                detail.push_str(&format!(
                    "; {} reports core {raw:?} in {file}, which this nvpeer does not know",
                    m.name
                ));
                fixes.push("use the nvpeer CLI of the same release as the module".to_owned());
            }
            (Some(d), Some(g)) if d == g => {
                detail.push_str(&format!("; {} detected {} too ({file})", m.name, d.label()))
            }
            (Some(d), None) => {
                detail.push_str(&format!("; {} detected {} ({file})", m.name, d.label()))
            }
            (Some(d), Some(g)) => {
                let from = p
                    .generation_from
                    .map_or("nvpeer", GenerationSource::describe);
                detail.push_str(&format!(
                    "; but {} detected {} ({file}) where {from} says {}",
                    m.name,
                    d.label(),
                    g.label()
                ));
                // 4x against another generation is the wrong client layout; 5x against
                // 5x-unmaps the wrong answer to who unmaps after an invalidation.
                status = status.max(
                    if d == CoreGeneration::Legacy4x || g == CoreGeneration::Legacy4x {
                        Status::Fail
                    } else {
                        Status::Warn
                    },
                );
                fixes.push(format!("reload the module so that it looks at the core again (`rmmod {0}; modprobe {0}`); if it still disagrees, report `nvpeer check --json` and its dmesg lines as a bug", m.name));
            }
        }
    }
    match status {
        Status::Ok => Check::ok("ib_core", detail),
        Status::Warn => Check::warn("ib_core", detail, fixes.join("; ")),
        Status::Fail => Check::fail("ib_core", detail, fixes.join("; ")),
    }
}

/// DOCA's driver reload refuses while ib_uverbs is in use, and a peer-memory client holds the
/// module that exports the core (Mellanox/doca-driver-build#481). `None` unless ib_uverbs is
/// the exporter and a peer-memory module is loaded.
pub(super) fn check_driver_reload(core: &IbCore, modules: &[LoadedModule]) -> Option<Check> {
    let p = core
        .peer_core
        .as_ref()
        .filter(|p| p.provider == "ib_uverbs")?;
    if modules.is_empty() {
        return None;
    }
    let refcnt = p
        .refcnt
        .map_or_else(String::new, |r| format!(", refcnt {r}"));
    let holding: Vec<(&str, String)> = modules
        .iter()
        .filter_map(|m| match &p.holders {
            Some(h) if h.contains(&m.name) => Some((
                m.name.as_str(),
                format!("/sys/module/ib_uverbs/holders/{}{refcnt}", m.name),
            )),
            Some(_) => None,
            // No holders directory to look at: a loaded client took its symbols from ib_uverbs
            // (kallsyms says so) unless nothing at all holds ib_uverbs.
            None if p.refcnt != Some(0) => Some((
                m.name.as_str(),
                format!("kallsyms: ib_uverbs exports the core it registers with{refcnt}"),
            )),
            None => None,
        })
        .collect();
    if holding.is_empty() {
        return Some(Check::ok(
            "driver_reload",
            "ib_uverbs exports the peer-memory core; no peer-memory module holds it",
        ));
    }
    let names: Vec<&str> = holding.iter().map(|(name, _)| *name).collect();
    let evidence: Vec<String> = holding
        .iter()
        .map(|(name, why)| format!("{name} ({why})"))
        .collect();
    Some(Check::warn(
        "driver_reload",
        format!(
            "{} holds ib_uverbs in use, the module that exports the peer-memory core (DOCA-OFED >= 24.07): DOCA's driver reload (`/etc/init.d/openibd restart`) refuses while ib_uverbs is in use (Mellanox/doca-driver-build#481)",
            evidence.join(", ")
        ),
        format!(
            "to reload the RDMA driver, unload it first and load it again after: `rmmod {0}; /etc/init.d/openibd restart; modprobe {0}`",
            names.join(" ")
        ),
    ))
}

/// Known bugs of the MOFED release that provides the core, told by `/sys/module/ib_core/version`.
/// `None` for a stand-in, a core without MOFED version, or no core.
pub(super) fn check_core_bugs(core: &IbCore, modules: &[LoadedModule]) -> Option<Check> {
    let p = core.peer_core.as_ref().filter(|p| !p.stand_in)?;
    let raw = p.version.as_deref()?;
    let bug = MofedVersion::parse(raw).and_then(|v| v.stop_notifier_bug());
    let Some(bug) = bug else {
        return Some(Check::ok(
            "core_bugs",
            format!("MOFED version {raw:?} is not a release this nvpeer knows (MAJOR.MINOR-BUILD, 4.x, 5.x, 23.x and later): no claim about its bugs"),
        ));
    };
    let what = "the ib_umem_stop_invalidation_notifier `!=` bug of MOFED 5.4-3 ... 24.10 (it re-takes the MR's mapping_lock when it should release it), fixed in MOFED/DOCA-OFED 25.04";
    match bug {
        StopNotifierBug::Absent => Some(Check::ok(
            "core_bugs",
            format!("MOFED {raw}: predates {what}"),
        )),
        StopNotifierBug::Fixed => Some(Check::ok(
            "core_bugs",
            format!("MOFED {raw}: has the fix for {what}"),
        )),
        StopNotifierBug::Present => {
            let (persistent, invalidating): (Vec<&LoadedModule>, Vec<&LoadedModule>) =
                modules.iter().partition(|m| m.persistent_nv_mem());
            let names = |ms: &[&LoadedModule]| {
                ms.iter()
                    .map(|m| m.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let upgrade = "upgrade to DOCA-OFED 25.04 or later";
            Some(if !persistent.is_empty() {
                Check::warn(
                    "core_bugs",
                    format!(
                        "MOFED {raw} has {what}; the nv_mem client of {} is persistent (persistent_api_support=1), so every dereg of its MRs unlocks a mutex it does not hold: harmless on production kernels, a lockdep 'bad unlock balance' WARN on kernels with lock debugging; an invalidating MR whose registration fails before activation self-deadlocks",
                        names(&persistent)
                    ),
                    format!("{upgrade}; until then keep lock debugging (CONFIG_PROVE_LOCKING, CONFIG_DEBUG_MUTEXES) off on this host"),
                )
            } else if !invalidating.is_empty() {
                Check::warn(
                    "core_bugs",
                    format!(
                        "MOFED {raw} has {what}; the nv_mem client of {} is invalidating, so a registration that fails after the core took the pages but before mlx5 activated the invalidation notifier re-takes the mutex the thread holds and self-deadlocks (a hung task, on any kernel)",
                        names(&invalidating)
                    ),
                    upgrade,
                )
            } else {
                Check::ok(
                    "core_bugs",
                    format!("MOFED {raw} has {what}; no peer-memory module is loaded to meet it"),
                )
            })
        }
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
