// SPDX-License-Identifier: MIT OR Apache-2.0
//! Build provenance, the judgement (issue 37): does the module that `modprobe` would load fit
//! the kernel, the IB core and the NVIDIA driver that run now? [`verdict`] judges the facts that
//! [`crate::host::provenance::gather`] read and reads nothing; `nvpeer attach` acts on it and the
//! `provenance` row of `check` reports it.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::host::modtools::Kmod;
use crate::host::provenance::{gather, Owner, ProvenanceFacts};
use crate::host::Host;

/// The judgement.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// Every recorded CRC matches what runs (or is not checked by this kernel); `notes` say what
    /// was assumed or what the next reload of an exporter will need.
    Compatible { notes: Vec<String> },
    /// The loader would refuse it: rebuild.
    Rebuild { built: String, running: String },
    /// It could not be judged.
    Unknown { why: String },
}

impl fmt::Display for Verdict {
    /// `compatible`, `rebuild: built against X, running Y`, `unknown: why`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Compatible { .. } => f.write_str("compatible"),
            Self::Rebuild { built, running } => {
                write!(f, "rebuild: built against {built}, running {running}")
            }
            Self::Unknown { why } => write!(f, "unknown: {why}"),
        }
    }
}

/// `ib_uverbs 24.10-1.1.4` (the version when known).
fn named(module: &str, version: Option<&str>) -> String {
    match version {
        Some(v) if !v.is_empty() && v != "-" => format!("{module} {v}"),
        _ => module.to_owned(),
    }
}

