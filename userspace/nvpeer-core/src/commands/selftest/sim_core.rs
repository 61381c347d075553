// SPDX-License-Identifier: MIT OR Apache-2.0
//! Registration through peer_core_sim (the test VM's MOFED core stand-in): its REG_MR test
//! interface runs the peer-memory client calls MOFED's core would, and its DMA ioctl moves
//! data as the NIC would.

use std::os::fd::AsRawFd;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use super::{Run, PEER_CORE_SIM};
use crate::commands::bench::mem::{first_mismatch, pattern, Buffer};
use crate::commands::stats;
use crate::host::Host;

/// The stand-in core's ioctls (tests/stand-ins/include: PEER_CORE_SIM_IOC_*).
mod pcs_ioctl {
    use super::{PcsDma, PcsReg};
    nix::ioctl_readwrite!(reg_mr, b'P', 1, PcsReg);
    nix::ioctl_write_ptr!(dereg_mr, b'P', 2, u32);
    nix::ioctl_write_ptr!(dma, b'P', 3, PcsDma);
}

#[repr(C)]
struct PcsReg {
    addr: u64,
    size: u64,
    access: u32,
    kind: u32,
    inject: u32,
    id: u32,
    peer: u32,
    pad: u32,
    client: [u8; 64],
}

const _: () = assert!(std::mem::size_of::<PcsReg>() == 104);

#[repr(C)]
struct PcsDma {
    id: u32,
    dir: u32,
    offset: u64,
    len: u64,
    buf: u64,
}
const _: () = assert!(std::mem::size_of::<PcsDma>() == 32);

/// The stand-in NIC's DMA between MR `id` (from its start) and `data`: `dir` 0 writes `data`
/// into the MR, 1 reads the MR into `data`.
fn sim_dma(fd: i32, id: u32, dir: u32, data: &mut [u8]) -> Result<(), std::io::Error> {
    let dma = PcsDma {
        id,
        dir,
        offset: 0,
        len: data.len() as u64,
        buf: data.as_mut_ptr() as u64,
    };
    // SAFETY: struct peer_core_sim_dma; `data` outlives the call and holds `len` bytes.
    unsafe { pcs_ioctl::dma(fd, &dma) }
        .map(drop)
        .map_err(std::io::Error::from)
}

fn diagnose(host: &Host, e: &std::io::Error) -> String {
    if e.raw_os_error() != Some(Errno::EFAULT as i32) {
        return e.to_string();
    }
    let module = host.sys_path("module/nvidia_peermem").exists()
        || host.sys_path("module/nv_peer_mem").exists();
    let cause = if !module {
        "the peer-memory module is not loaded (modprobe nvidia_peermem)"
    } else if host.sys_path("kernel/mm/memory_peers").exists()
        && !host.sys_path("kernel/mm/memory_peers/nv_mem").exists()
    {
        "nvidia_peermem is loaded but its client is not registered with the IB core (see dmesg)"
    } else {
        "no peer-memory client took the range: GPU without GPUDirect RDMA support, or the pointer is not a CUDA allocation"
    };
    format!("{e}: likely cause: {cause}")
}

pub(super) fn sim_core_register(
    r: &mut Run,
    host: &Host,
    buf: &Buffer,
    size: usize,
) -> Option<stats::Stats> {
    let fd = match nix::fcntl::open(
        PEER_CORE_SIM,
        OFlag::O_RDWR | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(e) => {
            r.fail(
                "register",
                format!("cannot open {PEER_CORE_SIM}: {}", std::io::Error::from(e)),
            );
            return None;
        }
    };
    let mut reg = PcsReg {
        addr: buf.addr,
        size: size as u64,
        access: 1,
        kind: 0,
        inject: 0,
        id: 0,
        peer: 0,
        pad: 0,
        client: [0; 64],
    };
    // SAFETY: struct peer_core_sim_reg, in/out.
    let rc = unsafe { pcs_ioctl::reg_mr(fd.as_raw_fd(), &mut reg) };
    let during = if let Err(e) = rc {
        r.fail(
            "register",
            format!(
                "peer_core_sim REG_MR of {size} bytes at {:#x}: {}",
                buf.addr,
                diagnose(host, &std::io::Error::from(e))
            ),
        );
        None
    } else {
        let client = String::from_utf8_lossy(reg.client.split(|&b| b == 0).next().unwrap_or(&[]))
            .into_owned();
        if reg.peer == 1 && client == "nv_mem" {
            r.ok(
                "register",
                format!("peer_core_sim REG_MR (test interface of the MOFED core stand-in): taken by peer client {client}, MR {}", reg.id),
            );
        } else {
            r.fail(
                "register",
                format!(
                    "registered, but not through our client: peer={} client={client:?}",
                    reg.peer
                ),
            );
        }
        let during = stats::read(host).ok();
        // The "NIC" writes a pattern into the MR, the CPU checks it; then the CPU writes
        // another and the "NIC" reads it back.
        let mut a = pattern(1, size);
        let mut got = vec![0u8; size];
        let r1 = sim_dma(fd.as_raw_fd(), reg.id, 0, &mut a)
            .map_err(|e| format!("DMA into the MR: {e}"))
            .and_then(|()| buf.read(0, &mut got).map_err(|e| e.to_string()))
            .and_then(|()| match first_mismatch(&got, &a) {
                None => Ok(()),
                Some(i) => Err(format!("NIC write: byte {i} differs in GPU memory")),
            });
        let b = pattern(2, size);
        let mut back = vec![0u8; size];
        let r2 = buf.write(0, &b).map_err(|e| e.to_string()).and_then(|()| {
            sim_dma(fd.as_raw_fd(), reg.id, 1, &mut back)
                .map_err(|e| format!("DMA from the MR: {e}"))?;
            match first_mismatch(&back, &b) {
                None => Ok(()),
                Some(i) => Err(format!("NIC read: byte {i} differs")),
            }
        });
        match (r1, r2) {
            (Ok(()), Ok(())) => r.ok(
                "transfer",
                format!("{size} bytes written into and {size} read from GPU memory by the NIC stand-in, every byte verified"),
            ),
            (Err(e), _) | (_, Err(e)) => r.fail("transfer", e),
        }
        let id = reg.id;
        // SAFETY: a __u32 MR id of this fd.
        if let Err(e) = unsafe { pcs_ioctl::dereg_mr(fd.as_raw_fd(), &id) } {
            r.fail(
                "deregister",
                format!("DEREG_MR: {}", std::io::Error::from(e)),
            );
        } else {
            r.ok("deregister", format!("MR {id} deregistered"));
        }
        during
    };
    // Closes the fd opened above.
    drop(fd);
    during
}
