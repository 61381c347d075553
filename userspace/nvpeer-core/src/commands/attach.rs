// SPDX-License-Identifier: MIT OR Apache-2.0
//! `nvpeer attach`: load the peer-memory module when its build provenance says it fits what runs
//! (issue 37). Run by `nvpeer-attach.service`, which the udev rule `90-nvpeer.rules` starts when
//! `ib_uverbs` is loaded (the last of the RDMA core's modules: the peer-memory core is in it or in
//! `ib_core` below it): after `openibd restart`, a DOCA driver container or the Network Operator
//! reloaded the network stack, and at every boot. A `compatible` or `unknown` verdict loads
//! (`modprobe`, with softdeps and `modprobe.d` options; the kernel's loader stays the judge of
//! what could not be read); `rebuild` does not, and says why in one line. Where nothing exports
//! the peer-memory core (an inbox RDMA stack: dma-buf only), there is nothing to attach to: one
//! line and success, so the unit does not fail at every boot of such a host.

use crate::check::provenance::{self, Verdict};
use crate::error::Result;
use crate::host::kernel::{self, symbols};
use crate::host::modtools::ModuleTools;
use crate::host::peermem::{self, Implementation};
use crate::host::provenance::gather;
use crate::host::Host;

/// What `attach` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attach {
    /// A peer-memory module is loaded already (ours or another's): nothing done.
    AlreadyLoaded {
        module: String,
        implementation: Implementation,
    },
    /// Loaded now.
    Loaded { verdict: Verdict },
    /// `--dry-run`: would load.
    WouldLoad { verdict: Verdict },
    /// Nothing exports `ib_register_peer_memory_client` (kallsyms read): no peer-memory core to
    /// attach to (an inbox RDMA stack); nothing done.
    NoPeerCore,
    /// Not loaded, and why (a rebuild is needed, the file is not ours, there is none); the
    /// provenance verdict when one was made.
    Refused {
        why: String,
        verdict: Option<Verdict>,
    },
    /// `modprobe` failed.
    LoadFailed { verdict: Verdict, error: String },
}

impl Attach {
    /// 0 loaded or nothing to do, 1 refused or failed.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::AlreadyLoaded { .. }
            | Self::NoPeerCore
            | Self::Loaded { .. }
            | Self::WouldLoad { .. } => 0,
            Self::Refused { .. } | Self::LoadFailed { .. } => 1,
        }
    }

    /// One line for the journal (`nvpeer attach: ...`).
    pub fn line(&self, name: &str) -> String {
        let why = |v: &Verdict| match v {
            Verdict::Compatible { notes } if notes.is_empty() => "provenance compatible".to_owned(),
            Verdict::Compatible { notes } => format!("provenance compatible; {}", notes.join("; ")),
            other => format!("provenance {other}; the kernel judges the load"),
        };
        match self {
            Self::AlreadyLoaded {
                module,
                implementation,
            } => {
                format!(
                    "{module} ({}) is already loaded: nothing to do",
                    implementation.describe()
                )
            }
            Self::NoPeerCore => format!(
                "nothing exports {} (the RDMA stack has no peer-memory core, e.g. the kernel's own: dma-buf is its GPUDirect path): {name} not loaded, nothing to do",
                symbols::REGISTER_PEER_MEMORY_CLIENT
            ),
            Self::Loaded { verdict } => format!("loaded {name} ({})", why(verdict)),
            Self::WouldLoad { verdict } => {
                format!("would load {name} ({}) [dry run]", why(verdict))
            }
            Self::Refused { why, .. } => format!("not loading {name}: {why}"),
            Self::LoadFailed { verdict, error } => {
                format!("loading {name} failed ({}): {error}", why(verdict))
            }
        }
    }
}

