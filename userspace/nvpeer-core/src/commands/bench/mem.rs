//! Buffers the engine transfers from and into: host memory, CUDA device memory, and the
//! nv_p2p_sim stand-in's "GPU memory" (tests). Each knows how the CPU reads and writes it.

use std::ffi::c_void;
use std::num::NonZeroUsize;
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::Arc;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::mman::{mmap, mmap_anonymous, munmap, MapFlags, ProtFlags};
use nix::sys::stat::Mode;
use serde::Serialize;

use super::cuda::{Cuda, DmabufMapping};
use super::cuda_alloc::{Allocation, CudaAlloc, PointerFacts, RegistrationPath};
use super::BenchError;

/// Where the buffer lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MemKind {
    Host,
    Cuda,
    /// nv_p2p_sim's "GPU memory" (VM_PFNMAP host pages): the test stand-in of cudaMalloc.
    Sim,
}

/// How the buffer is registered with the NIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RegPath {
    /// `ibv_reg_mr` on the VA: pinned host pages, or for GPU memory the peer-memory path
    /// (MOFED's core asks the peer clients: our module).
    RegMr,
    /// `cuMemGetHandleForAddressRange` (with this mapping type) + `ibv_reg_dmabuf_mr`
    /// (upstream dma-buf path).
    Dmabuf(DmabufMapping),
}

impl RegPath {
    pub fn label(self, kind: MemKind) -> &'static str {
        match (self, kind) {
            (RegPath::RegMr, MemKind::Host) => "ibv_reg_mr (pinned host pages)",
            (RegPath::RegMr, _) => "ibv_reg_mr (peer memory: nvidia_peermem)",
            (RegPath::Dmabuf(DmabufMapping::Default), _) => "ibv_reg_dmabuf_mr (dma-buf)",
            (RegPath::Dmabuf(DmabufMapping::Pcie), _) => {
                "ibv_reg_dmabuf_mr (dma-buf, PCIe mapping type)"
            }
        }
    }
}

impl MemKind {
    pub fn label(self) -> &'static str {
        match self {
            MemKind::Host => "host",
            MemKind::Cuda => "cuda",
            MemKind::Sim => "sim (nv_p2p_sim GPU stand-in)",
        }
    }
}

const NV_P2P_SIM: &str = "/dev/nv_p2p_sim";

/// The stand-in's ioctls (tests/stand-ins/include/nvpeer_sim_uapi.h).
mod sim_ioctl {
    // NV_P2P_SIM_IOC_ALLOC: struct nv_p2p_sim_alloc is 24 bytes: size, flags+id, mmap_offset.
    nix::ioctl_readwrite!(alloc, b'N', 1, [u64; 3]);
    // NV_P2P_SIM_IOC_FREE: the start VA of the allocation.
    nix::ioctl_write_ptr!(free, b'N', 2, u64);
}

/// A buffer of one of the kinds.
pub struct Buffer {
    pub kind: MemKind,
    pub addr: u64,
    pub len: usize,
    cuda: Option<Arc<Cuda>>,
    /// How CUDA memory was allocated, and what the driver says about it (CUDA buffers only).
    alloc: Option<Allocation>,
    facts: Option<PointerFacts>,
    /// The nv_p2p_sim fd of a sim buffer (closing it frees the allocation).
    sim_fd: Option<OwnedFd>,
}

// SAFETY: the buffer is owned memory; concurrent access is the engine's business.
unsafe impl Send for Buffer {}

pub(super) fn mmap_anon(len: usize) -> Result<u64, BenchError> {
    let p = match NonZeroUsize::new(len) {
        // SAFETY: a fresh private anonymous mapping.
        Some(n) => unsafe {
            mmap_anonymous(
                None,
                n,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_PRIVATE,
            )
        },
        None => Err(Errno::EINVAL),
    };
    match p {
        Ok(p) => Ok(p.as_ptr() as u64),
        Err(e) => Err(BenchError::Memory(format!(
            "mmap of {len} bytes: {}",
            std::io::Error::from(e)
        ))),
    }
}

/// Unmaps `[addr, addr + len)` (an error is ignored: there is nothing to do about it when
/// freeing).
///
/// # Safety
///
/// The range is a mapping of this process that nothing uses any more.
pub(super) unsafe fn unmap(addr: u64, len: usize) {
    if let Some(p) = NonNull::new(addr as *mut c_void) {
        // SAFETY: the caller's promise.
        let _ = unsafe { munmap(p, len) };
    }
}

