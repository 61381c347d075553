// SPDX-License-Identifier: MIT OR Apache-2.0
//! Build provenance, the facts (issue 37): what the `nvidia_peermem` that `modprobe` would load
//! was built against, and what runs now. The module records in its `.modinfo` what it was built
//! against (`nvpeer_import=<symbol> <crc> <module>` per imported symbol, from the
//! `Module.symvers` modpost used; `nvpeer_provider=<module> <version>`; the kernel release in
//! `vermagic`); the running side's CRCs come from the exporters' module files (`modprobe
//! --show-exports`), since the kernel shows no CRC values. The interface and what "compatible"
//! means: kmod/README.md, "Operations".
//!
//! Two steps, as `check` works: [`gather`] (here) reads facts (serialisable, so `check --facts`
//! can judge them again elsewhere), [`crate::check::provenance::verdict`] judges them and reads
//! nothing.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::host::kernel::{self, SymbolOwner};
use crate::host::modprobe::{self, MODULE_ROOTS};
use crate::host::modtools::ModuleTools;
use crate::host::Host;

#[cfg(test)]
pub(crate) mod fixture;

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

/// What [`crate::check::provenance::verdict`] judges.
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

#[cfg(test)]
mod tests {
    use super::*;

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
