// SPDX-License-Identifier: MIT OR Apache-2.0
//! Build provenance, judged before load (issue 37): is the `nvidia_peermem` that `modprobe`
//! would load built against the IB core and NVIDIA driver that run now? The module records in its
//! `.modinfo` what it was built against (`nvpeer_import=<symbol> <crc> <module>` per imported
//! symbol, from the `Module.symvers` modpost used; `nvpeer_provider=<module> <version>`; the
//! kernel release in `vermagic`); the running side's CRCs come from the exporters' module files
//! (`modprobe --show-exports`), since the kernel shows no CRC values. The interface and what
//! "compatible" means: kmod/README.md, "Operations".
//!
//! Two steps, as `check` works: [`gather`] reads facts (serialisable, so `check --facts` can
//! judge them again elsewhere), [`verdict`] judges them and reads nothing.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::host::kernel::{self, SymbolOwner};
use crate::host::modprobe::{self, MODULE_ROOTS};
use crate::host::modtools::{Kmod, ModuleTools};
use crate::host::Host;

/// Our module's `description=` starts so (kmod/client/nvpeer_main.rs).
const OUR_DESCRIPTION: &str = "GPUDirect RDMA peer-memory client for NVIDIA GPU memory (nvpeer";

/// One `nvpeer_import` line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Import {
    pub symbol: String,
    /// From `Module.symvers`; `None` (`-`) when no `Module.symvers` named it at build.
    pub crc: Option<u32>,
    /// The exporting module at build (`ib_core`, `ib_uverbs`, `nvidia`).
    pub module: Option<String>,
}

/// Who exports a symbol now, as `/proc/kallsyms` says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "exported_by", content = "module", rename_all = "snake_case")]
pub enum Owner {
    Module(String),
    Kernel,
    /// kallsyms was read and has no such symbol: no loaded module exports it.
    Nobody,
    /// kallsyms could not be read.
    Unknown,
}

/// An exporting module as it runs now, and the module file its CRCs were read from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exporter {
    pub module: String,
    pub loaded: bool,
    /// `/sys/module/<module>/version` (MOFED's, NVIDIA's).
    pub version: Option<String>,
    /// `/sys/module/<module>/srcversion` of the loaded module.
    pub srcversion: Option<String>,
    /// The file whose exports were read (`modules.dep` of the running release, host root first,
    /// then the driver containers' roots).
    pub file: Option<String>,
    /// `Some(true)`: the file's srcversion equals the loaded module's (its CRCs are the running
    /// ones); `Some(false)`: it differs (the file is what the next load brings); `None`: not
    /// loaded, or no srcversion to compare.
    pub file_is_loaded: Option<bool>,
    /// The file's CRCs of the imported symbols it exports.
    pub crcs: BTreeMap<String, u32>,
    /// Why the file's CRCs could not be read.
    pub unreadable: Option<String>,
}

/// What [`verdict`] judges.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProvenanceFacts {
    /// The running kernel release.
    pub release: String,
    /// The module file `modprobe <module>` would load.
    pub file: String,
    /// Its description says nvpeer.
    pub ours: bool,
    /// The release in its `vermagic`.
    pub built_for: Option<String>,
    pub imports: Vec<Import>,
    /// `nvpeer_provider` lines: exporter -> version at build.
    pub providers: BTreeMap<String, String>,
    /// `nvpeer_*` lines that do not parse.
    pub malformed: Vec<String>,
    /// Who exports each imported symbol now.
    pub owners: BTreeMap<String, Owner>,
    pub exporters: Vec<Exporter>,
    /// Why `modinfo` of the file failed.
    pub modinfo_error: Option<String>,
}

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

/// `<symbol> <0xcrc|-> <module|->`.
fn parse_import(value: &str) -> Option<Import> {
    let mut f = value.split_whitespace();
    let (Some(symbol), Some(crc), Some(module), None) = (f.next(), f.next(), f.next(), f.next())
    else {
        return None;
    };
    let crc = match crc {
        "-" => None,
        c => Some(crate::host::modtools::parse_crc(c)?),
    };
    Some(Import {
        symbol: symbol.to_owned(),
        crc,
        module: (module != "-").then(|| module.to_owned()),
    })
}