impl Buffer {
    pub fn host(len: usize) -> Result<Self, BenchError> {
        let len = len.max(4096);
        Ok(Self {
            kind: MemKind::Host,
            addr: mmap_anon(len)?,
            len,
            cuda: None,
            alloc: None,
            facts: None,
            sim_fd: None,
        })
    }

    /// CUDA memory allocated the way `how` says (the length may grow to its granularity).
    pub fn cuda(cuda: Arc<Cuda>, how: CudaAlloc, len: usize) -> Result<Self, BenchError> {
        let a = cuda.allocate(how, len.max(4096))?;
        let facts = cuda.pointer_facts(a.ptr).ok();
        Ok(Self {
            kind: MemKind::Cuda,
            addr: a.ptr,
            len: a.len,
            cuda: Some(cuda),
            alloc: Some(a),
            facts,
            sim_fd: None,
        })
    }

    /// The driver's pointer and allocation facts (CUDA buffers).
    pub fn facts(&self) -> Option<&PointerFacts> {
        self.facts.as_ref()
    }

    /// The memory in words: the kind, and for CUDA other than cuMemAlloc how it was allocated.
    pub fn describe(&self) -> String {
        match self.cuda_alloc() {
            Some(a) if a != CudaAlloc::Device => format!("{} ({})", self.kind.label(), a.api()),
            _ => self.kind.label().to_owned(),
        }
    }

    /// How `ibv_reg_mr` of this buffer goes, in words.
    pub fn reg_label(&self, reg: RegPath) -> &'static str {
        match (reg, self.facts.as_ref().map(PointerFacts::path)) {
            (RegPath::RegMr, Some(RegistrationPath::HostPages)) => {
                "ibv_reg_mr (host pages pinned by the kernel: not GPUDirect RDMA)"
            }
            _ => reg.label(self.kind),
        }
    }

    /// How a CUDA buffer was allocated.
    pub fn cuda_alloc(&self) -> Option<CudaAlloc> {
        self.alloc.as_ref().map(|a| a.kind)
    }

    /// nv_p2p_sim "GPU memory" (size rounded up to 64 KiB).
    pub fn sim(len: usize) -> Result<Self, BenchError> {
        let len = len.max(1).div_ceil(64 << 10) * (64 << 10);
        let fd = nix::fcntl::open(NV_P2P_SIM, OFlag::O_RDWR | OFlag::O_CLOEXEC, Mode::empty())
            .map_err(|e| {
                BenchError::Memory(format!(
                    "cannot open {NV_P2P_SIM} (nv_p2p_sim stand-in not loaded?): {}",
                    std::io::Error::from(e)
                ))
            })?;
        let mut req = [0u64; 3];
        req[0] = len as u64;
        // SAFETY: struct nv_p2p_sim_alloc, in/out. On an error `fd` is closed on return.
        if let Err(e) = unsafe { sim_ioctl::alloc(fd.as_raw_fd(), &mut req) } {
            return Err(BenchError::Memory(format!(
                "nv_p2p_sim ALLOC of {len} bytes: {}",
                std::io::Error::from(e)
            )));
        }
        let mapped = match NonZeroUsize::new(len) {
            // SAFETY: the stand-in's mapping of the allocation at the returned offset.
            Some(n) => unsafe {
                mmap(
                    None,
                    n,
                    ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                    MapFlags::MAP_SHARED,
                    &fd,
                    req[2] as _,
                )
            },
            None => Err(Errno::EINVAL),
        };
        // On an error `fd` is closed on return (closing frees the allocation).
        let p = mapped.map_err(|e| {
            BenchError::Memory(format!(
                "mmap of nv_p2p_sim memory: {}",
                std::io::Error::from(e)
            ))
        })?;
        Ok(Self {
            kind: MemKind::Sim,
            addr: p.as_ptr() as u64,
            len,
            cuda: None,
            alloc: None,
            facts: None,
            sim_fd: Some(fd),
        })
    }

    pub fn ptr(&self) -> *mut c_void {
        self.addr as *mut c_void
    }

    /// Whether the CPU can read it in place (memory polling for write latency).
    pub fn cpu_visible(&self) -> bool {
        self.kind != MemKind::Cuda
    }

    fn check(&self, off: usize, n: usize) -> Result<(), BenchError> {
        if off.checked_add(n).is_none_or(|e| e > self.len) {
            return Err(BenchError::Memory(format!(
                "access {off}+{n} beyond the {}-byte buffer",
                self.len
            )));
        }
        Ok(())
    }

    pub fn write(&self, off: usize, data: &[u8]) -> Result<(), BenchError> {
        self.check(off, data.len())?;
        match &self.cuda {
            Some(c) => c.htod(self.addr + off as u64, data),
            None => {
                // SAFETY: in bounds of our mapping.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        data.as_ptr(),
                        (self.addr as *mut u8).add(off),
                        data.len(),
                    )
                };
                Ok(())
            }
        }
    }

    pub fn read(&self, off: usize, out: &mut [u8]) -> Result<(), BenchError> {
        self.check(off, out.len())?;
        match &self.cuda {
            Some(c) => c.dtoh(out, self.addr + off as u64),
            None => {
                // SAFETY: in bounds of our mapping.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        (self.addr as *const u8).add(off),
                        out.as_mut_ptr(),
                        out.len(),
                    )
                };
                Ok(())
            }
        }
    }

    /// One byte, read volatile (CPU-visible memory only).
    pub fn peek(&self, off: usize) -> u8 {
        debug_assert!(self.cpu_visible() && off < self.len);
        // SAFETY: in bounds; the NIC writes it concurrently, hence volatile.
        unsafe { std::ptr::read_volatile((self.addr as *const u8).add(off)) }
    }

    pub fn poke(&self, off: usize, v: u8) {
        debug_assert!(self.cpu_visible() && off < self.len);
        // SAFETY: as peek.
        unsafe { std::ptr::write_volatile((self.addr as *mut u8).add(off), v) }
    }

    /// Frees an nv_p2p_sim allocation through its FREE ioctl ("cudaFree").
    fn free_sim(&mut self) {
        let va = self.addr;
        if let Some(fd) = &self.sim_fd {
            // SAFETY: FREE takes the start VA of a live allocation of this fd.
            let _ = unsafe { sim_ioctl::free(fd.as_raw_fd(), &va) };
        }
        // SAFETY: the mapping made in sim(); FREE may have removed it already.
        unsafe { unmap(self.addr, self.len) };
        // Closes the fd opened in sim().
        self.sim_fd = None;
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        match self.kind {
            MemKind::Host => {
                // SAFETY: the mapping made in host().
                unsafe { unmap(self.addr, self.len) };
            }
            MemKind::Cuda => {
                if let (Some(c), Some(a)) = (&self.cuda, &self.alloc) {
                    c.release(a);
                }
            }
            MemKind::Sim => self.free_sim(),
        }
    }
}