/// Judges the facts; reads nothing.
pub fn verdict(f: &ProvenanceFacts) -> Verdict {
    let unknown = |why: String| Verdict::Unknown { why };
    if let Some(e) = &f.modinfo_error {
        return unknown(format!("cannot read {}: {e}", f.file));
    }
    if !f.ours {
        return unknown(format!("{} is not nvpeer's module", f.file));
    }
    if let Some(built) = &f.built_for {
        if *built != f.release {
            return Verdict::Rebuild {
                built: format!("kernel {built}"),
                running: format!("kernel {}", f.release),
            };
        }
    }
    if let Some(m) = f.malformed.first() {
        return unknown(format!("{}: malformed provenance {m:?}", f.file));
    }
    if f.imports.is_empty() {
        return unknown(format!(
            "{} records no provenance (no nvpeer_import in its .modinfo: built before issue 37)",
            f.file
        ));
    }
    let mut notes = Vec::new();
    let mut unknowns = Vec::new();
    for i in &f.imports {
        let owner = f.owners.get(&i.symbol).unwrap_or(&Owner::Unknown);
        let exporter_name = match owner {
            Owner::Module(m) => Some(m.as_str()),
            _ => i.module.as_deref(),
        };
        let ex = exporter_name.and_then(|n| f.exporters.iter().find(|e| e.module == n));
        let built_name = i.module.as_deref().unwrap_or("?");
        let built = named(built_name, f.providers.get(built_name).map(String::as_str));
        let built = match i.crc {
            Some(c) => format!("{built} ({} 0x{c:08x})", i.symbol),
            None => format!("{built} ({})", i.symbol),
        };
        if *owner == Owner::Kernel {
            // Built into the kernel: no module file to read; only a CRC-less build can be judged.
            if i.crc.is_some_and(|c| c != 0) {
                unknowns.push(format!(
                    "{} is built into the kernel: its CRC is not readable",
                    i.symbol
                ));
            }
            continue;
        }
        if i.module.is_none() && i.crc.is_none() && *owner == Owner::Nobody {
            // No Module.symvers named it at build and nothing exports it now: a weak reference
            // (optional, such as nvidia_p2p_cap_persistent_pages) that the loader leaves unset.
            notes.push(format!(
                "{} is exported by no loaded module: its weak reference stays unresolved",
                i.symbol
            ));
            continue;
        }
        let Some(ex) = ex else {
            unknowns.push(format!("no exporter of {} known", i.symbol));
            continue;
        };
        let running_name = named(&ex.module, ex.version.as_deref());
        // The file's CRC counts as the running one when it is the loaded module, or assumed so
        // when the loaded one has no srcversion; for an exporter not loaded it is the next load.
        let file_crc = ex.crcs.get(&i.symbol).copied();
        let file_readable = ex.unreadable.is_none() && ex.file.is_some();
        if ex.loaded && *owner == Owner::Nobody {
            return Verdict::Rebuild {
                built,
                running: format!("{running_name} (no {})", i.symbol),
            };
        }
        let judged_file = match ex.file_is_loaded {
            Some(true) => true,
            Some(false) => false,
            None if ex.loaded => {
                notes.push(format!(
                    "{} has no srcversion: {} taken for the loaded module",
                    ex.module,
                    ex.file.as_deref().unwrap_or("?")
                ));
                true
            }
            None => true, // not loaded: the file is what will load
        };
        if !file_readable {
            if i.crc.is_some_and(|c| c != 0) {
                unknowns.push(format!(
                    "CRCs of {} not readable: {}",
                    ex.module,
                    ex.unreadable.as_deref().unwrap_or("no module file")
                ));
            }
            continue;
        }
        if !judged_file {
            // Loaded module differs from its file: the running CRC is not readable; the file is
            // what the next reload of the exporter brings.
            if let (Some(c), Some(next)) = (i.crc, file_crc) {
                if c != 0 && next != 0 && c != next {
                    notes.push(format!(
                        "the next reload of {} brings {} (0x{next:08x}): rebuild before it",
                        ex.module,
                        ex.file.as_deref().unwrap_or("?")
                    ));
                }
            }
            if i.crc.is_some_and(|c| c != 0) {
                unknowns.push(format!(
                    "the loaded {} is not {} (srcversion differs): its CRCs are not readable",
                    ex.module,
                    ex.file.as_deref().unwrap_or("?"),
                ));
            }
            continue;
        }
        match (i.crc, file_crc) {
            (_, None) => {
                return Verdict::Rebuild {
                    built,
                    running: format!("{running_name} (no {})", i.symbol),
                }
            }
            (Some(c), Some(now)) if c != 0 && now != 0 && c != now => {
                return Verdict::Rebuild {
                    built,
                    running: format!("{running_name} (0x{now:08x})"),
                }
            }
            _ => {}
        }
        if !ex.loaded {
            notes.push(format!(
                "{} is not loaded: judged against {}, which its next load brings",
                ex.module,
                ex.file.as_deref().unwrap_or("?")
            ));
        }
    }
    // One line per exporter, however many of its symbols it concerns.
    let once = |v: Vec<String>| {
        v.into_iter().fold(Vec::new(), |mut acc: Vec<String>, m| {
            if !acc.contains(&m) {
                acc.push(m);
            }
            acc
        })
    };
    if !unknowns.is_empty() {
        // The notes say what is known anyway (e.g. that the exporter's next reload needs a rebuild).
        let mut why = once(unknowns);
        why.extend(once(notes));
        return unknown(why.join("; "));
    }
    let notes = once(notes);
    Verdict::Compatible { notes }
}

