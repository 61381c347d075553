// SPDX-License-Identifier: MIT OR Apache-2.0
//! What a bench run is asked to do: the operation, where the peer is, sizes, memory and
//! registration, queue-pair settings.

use serde::{Deserialize, Serialize};

use super::cuda_alloc;
use super::engine::SideOpts;
use super::mem::{MemKind, RegPath};

/// The RDMA operation measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    Write,
    Read,
    Send,
    WriteImm,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Write => "write",
            Op::Read => "read",
            Op::Send => "send",
            Op::WriteImm => "write_imm",
        }
    }
}

/// Where the peer is.
#[derive(Clone, Debug)]
pub enum Mode {
    /// Client and server in this process on one device (the server runs in a thread).
    Loopback,
    Server {
        bind: String,
    },
    Client {
        addr: String,
    },
}

#[derive(Clone, Debug)]
pub struct BenchOpts {
    pub mode: Mode,
    pub op: Op,
    pub sizes: Vec<usize>,
    pub iters: u64,
    pub latency: bool,
    pub validate: bool,
    /// Before measuring each size, move this many messages one at a time with every byte
    /// compared (`--loopback-all`'s verification pass; 0: none). The measured run then keeps
    /// its depth, so its rate stays a bandwidth figure.
    pub verify_first: u64,
    pub mem: MemKind,
    /// How CUDA memory is allocated (`--alloc`; --mem cuda only).
    pub alloc: cuda_alloc::CudaAlloc,
    pub reg: RegPath,
    pub gpu: i32,
    pub side: SideOpts,
    pub compare_staged: bool,
    /// Repeat batches of `iters` per size until this much time has passed.
    pub duration: Option<std::time::Duration>,
    /// Server: the largest message it accepts (its buffer is twice this).
    pub max_size: usize,
    /// Both sides post at once (perftest's -b): the server posts the same run on a second
    /// connection while the client posts on the first.
    pub bidirectional: bool,
    /// Connect the QP through librdmacm (the control messages still use TCP).
    pub rdma_cm: bool,
}

/// perftest's `--all` sizes: 2 B .. 8 MiB.
pub fn all_sizes() -> Vec<usize> {
    (1..=23).map(|i| 1usize << i).collect()
}

/// Per-size progress callback: (index, count, size).
pub type Progress<'a> = &'a dyn Fn(usize, usize, usize);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_sizes_span_2_bytes_to_8_mib() {
        let s = all_sizes();
        assert_eq!(s.first(), Some(&2));
        assert_eq!(s.last(), Some(&(8 << 20)));
        assert_eq!(s.len(), 23);
    }
}
