// SPDX-License-Identifier: MIT OR Apache-2.0
//! The third step of `nvpeer check`: the host's verdict, one pure function over the rules'
//! results. Not ready when a row fails (its id and short reason are the first blocking
//! reason: the rows come in order of what blocks first, see [`super::rules`]); else ready,
//! named by the paths that carry every pair: `ready (dma-buf)`, `ready (peer memory)`,
//! `ready (dma-buf and peer memory)` (both carry every pair, or each pair one of them),
//! `ready (EFA)` (every pair's NIC is an EFA device, and EFA carries each), or, on a host whose
//! pairs need different paths, every path some pair takes (`ready (dma-buf and EFA)`).

use serde::Serialize;

use super::rules::{carried, uncarried, GdrPath, PairVerdict};
use super::{Check, Require, Status};

/// The first blocking row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Blocking {
    /// The row's id.
    pub check: &'static str,
    /// A short reason, the same on every host with the same problem (`--brief` prints it).
    pub reason: String,
}

/// The host's verdict (`verdict` in the JSON).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub ready: bool,
    /// Not ready because a fact that decides it could not be read: `unknown: <id> (<what>)`
    /// (Nagios UNKNOWN).
    pub unknown: bool,
    /// Every pair is carried and used, but some over a PCIe link below what its devices can:
    /// `degraded: gdr_used (<pair>: <link>)`, not ready (Nagios WARNING).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub degraded: bool,
    /// `ready (dma-buf)`, ..., `degraded: gdr_used (<pair>: <link>)`, or
    /// `not ready: <id> (<reason>)`.
    pub text: String,
    /// The paths a ready verdict rests on (empty when not ready).
    pub paths: Vec<GdrPath>,
    pub blocking: Option<Blocking>,
    /// What could not be probed (`--sysfs-root`, `--facts` of such a run) and was assumed good.
    pub not_probed: Vec<String>,
}

impl Verdict {
    /// The text with what was not probed, for people (the table's last line).
    pub fn with_not_probed(&self) -> String {
        if self.not_probed.is_empty() {
            self.text.clone()
        } else {
            format!(
                "{} (not probed, assumed good: {})",
                self.text,
                self.not_probed.join("; ")
            )
        }
    }
}

/// The label and the paths of a host whose pairs are all carried: the one path that carries
/// every pair (dma-buf before peer memory), `EFA` where every pair's NIC is an EFA device and
/// EFA carries every pair (with dma-buf where it too carries every pair), both of dma-buf and
/// peer memory where each carries every pair, else every path some pair uses. Only paths that
/// work for some pair are named: an EFA device whose `efa_nv_peermem` is missing is carried
/// by dma-buf, not by EFA.
fn label(pairs: &[PairVerdict]) -> (String, Vec<GdrPath>) {
    let all = |g: GdrPath| pairs.iter().all(|p| p.paths.contains(&g));
    // efa::pair judges EFA for an EFA device only: it is in `paths` or `why_not` exactly there.
    let efa_nics = pairs
        .iter()
        .all(|p| p.paths.contains(&GdrPath::Efa) || p.why_not.contains_key(&GdrPath::Efa));
    if efa_nics && all(GdrPath::Efa) {
        let paths = [GdrPath::Dmabuf, GdrPath::Efa];
        return (
            "EFA".to_owned(),
            paths.into_iter().filter(|g| all(*g)).collect(),
        );
    }
    let paths: Vec<GdrPath> = if all(GdrPath::Dmabuf) && all(GdrPath::PeerMemory) {
        vec![GdrPath::Dmabuf, GdrPath::PeerMemory]
    } else if let Some(one) = [GdrPath::Dmabuf, GdrPath::PeerMemory, GdrPath::Efa]
        .into_iter()
        .find(|g| all(*g))
    {
        vec![one]
    } else {
        [GdrPath::Dmabuf, GdrPath::PeerMemory, GdrPath::Efa]
            .into_iter()
            .filter(|g| pairs.iter().any(|p| p.paths.contains(g)))
            .collect()
    };
    let names: Vec<&str> = paths.iter().map(|g| g.describe()).collect();
    let label = match names.split_last() {
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    };
    (label, paths)
}

/// The rows whose facts decide whether a GPU-NIC pair exists and which paths carry it: one of
/// them unknown makes a verdict of "no pair" or "not carried" unknown instead.
fn decides_pairs(id: &str) -> bool {
    matches!(
        id,
        "gpus"
            | "gpu_gdr"
            | "nvidia_driver"
            | "rdma_devices"
            | "paths"
            | "dmabuf"
            | "efa"
            | "module"
            | "parameters"
            | "peer_clients"
            | "ib_core"
            | "grace"
    )
}

/// `unknown: <id> (<the unread file and why, as row `u` says it>)`.
fn unknown(u: &Check, not_probed: Vec<String>) -> Verdict {
    let what = ["could not check: ", "could not read: ", "unknown for "]
        .iter()
        .find_map(|m| u.detail.split_once(m).map(|(_, rest)| rest))
        .unwrap_or(&u.detail)
        .to_owned();
    Verdict {
        ready: false,
        unknown: true,
        degraded: false,
        text: format!("unknown: {} ({what})", u.id),
        paths: Vec::new(),
        blocking: Some(Blocking {
            check: u.id,
            reason: what,
        }),
        not_probed,
    }
}