/// The test pattern of message `seed` (every byte depends on seed and position; the last
/// byte of consecutive seeds differs, which memory polling relies on).
pub fn pattern(seed: u64, n: usize) -> Vec<u8> {
    let k = (seed as u8).wrapping_mul(0xB1).wrapping_add(0x5A);
    (0..n)
        .map(|j| (j as u8).wrapping_mul(31) ^ ((j >> 8) as u8) ^ k)
        .collect()
}

/// The byte at which `got` differs from `want`, if any.
pub fn first_mismatch(got: &[u8], want: &[u8]) -> Option<usize> {
    got.iter().zip(want).position(|(a, b)| a != b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_patterns_differ_in_the_last_byte() {
        for n in [1usize, 2, 8, 4096, 65537] {
            for s in 0..600u64 {
                let a = pattern(s, n);
                let b = pattern(s + 1, n);
                assert_ne!(a[n - 1], b[n - 1], "n {n} seed {s}");
            }
        }
    }

    #[test]
    fn mismatch_is_found() {
        let a = pattern(3, 100);
        let mut b = a.clone();
        assert_eq!(first_mismatch(&a, &b), None);
        b[42] ^= 1;
        assert_eq!(first_mismatch(&a, &b), Some(42));
    }

    #[test]
    fn host_buffer_round_trip() {
        let b = Buffer::host(8192).expect("mmap");
        b.write(100, b"abc").expect("write");
        let mut out = [0u8; 3];
        b.read(100, &mut out).expect("read");
        assert_eq!(&out, b"abc");
        assert!(b.write(8190, b"abc").is_err());
    }
}
