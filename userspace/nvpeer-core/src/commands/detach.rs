// SPDX-License-Identifier: MIT OR Apache-2.0
//! `nvpeer detach [--wait SECONDS]`: unload the peer-memory module before a network-stack or
//! driver reload (DOCA's `openibd` refuses while the module holds `ib_uverbs`), only when no
//! registration is live; otherwise name the holders from the module's records (issue 37).
//! Unloading is `delete_module(O_NONBLOCK)` of that one module: `modprobe -r` would go on to the
//! softdeps (`nvidia`, `ib_core`).

use std::time::Duration;

use crate::commands::who;
use crate::error::{Error, Result};
use crate::host::modtools::{ModuleTools, UnloadError};
use crate::host::peermem::{self, Implementation};
use crate::host::Host;

/// What `detach` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Detach {
    /// No peer-memory module is loaded.
    NothingLoaded,
    Unloaded {
        module: String,
    },
    /// `--dry-run`: would unload.
    WouldUnload {
        module: String,
    },
    /// Registrations still live when the wait ended: `holders` names them (the records), or
    /// says why it cannot; `holder_list` is the records' holders (empty when not readable).
    Held {
        module: String,
        live: u64,
        holders: String,
        holder_list: Vec<who::Holder>,
    },
    /// The kernel refused for another reason (permission, ...).
    Failed {
        module: String,
        error: String,
    },
}

impl Detach {
    /// 0 unloaded or nothing loaded, 1 held, 2 failed.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::NothingLoaded | Self::Unloaded { .. } | Self::WouldUnload { .. } => 0,
            Self::Held { .. } => 1,
            Self::Failed { .. } => 2,
        }
    }

    pub fn line(&self) -> String {
        match self {
            Self::NothingLoaded => "no peer-memory module is loaded: nothing to detach".to_owned(),
            Self::Unloaded { module } => format!("unloaded {module}"),
            Self::WouldUnload { module } => format!("would unload {module} [dry run]"),
            Self::Held {
                module,
                live,
                holders,
                ..
            } => {
                let regs = if *live == 1 {
                    "registration"
                } else {
                    "registrations"
                };
                format!("{module} not unloaded: {live} live {regs}: {holders}")
            }
            Self::Failed { module, error } => format!("{module} not unloaded: {error}"),
        }
    }
}

/// Live registrations of a loaded module: ours counts them (`stats/live_contexts`); another's
/// only has its reference count.
fn live(host: &Host, name: &str, implementation: Implementation) -> Result<u64> {
    let rel = match implementation {
        Implementation::Nvpeer => format!("module/{name}/nvpeer/stats/live_contexts"),
        _ => format!("module/{name}/refcnt"),
    };
    let Some(text) = host.read_sys(&rel)? else {
        return Ok(0);
    };
    text.trim()
        .parse()
        .map_err(|_| Error::parse(host.sys_path(&rel), text, "an unsigned integer"))
}

/// Who holds them: one line (the records' holders, or why they cannot be named) and the holders.
fn holders(host: &Host, implementation: Implementation) -> (String, Vec<who::Holder>) {
    if implementation != Implementation::Nvpeer {
        return (
            format!(
                "{} keeps no records of its holders",
                implementation.describe()
            ),
            Vec::new(),
        );
    }
    match who::gather(host) {
        Ok(w) if w.registrations > 0 => (who::brief(&w, 5), w.holders),
        Ok(w) if w.module.is_none() => ("none: the module is gone".to_owned(), Vec::new()),
        Ok(_) => (
            "none recorded (registrations in flight)".to_owned(),
            Vec::new(),
        ),
        Err(e) => (format!("holders not named: {e}"), Vec::new()),
    }
}