/// The verdict of rows `checks` (in report order) and pairs `pairs` under `require`; `reason`
/// gives a row's short reason.
pub fn verdict(
    checks: &[Check],
    pairs: &[PairVerdict],
    require: Require,
    reason: impl Fn(&Check) -> String,
) -> Verdict {
    let mut not_probed: Vec<String> = Vec::new();
    for n in pairs.iter().flat_map(|p| &p.not_probed) {
        if !not_probed.contains(n) {
            not_probed.push(n.clone());
        }
    }
    let blocked = |check: &'static str, reason: String| Verdict {
        ready: false,
        unknown: false,
        degraded: false,
        text: format!("not ready: {check} ({reason})"),
        paths: Vec::new(),
        blocking: Some(Blocking { check, reason }),
        not_probed: not_probed.clone(),
    };
    // No pair, or a pair not carried (the `paths` row fails then too): unless a fact that
    // could not be read decides it, in which case the answer is unknown, not "not ready".
    let uncarried_reason = if pairs.is_empty() {
        Some("no GPU-NIC pair".to_owned())
    } else {
        pairs
            .iter()
            .find(|p| !carried(&p.paths, require))
            .map(|p| uncarried(p, require))
    };
    // A `paths` row unknown for an uncarried pair (older facts: only dma-buf's unrecorded verb
    // version stands in the way) stands where its failure would: rows failing after it (the
    // peer-memory rows dma-buf might make unneeded) do not decide the verdict.
    let first_fail = checks.iter().find(|c| {
        c.status == Status::Fail
            || (c.id == "paths" && c.status == Status::Unknown && uncarried_reason.is_some())
    });
    let deciding_unknown = checks
        .iter()
        .find(|c| c.status == Status::Unknown && decides_pairs(c.id));
    // `gdr_used` is made from the devices too: a device fact unknown makes it unknown.
    if let (Some(c), Some(u)) = (first_fail, deciding_unknown) {
        if c.id == "gdr_used" {
            return unknown(u, not_probed);
        }
    }
    if let Some(c) = first_fail.filter(|c| c.id != "paths" || uncarried_reason.is_none()) {
        return blocked(c.id, reason(c));
    }
    if let Some(why) = uncarried_reason {
        if let Some(u) = deciding_unknown {
            return unknown(u, not_probed);
        }
        return match first_fail {
            Some(c) => blocked(c.id, reason(c)),
            None => blocked("paths", why),
        };
    }
    // Ready means used: whether NCCL uses a carried pair is unknown, so is the verdict.
    if let Some(u) = checks
        .iter()
        .find(|c| c.id == "gdr_used" && c.status == Status::Unknown)
    {
        return unknown(u, not_probed);
    }
    let (label, paths) = label(pairs);
    // Ready means used at full bandwidth: a pair over a link that trained down is named.
    // The first link of the first such pair, and how many more (the pair lines name them).
    let mut degraded = pairs
        .iter()
        .flat_map(|p| p.degraded.iter().map(move |l| (p, l)));
    if let Some((first, link)) = degraded.next() {
        let more = degraded.count();
        let reason = format!(
            "{}: {link}{}",
            first.name(),
            if more > 0 {
                format!(", and {more} more")
            } else {
                String::new()
            }
        );
        return Verdict {
            ready: false,
            unknown: false,
            degraded: true,
            text: format!("degraded: gdr_used ({reason})"),
            paths,
            blocking: Some(Blocking {
                check: "gdr_used",
                reason,
            }),
            not_probed,
        };
    }
    Verdict {
        ready: true,
        unknown: false,
        degraded: false,
        text: format!("ready ({label})"),
        paths,
        blocking: None,
        not_probed,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::check::rules::WhyNot;
    use crate::host::topo::PathClass;

    fn pair(nic: &str, paths: &[GdrPath], efa: bool) -> PairVerdict {
        let mut why_not = BTreeMap::new();
        for g in GdrPath::ALL {
            if !paths.contains(&g) && (g != GdrPath::Efa || efa) {
                why_not.insert(
                    g,
                    WhyNot {
                        reason: format!("no {}", g.id()),
                        fix: String::new(),
                    },
                );
            }
        }
        PairVerdict {
            gpu: "GPU0".to_owned(),
            nic: nic.to_owned(),
            gpu_bus_id: None,
            gpu_uuid: None,
            nic_bus_id: None,
            class: PathClass::Pix,
            paths: paths.to_vec(),
            preferred: paths.first().copied(),
            mapping: None,
            why_not,
            not_probed: vec!["the NIC probe".to_owned()],
            notes: Vec::new(),
            not_used: None,
            degraded: Vec::new(),
            modes: Vec::new(),
        }
    }

    fn row(id: &'static str, status: Status) -> Check {
        Check {
            id,
            status,
            detail: format!("{id} detail"),
            fix: None,
            applies: true,
            cause: None,
        }
    }

    fn text(checks: &[Check], pairs: &[PairVerdict], require: Require) -> String {
        verdict(checks, pairs, require, |c| format!("{} reason", c.id)).text
    }

    #[test]
    fn every_host_verdict() {
        use GdrPath::*;
        let ok = [row("gpus", Status::Ok), row("acs", Status::Warn)];
        let any = Require::Any;
        assert_eq!(
            text(&ok, &[pair("m0", &[Dmabuf], false)], any),
            "ready (dma-buf)"
        );
        assert_eq!(
            text(&ok, &[pair("m0", &[PeerMemory], false)], any),
            "ready (peer memory)"
        );
        assert_eq!(
            text(&ok, &[pair("m0", &[Dmabuf, PeerMemory], false)], any),
            "ready (dma-buf and peer memory)"
        );
        // Each pair by another path: both are needed.
        assert_eq!(
            text(
                &ok,
                &[
                    pair("m0", &[Dmabuf], false),
                    pair("m1", &[PeerMemory], false)
                ],
                any
            ),
            "ready (dma-buf and peer memory)"
        );
        assert_eq!(
            text(&ok, &[pair("efa_0", &[Dmabuf, Efa], true)], any),
            "ready (EFA)"
        );
        assert_eq!(
            text(&ok, &[pair("efa_0", &[Efa], true)], any),
            "ready (EFA)"
        );
        // The first failing row blocks, whatever the pairs.
        let failing = [
            row("gpus", Status::Ok),
            row("paths", Status::Fail),
            row("module", Status::Fail),
        ];
        let v = verdict(&failing, &[pair("m0", &[], false)], any, |c| {
            format!("{} reason", c.id)
        });
        assert!(!v.ready);
        assert_eq!(v.text, "not ready: paths (paths reason)");
        assert_eq!(v.blocking.unwrap().check, "paths");
        assert_eq!(v.not_probed, ["the NIC probe"]);
        // The policy, even without a `paths` row.
        assert_eq!(
            text(&ok, &[pair("m0", &[PeerMemory], false)], Require::Dmabuf),
            "not ready: paths (GPU0-m0 has no dmabuf path)"
        );
        assert_eq!(
            text(&ok, &[pair("efa_0", &[Efa], true)], Require::Peermem),
            "ready (EFA)"
        );
        assert_eq!(
            text(&ok, &[pair("m0", &[Dmabuf], false)], Require::Peermem),
            "not ready: paths (GPU0-m0 has no peermem path)"
        );
        assert_eq!(
            text(&ok, &[pair("m0", &[], false)], Require::Peermem),
            "not ready: paths (GPU0-m0 has no path)"
        );
        assert_eq!(text(&ok, &[], any), "not ready: paths (no GPU-NIC pair)");
    }

    /// Review B6: only paths that work for some pair are named. An EFA device whose EFA path
    /// does not work (no efa_nv_peermem) is carried by dma-buf; a host with an EFA-only pair and a
    /// dma-buf-only pair has no peer memory.
    #[test]
    fn a_path_no_pair_has_is_never_named() {
        use GdrPath::*;
        let v = |pairs: &[PairVerdict]| verdict(&[], pairs, Require::Any, |_| String::new());
        let efa_broken = v(&[pair("efa_0", &[Dmabuf], true)]);
        assert_eq!(
            (efa_broken.text.as_str(), efa_broken.paths),
            ("ready (dma-buf)", vec![Dmabuf])
        );
        let mixed = v(&[pair("efa_0", &[Efa], true), pair("m0", &[Dmabuf], false)]);
        assert_eq!(
            (mixed.text.as_str(), mixed.paths),
            ("ready (dma-buf and EFA)", vec![Dmabuf, Efa])
        );
        let one_efa_without = v(&[
            pair("efa_0", &[Dmabuf, Efa], true),
            pair("efa_1", &[Dmabuf], true),
        ]);
        assert_eq!(
            (one_efa_without.text.as_str(), one_efa_without.paths),
            ("ready (dma-buf)", vec![Dmabuf])
        );
        let three = v(&[
            pair("efa_0", &[Efa], true),
            pair("m0", &[Dmabuf], false),
            pair("m1", &[PeerMemory], false),
        ]);
        assert_eq!(three.text, "ready (dma-buf, peer memory and EFA)");
        let dmabuf_everywhere = v(&[
            pair("m0", &[Dmabuf, PeerMemory], false),
            pair("m1", &[Dmabuf], false),
        ]);
        assert_eq!(
            (dmabuf_everywhere.text.as_str(), dmabuf_everywhere.paths),
            ("ready (dma-buf)", vec![Dmabuf])
        );
    }

    #[test]
    fn not_probed_is_said_once() {
        let v = verdict(
            &[],
            &[
                pair("m0", &[GdrPath::Dmabuf], false),
                pair("m1", &[GdrPath::Dmabuf], false),
            ],
            Require::Any,
            |_| String::new(),
        );
        assert_eq!(
            v.with_not_probed(),
            "ready (dma-buf) (not probed, assumed good: the NIC probe)"
        );
    }
}
