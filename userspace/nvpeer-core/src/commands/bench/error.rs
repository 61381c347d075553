// SPDX-License-Identifier: MIT OR Apache-2.0
//! The errors of `bench` and `selftest`, and the words for a failed registration.

use nix::errno::Errno;

use super::cuda_alloc;
use super::mem::{Buffer, MemKind};

/// Errors of `bench` and `selftest`; each is one line for the user.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("libibverbs unavailable: {0}")]
    NoVerbs(String),
    #[error("librdmacm unavailable (needed by --rdma-cm): {0}")]
    NoRdmaCm(String),
    #[error("no RDMA device: {0}")]
    NoDevice(String),
    #[error("{what} failed: {source}")]
    Verbs {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("registration failed: {0}")]
    Register(String),
    #[error("CUDA: {0}")]
    Cuda(String),
    /// `--dmabuf-mapping pcie` where the driver does not offer it.
    #[error("--dmabuf-mapping pcie is not offered here: {0}")]
    PcieMapping(String),
    #[error("memory: {0}")]
    Memory(String),
    #[error("peer: {0}")]
    Peer(String),
    /// The control connection ended: the peer exited, was killed, or gave up after an error
    /// of its own (which then explains more).
    #[error("peer: {0}")]
    PeerClosed(String),
    #[error("data verification failed: {0}")]
    Validation(String),
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Selftest(String),
}

impl BenchError {
    pub fn verbs(what: impl Into<String>, source: std::io::Error) -> Self {
        Self::Verbs {
            what: what.into(),
            source,
        }
    }
}

/// Why an `ibv_reg_mr` of GPU memory failed, in words (EFAULT: nobody claimed the range).
pub fn describe_reg_error(what: &str, e: &std::io::Error, buf: &Buffer) -> String {
    let base = format!(
        "{what} of {} bytes of {} memory at {:#x}: {e}",
        buf.len,
        buf.kind.label(),
        buf.addr
    );
    let efault = e.raw_os_error() == Some(Errno::EFAULT as i32);
    if let (true, Some(f)) = (efault, buf.facts()) {
        if f.path() != cuda_alloc::RegistrationPath::PeerMemory {
            return format!("{base}: cause: {}", f.explain());
        }
    }
    if efault && buf.kind != MemKind::Host {
        let module = std::path::Path::new("/sys/module/nvidia_peermem").exists()
            || std::path::Path::new("/sys/module/nv_peer_mem").exists();
        let cause = if !module {
            "the peer-memory module is not loaded (insmod/modprobe nvidia_peermem)".to_owned()
        } else if std::path::Path::new("/sys/kernel/mm/memory_peers").exists()
            && !std::path::Path::new("/sys/kernel/mm/memory_peers/nv_mem").exists()
        {
            "nvidia_peermem is loaded but its client is not registered with the IB core (no \
             /sys/kernel/mm/memory_peers/nv_mem: load order or a MOFED mismatch, see dmesg)"
                .to_owned()
        } else {
            "no peer-memory client took the range: the GPU may lack GPUDirect RDMA support \
             (CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED), or the pointer is not a CUDA \
             device allocation (cuMemAlloc/cudaMalloc)"
                .to_owned()
        };
        format!("{base}: likely cause: {cause}")
    } else {
        base
    }
}
