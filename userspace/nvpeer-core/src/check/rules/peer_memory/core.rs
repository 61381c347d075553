// SPDX-License-Identifier: MIT OR Apache-2.0
//! The peer-memory core the module registers with (MOFED's `ib_register_peer_memory_client`,
//! in `ib_core` or `ib_uverbs`): who exports it and which generation it is, DOCA's driver
//! reload, and known bugs of the MOFED release.

use crate::host::kernel::symbols;
use crate::host::peermem::LoadedModule;
use crate::host::providers::{
    CoreGeneration, GenerationSource, IbCore, MofedVersion, StopNotifierBug,
};

use super::super::super::{Check, Status};

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
        Status::Fail => Check::fail("ib_core", detail, fixes.join("; ")),
        _ => Check::warn("ib_core", detail, fixes.join("; ")),
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
    Some(Check::info(
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
                Check::info(
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