/// The facts about the module that `modprobe <name>` would load; `None` when there is nothing to
/// judge (no `modules.dep` for the running release, or no such module in it).
pub fn gather(host: &Host, tools: &dyn ModuleTools, name: &str) -> Result<Option<ProvenanceFacts>> {
    let Some(release) = modprobe::running_release(host)? else {
        return Ok(None);
    };
    // Only the host's own tree: that is where `modprobe` on the host loads ours from.
    let Some(file) = modprobe::module_files(host, &release, name)?
        .into_iter()
        .find(|f| f.root == "/")
    else {
        return Ok(None);
    };
    let mut facts = ProvenanceFacts {
        release: release.clone(),
        file: file.path.display().to_string(),
        ours: false,
        built_for: None,
        imports: Vec::new(),
        providers: BTreeMap::new(),
        malformed: Vec::new(),
        owners: BTreeMap::new(),
        exporters: Vec::new(),
        modinfo_error: None,
    };
    let info = match tools.modinfo(&file.path) {
        Ok(info) => info,
        Err(e) => {
            facts.modinfo_error = Some(e.to_string());
            return Ok(Some(facts));
        }
    };
    for (key, value) in &info {
        match key.as_str() {
            "description" => facts.ours |= value.starts_with(OUR_DESCRIPTION),
            "vermagic" => facts.built_for = value.split_whitespace().next().map(str::to_owned),
            "nvpeer_import" => match parse_import(value) {
                Some(i) => facts.imports.push(i),
                None => facts.malformed.push(format!("nvpeer_import={value}")),
            },
            "nvpeer_provider" => match value.split_whitespace().collect::<Vec<_>>()[..] {
                [m, v] => {
                    facts.providers.insert(m.to_owned(), v.to_owned());
                }
                _ => facts.malformed.push(format!("nvpeer_provider={value}")),
            },
            _ => {}
        }
    }
    let wanted: Vec<&str> = facts.imports.iter().map(|i| i.symbol.as_str()).collect();
    let kallsyms = host
        .read_proc("kallsyms")
        .ok()
        .flatten()
        .filter(|t| !t.trim().is_empty())
        .map(|text| kernel::parse_kallsyms(&text, &wanted));
    for i in &facts.imports {
        let owner = match &kallsyms {
            None => Owner::Unknown,
            Some(found) => match found.get(&i.symbol) {
                Some(SymbolOwner::Module(m)) => Owner::Module(m.clone()),
                Some(SymbolOwner::Kernel) => Owner::Kernel,
                None => Owner::Nobody,
            },
        };
        facts.owners.insert(i.symbol.clone(), owner);
    }
    let mut names: Vec<String> = Vec::new();
    for i in &facts.imports {
        let now = match &facts.owners[&i.symbol] {
            Owner::Module(m) => Some(m.clone()),
            _ => None,
        };
        for m in now.into_iter().chain(i.module.clone()) {
            if !names.contains(&m) {
                names.push(m);
            }
        }
    }
    for m in names {
        facts
            .exporters
            .push(exporter(host, tools, &release, &m, &wanted)?);
    }
    Ok(Some(facts))
}