/// Unloads the loaded peer-memory module when no registration is live, checking again every
/// quarter second for up to `wait`; `sleep` is `std::thread::sleep` outside tests.
pub fn detach(
    host: &Host,
    tools: &dyn ModuleTools,
    wait: Duration,
    dry_run: bool,
    sleep: &mut dyn FnMut(Duration),
) -> Result<Detach> {
    let Some(m) = peermem::loaded_modules(host)?.into_iter().next() else {
        return Ok(Detach::NothingLoaded);
    };
    let step = Duration::from_millis(250);
    let mut waited = Duration::ZERO;
    loop {
        let n = live(host, &m.name, m.implementation)?;
        if n == 0 {
            if dry_run {
                return Ok(Detach::WouldUnload { module: m.name });
            }
            match tools.unload(&m.name) {
                Ok(()) => return Ok(Detach::Unloaded { module: m.name }),
                // Someone else unloaded it meanwhile: done as well.
                Err(UnloadError::NotLoaded { .. }) => return Ok(Detach::NothingLoaded),
                // A registration arrived (or an acquire is in flight): wait like for any other.
                Err(UnloadError::Busy { .. }) => {}
                Err(e) => {
                    return Ok(Detach::Failed {
                        module: m.name,
                        error: e.to_string(),
                    })
                }
            }
        }
        if waited >= wait {
            let live = live(host, &m.name, m.implementation)?.max(1);
            let (holders, holder_list) = holders(host, m.implementation);
            return Ok(Detach::Held {
                holders,
                holder_list,
                module: m.name,
                live,
            });
        }
        let nap = step.min(wait - waited);
        sleep(nap);
        waited += nap;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::provenance::fixture::{tree, Tree};

    const HEADER: &str =
        "# id tgid comm cgroup gpu va bytes client nic state age_ms pin pin_bytes shares\n";

    fn loaded(t: &Tree, live: u64, records: &str) {
        t.write(
            "sys/module/nvidia_peermem/nvpeer/implementation",
            "nvpeer 0.2.0\n",
        );
        t.write(
            "sys/module/nvidia_peermem/nvpeer/stats/live_contexts",
            &format!("{live}\n"),
        );
        t.write(
            "sys/kernel/debug/nvidia_peermem/registrations",
            &format!("{HEADER}{records}"),
        );
    }

    #[test]
    fn unloads_when_nothing_is_live() {
        let t = tree(0x11);
        assert_eq!(
            detach(&t.host(), &t.tools, Duration::ZERO, false, &mut |_| ()).unwrap(),
            Detach::NothingLoaded
        );
        loaded(&t, 0, "");
        let d = detach(&t.host(), &t.tools, Duration::ZERO, true, &mut |_| ()).unwrap();
        assert_eq!(d.line(), "would unload nvidia_peermem [dry run]");
        assert!(t.tools.unloaded.borrow().is_empty());
        let d = detach(&t.host(), &t.tools, Duration::ZERO, false, &mut |_| ()).unwrap();
        assert_eq!(
            (d.line().as_str(), d.exit_code()),
            ("unloaded nvidia_peermem", 0)
        );
        assert_eq!(*t.tools.unloaded.borrow(), vec!["nvidia_peermem"]);
    }

    #[test]
    fn names_the_holders_and_exits_1() {
        let t = tree(0x11);
        loaded(
            &t,
            1,
            "7 4242 train /slurm/job_9/step_0 GPU-00000000-0000-0000-0000-000000000000 0x7f0000000000 2097152 nv_mem 0000:04:00.0 mapped 100 3 2097152 1\n",
        );
        let d = detach(&t.host(), &t.tools, Duration::ZERO, false, &mut |_| ()).unwrap();
        assert_eq!(d.exit_code(), 1);
        assert_eq!(
            d.line(),
            "nvidia_peermem not unloaded: 1 live registration: train[4242] in /slurm/job_9/step_0: 1 registration, 2 MiB"
        );
        assert!(t.tools.unloaded.borrow().is_empty());
        let Detach::Held { holder_list, .. } = &d else {
            panic!("{d:?}")
        };
        assert_eq!(
            holder_list
                .iter()
                .map(|h| (h.tgid, h.comm.as_str(), h.cgroup.as_str(), h.bytes))
                .collect::<Vec<_>>(),
            [(Some(4242), "train", "/slurm/job_9/step_0", 2097152)]
        );
        // Records unreadable: counted, not named.
        t.remove("sys/kernel/debug/nvidia_peermem/registrations");
        let d = detach(&t.host(), &t.tools, Duration::ZERO, false, &mut |_| ()).unwrap();
        assert!(
            d.line()
                .contains("1 live registration: holders not named: "),
            "{}",
            d.line()
        );
    }

    #[test]
    fn waits_for_the_holder_to_go() {
        let t = tree(0x11);
        loaded(&t, 2, "");
        let mut naps = Vec::new();
        let live = t
            .dir
            .path()
            .join("sys/module/nvidia_peermem/nvpeer/stats/live_contexts");
        let d = detach(
            &t.host(),
            &t.tools,
            Duration::from_secs(5),
            false,
            &mut |d| {
                naps.push(d);
                if naps.len() == 3 {
                    std::fs::write(&live, "0\n").unwrap();
                }
            },
        )
        .unwrap();
        assert_eq!(
            d,
            Detach::Unloaded {
                module: "nvidia_peermem".into()
            }
        );
        assert_eq!(naps, vec![Duration::from_millis(250); 3]);
        // A holder that stays: the wait ends at the deadline.
        loaded(&t, 2, "");
        let mut slept = Duration::ZERO;
        let d = detach(
            &t.host(),
            &t.tools,
            Duration::from_millis(600),
            false,
            &mut |d| slept += d,
        )
        .unwrap();
        assert!(matches!(d, Detach::Held { live: 2, .. }), "{d:?}");
        assert_eq!(slept, Duration::from_millis(600));
    }

    #[test]
    fn a_busy_module_is_waited_for_and_other_refusals_are_failures() {
        let t = tree(0x11);
        loaded(&t, 0, "");
        *t.tools.busy.borrow_mut() = true;
        let d = detach(&t.host(), &t.tools, Duration::ZERO, false, &mut |_| ()).unwrap();
        assert!(matches!(d, Detach::Held { live: 1, .. }), "{d:?}");
        // NVIDIA's module: its refcnt, no records.
        let t = tree(0x11);
        t.write("sys/module/nvidia_peermem/refcnt", "3\n");
        let d = detach(&t.host(), &t.tools, Duration::ZERO, false, &mut |_| ()).unwrap();
        assert!(
            d.line().ends_with(
                "3 live registrations: NVIDIA nvidia-peermem keeps no records of its holders"
            ),
            "{}",
            d.line()
        );
        t.write("sys/module/nvidia_peermem/refcnt", "lots\n");
        assert!(detach(&t.host(), &t.tools, Duration::ZERO, false, &mut |_| ()).is_err());
    }
}