/// Loads module `name` (`nvidia_peermem`, or `nv_peer_mem`) unless one is loaded or its
/// provenance says rebuild; `dry_run` changes nothing.
pub fn attach(host: &Host, tools: &dyn ModuleTools, name: &str, dry_run: bool) -> Result<Attach> {
    if let Some(m) = peermem::loaded_modules(host)?.into_iter().next() {
        return Ok(Attach::AlreadyLoaded {
            module: m.name,
            implementation: m.implementation,
        });
    }
    if matches!(
        kernel::kallsyms(host).lookup(symbols::REGISTER_PEER_MEMORY_CLIENT),
        Ok(None)
    ) {
        return Ok(Attach::NoPeerCore);
    }
    let Some(facts) = gather(host, tools, name)? else {
        let release = crate::host::modprobe::running_release(host)?.unwrap_or_else(|| "?".into());
        return Ok(Attach::Refused {
            why: format!("modprobe {name} finds no such module for kernel {release} (modules.dep)"),
            verdict: None,
        });
    };
    if !facts.ours && facts.modinfo_error.is_none() {
        return Ok(Attach::Refused {
            why: format!(
                "modprobe {name} would load {}, which is not nvpeer's",
                facts.file
            ),
            verdict: None,
        });
    }
    let verdict = provenance::verdict(&facts);
    if let Verdict::Rebuild { .. } = verdict {
        return Ok(Attach::Refused {
            why: verdict.to_string(),
            verdict: Some(verdict),
        });
    }
    if dry_run {
        return Ok(Attach::WouldLoad { verdict });
    }
    Ok(match tools.load(name) {
        Ok(()) => Attach::Loaded { verdict },
        Err(e) => Attach::LoadFailed {
            verdict,
            error: e.to_string(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::provenance::fixture::{ours_modinfo, tree};

    #[test]
    fn loads_when_compatible_and_refuses_a_rebuild() {
        let t = tree(0x11);
        let a = attach(&t.host(), &t.tools, "nvidia_peermem", false).unwrap();
        assert_eq!(a.exit_code(), 0);
        assert_eq!(
            a.line("nvidia_peermem"),
            "loaded nvidia_peermem (provenance compatible)"
        );
        assert_eq!(*t.tools.loaded.borrow(), vec!["nvidia_peermem"]);

        let t = tree(0x99);
        let a = attach(&t.host(), &t.tools, "nvidia_peermem", false).unwrap();
        assert_eq!(a.exit_code(), 1);
        let line = a.line("nvidia_peermem");
        assert!(
            line.starts_with("not loading nvidia_peermem: rebuild: built against ib_uverbs"),
            "{line}"
        );
        assert!(t.tools.loaded.borrow().is_empty());
        assert!(
            matches!(
                &a,
                Attach::Refused {
                    verdict: Some(Verdict::Rebuild { .. }),
                    ..
                }
            ),
            "{a:?}"
        );
    }

    #[test]
    fn nothing_to_attach_to_without_a_peer_memory_core() {
        // The kernel's own RDMA stack: kallsyms read, no ib_register_peer_memory_client.
        let t = tree(0x11);
        t.write(
            "proc/kallsyms",
            "0 T nvidia_p2p_get_pages\t[nvidia]\n0 T ib_umem_dmabuf_get\t[ib_core]\n",
        );
        let a = attach(&t.host(), &t.tools, "nvidia_peermem", false).unwrap();
        assert_eq!(a, Attach::NoPeerCore);
        assert_eq!(a.exit_code(), 0);
        assert!(
            a.line("nvidia_peermem")
                .starts_with("nothing exports ib_register_peer_memory_client"),
            "{}",
            a.line("nvidia_peermem")
        );
        assert!(t.tools.loaded.borrow().is_empty());
        // kallsyms not readable: judged as before (the loader decides).
        t.remove("proc/kallsyms");
        let a = attach(&t.host(), &t.tools, "nvidia_peermem", false).unwrap();
        assert!(matches!(a, Attach::Loaded { .. }), "{a:?}");
    }

    #[test]
    fn dry_run_already_loaded_unknown_and_failures() {
        let mut t = tree(0x11);
        let a = attach(&t.host(), &t.tools, "nvidia_peermem", true).unwrap();
        assert!(matches!(a, Attach::WouldLoad { .. }), "{a:?}");
        assert!(t.tools.loaded.borrow().is_empty());
        // Unknown provenance (built before it): loaded, the line says the kernel judges.
        t.tools.modinfo.insert(
            "nvidia_peermem.ko".into(),
            ours_modinfo("0x11")
                .into_iter()
                .filter(|(k, _)| !k.starts_with("nvpeer_"))
                .collect(),
        );
        let a = attach(&t.host(), &t.tools, "nvidia_peermem", false).unwrap();
        assert!(
            a.line("nvidia_peermem").contains("provenance unknown"),
            "{a:?}"
        );
        assert_eq!(a.exit_code(), 0);
        // Another's module in the modprobe path.
        t.tools.modinfo.insert(
            "nvidia_peermem.ko".into(),
            vec![("description".into(), "NVIDIA GPU memory plug-in".into())],
        );
        let a = attach(&t.host(), &t.tools, "nvidia_peermem", false).unwrap();
        assert!(
            a.line("nvidia_peermem").ends_with("which is not nvpeer's"),
            "{a:?}"
        );
        // Already loaded (any implementation): nothing done.
        t.write("sys/module/nvidia_peermem/version", "580.159.04\n");
        let a = attach(&t.host(), &t.tools, "nvidia_peermem", false).unwrap();
        assert_eq!(
            a.line("nvidia_peermem"),
            "nvidia_peermem (NVIDIA nvidia-peermem) is already loaded: nothing to do"
        );
        // Nothing in modules.dep.
        t.remove("sys/module/nvidia_peermem");
        t.write("lib/modules/7.2.0-test/modules.dep", "kernel/x.ko:\n");
        let a = attach(&t.host(), &t.tools, "nvidia_peermem", false).unwrap();
        assert_eq!(a.exit_code(), 1);
        assert!(a
            .line("nvidia_peermem")
            .contains("finds no such module for kernel 7.2.0-test"));
    }
}
