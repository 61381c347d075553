// SPDX-License-Identifier: MIT OR Apache-2.0
//! Which registration path a buffer took to the NIC, as reports name it: GPU memory through
//! the peer-memory client (`ibv_reg_mr`), a dma-buf of GPU memory (`ibv_reg_dmabuf_mr`, with
//! its mapping type), or host pages the kernel pins itself (`ibv_reg_mr`; also CUDA managed
//! and host-registered memory, which is not GPUDirect RDMA).

use serde::Serialize;

use super::cuda::DmabufMapping;
use super::cuda_alloc::RegistrationPath;
use super::mem::{MemKind, RegPath};
use crate::check::{gdr_words, GdrPath};

/// The path of a registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Path {
    PeerMemory,
    Dmabuf,
    HostMemory,
}

/// A registration: its path, the verbs call and, for dma-buf, the mapping type asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Registration {
    pub path: Path,
    /// `ibv_reg_mr` or `ibv_reg_dmabuf_mr`.
    pub api: &'static str,
    /// dma-buf only.
    pub dmabuf_mapping: Option<DmabufMapping>,
}

impl Registration {
    /// The path of `reg` for memory of `kind`; `pointer` is what the CUDA driver says about a
    /// CUDA pointer (managed and host-registered memory are host pages), when known.
    pub fn of(reg: RegPath, kind: MemKind, pointer: Option<RegistrationPath>) -> Self {
        match reg {
            RegPath::Dmabuf(mapping) => Self {
                path: Path::Dmabuf,
                api: "ibv_reg_dmabuf_mr",
                dmabuf_mapping: Some(mapping),
            },
            RegPath::RegMr => Self {
                path: match (kind, pointer) {
                    (MemKind::Host, _) | (_, Some(RegistrationPath::HostPages)) => Path::HostMemory,
                    _ => Path::PeerMemory,
                },
                api: "ibv_reg_mr",
                dmabuf_mapping: None,
            },
        }
    }

    /// `peer memory (ibv_reg_mr)`, `dma-buf, PCIe mapping (ibv_reg_dmabuf_mr)`.
    pub fn label(&self) -> String {
        let path = match (self.path, self.dmabuf_mapping) {
            (Path::PeerMemory, _) => "peer memory",
            (Path::Dmabuf, Some(DmabufMapping::Pcie)) => "dma-buf, PCIe mapping",
            (Path::Dmabuf, _) => "dma-buf",
            (Path::HostMemory, _) => "host memory",
        };
        format!("{path} ({})", self.api)
    }
}

impl Registration {
    /// The GPUDirect RDMA path of this registration as `check` names it; `None` for host memory.
    pub fn gdr_path(&self) -> Option<GdrPath> {
        match self.path {
            Path::PeerMemory => Some(GdrPath::PeerMemory),
            Path::Dmabuf => Some(GdrPath::Dmabuf),
            Path::HostMemory => None,
        }
    }
}

/// The mode a run got on a pair, in `check`'s words ([`gdr_words`]: what `check`'s NCCL line of
/// the pair says after `net IB, `), so a prediction and its proof compare on a real node:
/// `bench --loopback-all` (`pairs[].got`) and `selftest` (`got`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Got {
    /// `GDR, dma-buf`, `GDR, peer memory`, `staged` (through host memory), or `none` (nothing
    /// moved).
    pub mode: String,
    /// The path as `check --json`'s `pairs[].preferred` spells it (`dmabuf`, `peer_memory`);
    /// `null` for `staged` and `none`.
    pub path: Option<GdrPath>,
    /// What showed it (the steps or transfers), or why nothing did.
    pub shown_by: String,
}

impl Got {
    /// Data moved through `reg`.
    pub fn moved(reg: &Registration, shown_by: impl Into<String>) -> Self {
        let path = reg.gdr_path();
        Self {
            mode: gdr_words(path).to_owned(),
            path,
            shown_by: shown_by.into(),
        }
    }

    /// Data moved only through host memory.
    pub fn staged(shown_by: impl Into<String>) -> Self {
        Self {
            mode: gdr_words(None).to_owned(),
            path: None,
            shown_by: shown_by.into(),
        }
    }

    /// Nothing moved.
    pub fn none(why: impl Into<String>) -> Self {
        Self {
            mode: "none".to_owned(),
            path: None,
            shown_by: why.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn got_is_in_checks_words() {
        let dmabuf = Registration::of(RegPath::Dmabuf(DmabufMapping::Default), MemKind::Cuda, None);
        let got = Got::moved(&dmabuf, "RDMA write measured");
        assert_eq!(got.mode, "GDR, dma-buf");
        assert_eq!(got.path, Some(GdrPath::Dmabuf));
        // check's NCCL line of a dma-buf pair ends in the same words.
        assert_eq!(got.mode, gdr_words(Some(GdrPath::Dmabuf)));
        let peer = Registration::of(RegPath::RegMr, MemKind::Cuda, None);
        assert_eq!(Got::moved(&peer, "").mode, "GDR, peer memory");
        let host = Registration::of(RegPath::RegMr, MemKind::Host, None);
        let got = Got::moved(&host, "");
        assert_eq!((got.mode.as_str(), got.path), ("staged", None));
        let json = serde_json::to_value(Got::moved(&peer, "x")).unwrap();
        assert_eq!(json["path"], "peer_memory");
        assert_eq!(json["mode"], "GDR, peer memory");
    }

    #[test]
    fn paths_follow_the_registration_and_the_memory() {
        let host = Registration::of(RegPath::RegMr, MemKind::Host, None);
        assert_eq!(host.label(), "host memory (ibv_reg_mr)");
        let peer = Registration::of(RegPath::RegMr, MemKind::Cuda, None);
        assert_eq!(peer.label(), "peer memory (ibv_reg_mr)");
        assert_eq!(
            Registration::of(RegPath::RegMr, MemKind::Sim, None).path,
            Path::PeerMemory
        );
        let managed = Registration::of(
            RegPath::RegMr,
            MemKind::Cuda,
            Some(RegistrationPath::HostPages),
        );
        assert_eq!(managed.path, Path::HostMemory);
        let pcie = Registration::of(RegPath::Dmabuf(DmabufMapping::Pcie), MemKind::Cuda, None);
        assert_eq!(pcie.label(), "dma-buf, PCIe mapping (ibv_reg_dmabuf_mr)");
        let json = serde_json::to_value(pcie).unwrap();
        assert_eq!(json["path"], "dmabuf");
        assert_eq!(json["dmabuf_mapping"], "pcie");
        assert_eq!(
            serde_json::to_value(peer).unwrap()["dmabuf_mapping"],
            serde_json::Value::Null
        );
    }
}