/// [`gather`] and [`verdict`] with the system's kmod tools, for `nvidia_peermem`; `None`: nothing
/// to judge. The function a `check` row calls.
pub fn judge_live(host: &Host) -> Result<Option<(ProvenanceFacts, Verdict)>> {
    Ok(gather(host, &Kmod::system(), "nvidia_peermem")?.map(|f| {
        let v = verdict(&f);
        (f, v)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use crate::host::provenance::fixture::{ours_modinfo, tree, Tree, GET, REG, UNREG};

    fn judge(t: &Tree) -> Verdict {
        verdict(
            &gather(&t.host(), &t.tools, "nvidia_peermem")
                .unwrap()
                .unwrap(),
        )
    }

    #[test]
    fn matching_crcs_are_compatible() {
        let t = tree(0x11);
        let f = gather(&t.host(), &t.tools, "nvidia_peermem")
            .unwrap()
            .unwrap();
        assert!(f.ours);
        assert_eq!(f.imports.len(), 3);
        assert_eq!(f.owners[REG], Owner::Module("ib_uverbs".into()));
        let core = f
            .exporters
            .iter()
            .find(|e| e.module == "ib_uverbs")
            .unwrap();
        assert_eq!(core.file_is_loaded, Some(true));
        assert_eq!(
            core.crcs.len(),
            2,
            "only the imported symbols: {:?}",
            core.crcs
        );
        assert_eq!(verdict(&f), Verdict::Compatible { notes: vec![] });
        assert_eq!(verdict(&f).to_string(), "compatible");
        // Facts survive JSON (check --facts).
        let json = serde_json::to_string(&f).unwrap();
        assert_eq!(serde_json::from_str::<ProvenanceFacts>(&json).unwrap(), f);
    }

    #[test]
    fn a_changed_core_crc_says_rebuild_with_both_sides() {
        let t = tree(0x99);
        t.write("sys/module/ib_uverbs/version", "25.04-0.6.1\n");
        assert_eq!(
            judge(&t).to_string(),
            "rebuild: built against ib_uverbs 24.10-1.1.4 (ib_register_peer_memory_client 0x00000011), \
             running ib_uverbs 25.04-0.6.1 (0x00000099)"
        );
    }

    #[test]
    fn another_kernel_release_says_rebuild() {
        let mut t = tree(0x11);
        let mut info = ours_modinfo("0x00000011");
        info[1].1 = "7.1.9 SMP".into();
        t.tools.modinfo.insert("nvidia_peermem.ko".into(), info);
        assert_eq!(
            judge(&t).to_string(),
            "rebuild: built against kernel 7.1.9, running kernel 7.2.0-test"
        );
    }

    #[test]
    fn a_core_that_no_longer_exports_the_symbol_says_rebuild() {
        let mut t = tree(0x11);
        t.write("proc/kallsyms", &format!("0 T {GET}\t[nvidia]\n"));
        let v = judge(&t).to_string();
        assert!(
            v.starts_with("rebuild: ")
                && v.ends_with("running ib_uverbs 24.10-1.1.4 (no ib_register_peer_memory_client)"),
            "{v}"
        );
        // Not loaded, and its file does not export it either.
        t.remove("sys/module/ib_uverbs");
        t.tools.exports.insert(
            "ib_uverbs.ko.xz".into(),
            BTreeMap::from([(UNREG.into(), 0x22)]),
        );
        let v = judge(&t).to_string();
        assert!(
            v.ends_with("running ib_uverbs (no ib_register_peer_memory_client)"),
            "{v}"
        );
    }

    #[test]
    fn a_core_upgraded_on_disk_but_not_reloaded() {
        // The loaded ib_uverbs is the old one (srcversion AAA); the file on disk is new (BBB)
        // with another CRC: running CRC unknown, and the next reload needs a rebuild.
        let mut t = tree(0x99);
        t.tools.modinfo.insert(
            "ib_uverbs.ko.xz".into(),
            vec![("srcversion".into(), "BBB".into())],
        );
        let v = judge(&t);
        let Verdict::Unknown { why } = &v else {
            panic!("{v}")
        };
        assert!(why.contains("srcversion differs"), "{why}");
        assert!(
            why.contains("the next reload of ib_uverbs brings ")
                && why.contains("(0x00000099): rebuild before it"),
            "{why}"
        );
        // ... unless the old module's file is found in a driver container's root.
        t.write(
            "run/mellanox/drivers/lib/modules/7.2.0-test/modules.dep",
            "kernel/drivers/infiniband/core/ib_uverbs.ko:\n",
        );
        t.write("run/mellanox/drivers/lib/modules/7.2.0-test/kernel/drivers/infiniband/core/ib_uverbs.ko", "");
        t.tools.modinfo.insert(
            "ib_uverbs.ko".into(),
            vec![("srcversion".into(), "AAA".into())],
        );
        t.tools.exports.insert(
            "ib_uverbs.ko".into(),
            BTreeMap::from([(REG.into(), 0x11), (UNREG.into(), 0x22)]),
        );
        let f = gather(&t.host(), &t.tools, "nvidia_peermem")
            .unwrap()
            .unwrap();
        let core = f
            .exporters
            .iter()
            .find(|e| e.module == "ib_uverbs")
            .unwrap();
        assert!(
            core.file
                .as_deref()
                .unwrap()
                .contains("run/mellanox/drivers"),
            "{core:?}"
        );
        assert_eq!(verdict(&f), Verdict::Compatible { notes: vec![] });
    }

    #[test]
    fn a_core_not_loaded_is_judged_against_its_file() {
        let t = tree(0x11);
        t.remove("sys/module/ib_uverbs");
        t.write("proc/kallsyms", &format!("0 T {GET}\t[nvidia]\n"));
        let Verdict::Compatible { notes } = judge(&t) else {
            panic!()
        };
        assert!(
            notes[0].starts_with("ib_uverbs is not loaded: judged against"),
            "{notes:?}"
        );
    }

    #[test]
    fn what_cannot_be_judged_is_unknown_with_the_reason() {
        // A module built before provenance.
        let mut t = tree(0x11);
        t.tools.modinfo.insert(
            "nvidia_peermem.ko".into(),
            ours_modinfo("0x11")
                .into_iter()
                .filter(|(k, _)| !k.starts_with("nvpeer_"))
                .collect(),
        );
        assert!(judge(&t).to_string().contains("records no provenance"));
        // NVIDIA's module in our place.
        t.tools.modinfo.insert(
            "nvidia_peermem.ko".into(),
            vec![("description".into(), "NVIDIA GPU memory plug-in".into())],
        );
        assert!(judge(&t).to_string().ends_with("is not nvpeer's module"));
        // A malformed line, an unreadable module file.
        let mut info = ours_modinfo("0x11");
        info.push(("nvpeer_import".into(), "only_two fields".into()));
        t.tools.modinfo.insert("nvidia_peermem.ko".into(), info);
        assert!(judge(&t).to_string().contains("malformed provenance"));
        t.tools.modinfo.remove("nvidia_peermem.ko");
        assert!(judge(&t).to_string().contains("Exec format error"));
        // The core's file cannot be read.
        let mut t = tree(0x11);
        t.tools.exports.remove("ib_uverbs.ko.xz");
        let v = judge(&t).to_string();
        assert!(
            v.starts_with("unknown: CRCs of ib_uverbs not readable: modprobe --show-exports "),
            "{v}"
        );
        // No nvidia_peermem in modules.dep, or no modules.dep at all: nothing to judge.
        t.write("lib/modules/7.2.0-test/modules.dep", "kernel/x.ko:\n");
        assert_eq!(gather(&t.host(), &t.tools, "nvidia_peermem").unwrap(), None);
        t.remove("lib/modules/7.2.0-test/modules.dep");
        assert_eq!(gather(&t.host(), &t.tools, "nvidia_peermem").unwrap(), None);
    }

    #[test]
    fn crcs_of_zero_and_dashes_are_not_compared() {
        // A kernel without MODVERSIONS: Module.symvers and the exports carry 0.
        let mut t = tree(0);
        t.tools
            .modinfo
            .insert("nvidia_peermem.ko".into(), ours_modinfo("0x00000000"));
        assert!(matches!(judge(&t), Verdict::Compatible { .. }));
        t.tools
            .modinfo
            .insert("nvidia_peermem.ko".into(), ours_modinfo("-"));
        assert!(matches!(judge(&t), Verdict::Compatible { .. }));
    }

    #[test]
    fn an_optional_symbol_nobody_exports_is_a_note() {
        // gen-provenance.sh writes `<symbol> - -` for a weak reference no Module.symvers named.
        let mut t = tree(0x11);
        let mut info = ours_modinfo("0x00000011");
        info.push((
            "nvpeer_import".into(),
            "nvidia_p2p_cap_persistent_pages - -".into(),
        ));
        t.tools.modinfo.insert("nvidia_peermem.ko".into(), info);
        assert_eq!(
            judge(&t),
            Verdict::Compatible {
                notes: vec!["nvidia_p2p_cap_persistent_pages is exported by no loaded module: its weak reference stays unresolved".into()]
            }
        );
        // Exported now: judged as any other symbol (its module's file, no CRC to compare).
        t.tools
            .exports
            .get_mut("nvidia.ko.zst")
            .unwrap()
            .insert("nvidia_p2p_cap_persistent_pages".into(), 0);
        t.write(
            "proc/kallsyms",
            &format!(
                "0 T {REG}\t[ib_uverbs]\n0 T {UNREG}\t[ib_uverbs]\n0 T {GET}\t[nvidia]\n\
                 0 D nvidia_p2p_cap_persistent_pages\t[nvidia]\n"
            ),
        );
        assert_eq!(judge(&t), Verdict::Compatible { notes: vec![] });
        // kallsyms unreadable: who exports it is not known.
        t.remove("proc/kallsyms");
        assert!(
            judge(&t).to_string().starts_with("unknown: "),
            "{}",
            judge(&t)
        );
    }
}