/// The running side of one exporting module.
fn exporter(
    host: &Host,
    tools: &dyn ModuleTools,
    release: &str,
    module: &str,
    wanted: &[&str],
) -> Result<Exporter> {
    let sys = format!("module/{module}");
    let loaded = host.sys_exists(&sys);
    let srcversion = host
        .read_sys(format!("{sys}/srcversion"))?
        .map(|s| s.trim().to_owned());
    let mut ex = Exporter {
        module: module.to_owned(),
        loaded,
        version: host
            .read_sys(format!("{sys}/version"))?
            .map(|s| s.trim().to_owned()),
        srcversion: srcversion.clone(),
        file: None,
        file_is_loaded: None,
        crcs: BTreeMap::new(),
        unreadable: None,
    };
    let candidates = modprobe::module_files(host, release, module)?;
    if candidates.is_empty() {
        ex.unreadable = Some(format!(
            "no {module} in modules.dep of {release} under {}",
            MODULE_ROOTS.map(|r| format!("/{r}")).join(", ")
        ));
        return Ok(ex);
    }
    // The loaded one is the candidate with its srcversion; else the host's (the next load).
    let mut chosen = None;
    if let (true, Some(loaded_src)) = (loaded, &srcversion) {
        for c in &candidates {
            let src = tools.modinfo(&c.path).ok().and_then(|kv| {
                kv.into_iter()
                    .find(|(k, _)| k == "srcversion")
                    .map(|(_, v)| v)
            });
            if src.as_deref() == Some(loaded_src.as_str()) {
                chosen = Some((c, Some(true)));
                break;
            }
        }
    }
    let (file, is_loaded) = chosen.unwrap_or_else(|| {
        let c = candidates
            .iter()
            .find(|c| c.root == "/")
            .unwrap_or(&candidates[0]);
        (
            c,
            if loaded && srcversion.is_some() {
                Some(false)
            } else {
                None
            },
        )
    });
    ex.file = Some(file.path.display().to_string());
    ex.file_is_loaded = is_loaded;
    match tools.exports(&file.path) {
        Ok(all) => {
            ex.crcs = all
                .into_iter()
                .filter(|(s, _)| wanted.contains(&s.as_str()))
                .collect()
        }
        Err(e) => ex.unreadable = Some(e.to_string()),
    }
    Ok(ex)
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
pub(crate) mod tests {
    use super::*;
    use crate::host::modtools::{ToolError, UnloadError};
    use std::cell::RefCell;
    use std::path::Path;

    /// Fake kmod tools: modinfo and exports per file name (the path's last component).
    #[derive(Default)]
    pub(crate) struct FakeTools {
        pub modinfo: BTreeMap<String, Vec<(String, String)>>,
        pub exports: BTreeMap<String, BTreeMap<String, u32>>,
        pub loaded: RefCell<Vec<String>>,
        pub unloaded: RefCell<Vec<String>>,
        pub busy: RefCell<bool>,
    }

    fn key(p: &Path) -> String {
        p.file_name().unwrap().to_string_lossy().into_owned()
    }

    impl ModuleTools for FakeTools {
        fn modinfo(&self, file: &Path) -> std::result::Result<Vec<(String, String)>, ToolError> {
            self.modinfo
                .get(&key(file))
                .cloned()
                .ok_or(ToolError::Failed {
                    command: format!("modinfo -0 {}", file.display()),
                    code: 1,
                    message: "modinfo: ERROR: could not get modinfo: Exec format error".into(),
                })
        }
        fn exports(&self, file: &Path) -> std::result::Result<BTreeMap<String, u32>, ToolError> {
            self.exports
                .get(&key(file))
                .cloned()
                .ok_or(ToolError::Failed {
                    command: format!("modprobe --show-exports {}", file.display()),
                    code: 1,
                    message: "modprobe: FATAL: could not get symbols".into(),
                })
        }
        fn load(&self, name: &str) -> std::result::Result<(), ToolError> {
            self.loaded.borrow_mut().push(name.to_owned());
            Ok(())
        }
        fn unload(&self, name: &str) -> std::result::Result<(), UnloadError> {
            if *self.busy.borrow() {
                return Err(UnloadError::Busy { name: name.into() });
            }
            self.unloaded.borrow_mut().push(name.to_owned());
            Ok(())
        }
    }

    pub(crate) const REG: &str = "ib_register_peer_memory_client";
    pub(crate) const UNREG: &str = "ib_unregister_peer_memory_client";
    pub(crate) const GET: &str = "nvidia_p2p_get_pages";

    /// A host: release 7.2.0-test, our module in updates/, ib_uverbs and nvidia installed and
    /// loaded with matching srcversions; the tools report CRCs `core_crc` for the core.
    pub(crate) struct Tree {
        pub dir: tempfile::TempDir,
        pub tools: FakeTools,
    }

    impl Tree {
        pub fn host(&self) -> Host {
            Host::new(self.dir.path().join("sys"), self.dir.path().join("proc"))
        }
        pub fn write(&self, rel: &str, text: &str) {
            let p = self.dir.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        pub fn remove(&self, rel: &str) {
            let p = self.dir.path().join(rel);
            if p.is_dir() {
                std::fs::remove_dir_all(p).unwrap();
            } else {
                std::fs::remove_file(p).unwrap();
            }
        }
    }

    pub(crate) fn ours_modinfo(core_crc: &str) -> Vec<(String, String)> {
        [
            (
                "description",
                "GPUDirect RDMA peer-memory client for NVIDIA GPU memory (nvpeer, Rust)",
            ),
            ("vermagic", "7.2.0-test SMP mod_unload modversions"),
            ("nvpeer_import", &format!("{REG} {core_crc} ib_uverbs")),
            ("nvpeer_import", &format!("{UNREG} 0x00000022 ib_uverbs")),
            ("nvpeer_import", &format!("{GET} 0x00000033 nvidia")),
            ("nvpeer_provider", "ib_uverbs 24.10-1.1.4"),
            ("nvpeer_provider", "nvidia 580.159.04"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    pub(crate) fn tree(core_crc: u32) -> Tree {
        let t = Tree {
            dir: tempfile::tempdir().unwrap(),
            tools: FakeTools::default(),
        };
        t.write("proc/sys/kernel/osrelease", "7.2.0-test\n");
        t.write(
            "lib/modules/7.2.0-test/modules.dep",
            "updates/nvidia_peermem.ko: kernel/ib_uverbs.ko.xz\n\
             kernel/ib_uverbs.ko.xz: kernel/ib_core.ko.xz\nkernel/ib_core.ko.xz:\n\
             updates/dkms/nvidia.ko.zst:\n",
        );
        t.write(
            "proc/kallsyms",
            &format!("0 T {REG}\t[ib_uverbs]\n0 T {UNREG}\t[ib_uverbs]\n0 T {GET}\t[nvidia]\n"),
        );
        for (m, v, s) in [
            ("ib_uverbs", "24.10-1.1.4", "AAA"),
            ("nvidia", "580.159.04", "NNN"),
        ] {
            t.write(&format!("sys/module/{m}/version"), &format!("{v}\n"));
            t.write(&format!("sys/module/{m}/srcversion"), &format!("{s}\n"));
        }
        let mut tools = FakeTools::default();
        tools
            .modinfo
            .insert("nvidia_peermem.ko".into(), ours_modinfo("0x00000011"));
        tools.modinfo.insert(
            "ib_uverbs.ko.xz".into(),
            vec![("srcversion".into(), "AAA".into())],
        );
        tools.modinfo.insert(
            "nvidia.ko.zst".into(),
            vec![("srcversion".into(), "NNN".into())],
        );
        tools.exports.insert(
            "ib_uverbs.ko.xz".into(),
            BTreeMap::from([
                (REG.into(), core_crc),
                (UNREG.into(), 0x22),
                ("other".into(), 1),
            ]),
        );
        tools
            .exports
            .insert("nvidia.ko.zst".into(), BTreeMap::from([(GET.into(), 0x33)]));
        Tree { tools, ..t }
    }

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

    #[test]
    fn imports_parse() {
        assert_eq!(
            parse_import("a 0x0000abcd ib_core"),
            Some(Import {
                symbol: "a".into(),
                crc: Some(0xabcd),
                module: Some("ib_core".into())
            })
        );
        assert_eq!(
            parse_import("a - -"),
            Some(Import {
                symbol: "a".into(),
                crc: None,
                module: None
            })
        );
        for bad in ["", "a", "a 0x1", "a zz m", "a 0x1 m extra"] {
            assert_eq!(parse_import(bad), None, "{bad}");
        }
    }
}
