// SPDX-License-Identifier: GPL-2.0

//! NVIDIA's P2P API (nvidia.ko), called through the pointers the C glue resolved at load time
//! (weak references, so a missing driver is reported by us rather than by the loader).
//!
//! Rules from NVIDIA's implementation (CONTRACT 2.5, 2.6) that every caller here must respect:
//! - `get_pages`, `put_pages`, their persistent forms and `dma_map_pages` take the RM API lock:
//!   never call them from inside the free callback (NVIDIA holds that lock there).
//! - After a successful `put_pages*` or after the free callback *returns*, the page table and
//!   every DMA mapping on it are freed by NVIDIA: no call may touch them again.
//! - `dma_unmap_pages`, where called, must precede `put_pages`, which frees (and unmaps) every
//!   mapping left on the table (`nv_p2p_free_page_table`): a deregistration that unpins leaves
//!   its mapping to it (`context`).
//!
//! Two hazards of NVIDIA's API that no client can close (CONTRACT 2.4, REVIEW-KMOD C2, C3); both
//! need a free callback, so the persistent client (the default) never meets them:
//! - `dma_map_pages` reads the page table before taking its RM lock and links the new mapping into
//!   it after dropping it: a cudaFree while an invalidating registration is being DMA-mapped makes
//!   NVIDIA read and write freed memory.
//! - `put_pages` after the free callback won the race: 515-530 read the freed table (its
//!   `gpu_uuid` before the RM lookup, `bPersistent` after it); every version looks the pin up by
//!   (VA, table address), so a new pin of the same VA whose table reuses that address is unpinned
//!   instead.
use core::ffi::c_void;
use core::ptr::{self, NonNull};

use kernel::bindings;
use kernel::error::to_result;
use kernel::prelude::*;

use crate::atomic::SetOnce;
use crate::ffi;
use crate::log::nv_err;
use crate::stats::{self, Op};

/// 64 KiB: the only page size NVIDIA's P2P API produces.
pub(crate) const GPU_PAGE_SIZE: u64 = 1 << 16;

/// How this driver pins memory that must never be revoked (the `nv_mem` persistent client).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PersistentApi {
    /// 535.43.02+: `nvidia_p2p_get_pages_persistent` / `nvidia_p2p_put_pages_persistent`.
    Explicit,
    /// <= 530: `nvidia_p2p_get_pages` with a NULL free callback pins persistently.
    NullCallback,
    /// Neither: only the invalidating client can be offered.
    Unavailable,
}

/// The resolved P2P API.
pub(crate) struct Api {
    raw: ffi::nvpeer_p2p_api,
    persistent: PersistentApi,
}

static API: SetOnce<Api> = SetOnce::new();

/// The free callback NVIDIA calls when pinned memory is freed under us (cudaFree).
pub(crate) type FreeCallback = unsafe extern "C" fn(data: *mut c_void);

impl Api {
    /// Resolves the API once at load; fails with a log line naming what is missing.
    pub(crate) fn resolve(raw: ffi::nvpeer_p2p_api) -> Result<&'static Api> {
        if raw.get_pages.is_none()
            || raw.put_pages.is_none()
            || raw.dma_map_pages.is_none()
            || raw.dma_unmap_pages.is_none()
        {
            pr_err!(
                "nvidia_p2p_* symbols not found: load the NVIDIA GPU driver (nvidia.ko) first, e.g. `modprobe nvidia`\n"
            );
            return Err(ENODEV);
        }
        let persistent = if raw.get_pages_persistent.is_some() && raw.put_pages_persistent.is_some() {
            PersistentApi::Explicit
        } else if raw.cap_persistent_pages > 0 {
            PersistentApi::NullCallback
        } else {
            PersistentApi::Unavailable
        };
        // A second load cannot happen while this module is loaded; ignore a repeated populate.
        API.populate(Api { raw, persistent });
        API.as_ref().ok_or(EINVAL)
    }

    /// The API resolved at load.
    pub(crate) fn get() -> Option<&'static Api> {
        API.as_ref()
    }

    pub(crate) fn persistent(&self) -> PersistentApi {
        self.persistent
    }

    /// Pins `[va, va + len)` (64 KiB aligned) with a free callback.
    ///
    /// # Safety
    ///
    /// Not from inside a free callback. `data` must stay valid until either the callback has run
    /// or `put_pages` of the returned table has returned.
    pub(crate) unsafe fn get_pages(
        &self,
        va: u64,
        len: u64,
        callback: FreeCallback,
        data: *mut c_void,
    ) -> Result<NonNull<ffi::nvidia_p2p_page_table>> {
        let f = self.raw.get_pages.ok_or(ENODEV)?;
        let mut table = ptr::null_mut();
        // SAFETY: `f` is NVIDIA's `nvidia_p2p_get_pages`; `table` is a valid out-pointer; the
        // caller guarantees the context and the lifetime of `data`.
        to_result(unsafe { f(0, 0, va, len, &mut table, Some(callback), data) })?;
        NonNull::new(table).ok_or(EINVAL)
    }

    /// Pins `[va, va + len)` persistently (never revoked).
    ///
    /// # Safety
    ///
    /// Not from inside a free callback.
    pub(crate) unsafe fn get_pages_persistent(
        &self,
        va: u64,
        len: u64,
    ) -> Result<NonNull<ffi::nvidia_p2p_page_table>> {
        let mut table = ptr::null_mut();
        let ret = match self.persistent {
            PersistentApi::Explicit => {
                let f = self.raw.get_pages_persistent.ok_or(ENODEV)?;
                // SAFETY: NVIDIA's `nvidia_p2p_get_pages_persistent`; valid out-pointer.
                unsafe { f(va, len, &mut table, 0) }
            }
            PersistentApi::NullCallback => {
                let f = self.raw.get_pages.ok_or(ENODEV)?;
                // SAFETY: <= 530 semantics: a NULL callback asks for a persistent pin.
                unsafe { f(0, 0, va, len, &mut table, None, ptr::null_mut()) }
            }
            PersistentApi::Unavailable => return Err(ENOTSUPP),
        };
        to_result(ret)?;
        NonNull::new(table).ok_or(EINVAL)
    }

    /// Unpins a table from `get_pages`. Returns 0 also when NVIDIA found nothing to unpin, and
    /// then frees nothing: when the free callback already won the race, and when the caller is
    /// not in the process that pinned (RM looks pins up among the calling process's objects
    /// only; NVIDIA then keeps the pin and its callback). Only the pinning process's call, made
    /// before the callback ran, unpins (`pin::SharedPin::unpin` decides which it was).
    ///
    /// # Safety
    ///
    /// Not from inside a free callback; `table` came from `get_pages` at `va` and was not put.
    /// The free callback may have freed it meanwhile: 535+ then only looks (va, table) up; for
    /// what 515-530 and a reused table address do, see the module documentation.
    pub(crate) unsafe fn put_pages(&self, va: u64, table: NonNull<ffi::nvidia_p2p_page_table>) -> Result {
        let f = self.raw.put_pages.ok_or(ENODEV)?;
        // SAFETY: guaranteed by the caller.
        to_result(unsafe { f(0, 0, va, table.as_ptr()) })
    }

    /// Unpins a table from `get_pages_persistent`.
    ///
    /// # Safety
    ///
    /// Not from inside a free callback; `table` came from `get_pages_persistent` at `va` and is
    /// not used afterwards.
    pub(crate) unsafe fn put_pages_persistent(
        &self,
        va: u64,
        table: NonNull<ffi::nvidia_p2p_page_table>,
    ) -> Result {
        match self.persistent {
            PersistentApi::Explicit => {
                let f = self.raw.put_pages_persistent.ok_or(ENODEV)?;
                // SAFETY: guaranteed by the caller.
                to_result(unsafe { f(va, table.as_ptr(), 0) })
            }
            // SAFETY: guaranteed by the caller.
            PersistentApi::NullCallback => unsafe { self.put_pages(va, table) },
            PersistentApi::Unavailable => Err(ENOTSUPP),
        }
    }

    /// Maps every page of `table` for DMA by `peer`.
    ///
    /// # Safety
    ///
    /// Not from inside a free callback; inside a core call for `peer`'s umem (which the core
    /// then holds); `table` came from a pin that was not put. For a pin with a free callback
    /// the table may be freed at any point (a cudaFree; inside NVIDIA, a use-after-free no
    /// caller can prevent: module documentation): once the callback ran, neither the table nor
    /// the returned mapping may be touched again.
    pub(crate) unsafe fn dma_map_pages(
        &self,
        peer: PeerDevice,
        table: NonNull<ffi::nvidia_p2p_page_table>,
    ) -> Result<DmaMapping> {
        let f = self.raw.dma_map_pages.ok_or(ENODEV)?;
        let mut mapping = ptr::null_mut();
        // SAFETY: guaranteed by the caller; `peer` is a live PCI device (its invariant, the core
        // holding its umem: caller); valid out-pointer.
        to_result(unsafe { f(peer.pdev.as_ptr(), table.as_ptr(), &mut mapping) })?;
        let mapping = NonNull::new(mapping).ok_or(EINVAL)?;
        // INVARIANT: returned by a successful `dma_map_pages` for `peer`, which NVIDIA recorded
        // in it.
        Ok(DmaMapping { mapping })
    }

    /// Unmaps a mapping from `dma_map_pages`. Allowed inside the free callback (takes no RM
    /// lock, only the table's mapping-list semaphore).
    ///
    /// # Safety
    ///
    /// `table` is the pin `mapping` was made on; neither is freed yet (no successful
    /// `put_pages`, no completed free callback); inside a core call for the mapping's umem.
    pub(crate) unsafe fn dma_unmap_pages(
        &self,
        table: NonNull<ffi::nvidia_p2p_page_table>,
        mapping: &DmaMapping,
    ) -> Result {
        let f = self.raw.dma_unmap_pages.ok_or(ENODEV)?;
        let m = mapping.mapping.as_ptr();
        // SAFETY: a live mapping (caller); its `pci_dev` is the peer it was made for, recorded
        // by NVIDIA at map time, which NVIDIA's unmap expects (it WARNs on another; the
        // stand-in fails).
        let peer = unsafe { (*m).pci_dev };
        // SAFETY: guaranteed by the caller; `peer` is live while the core holds the umem
        // ([`PeerDevice`]).
        to_result(unsafe { f(peer, table.as_ptr(), m) })
    }
}

/// Unmaps a deregistering registration's `mapping`, counting and logging a failure (the core
/// ignores errors at deregistration; NVIDIA frees what is left with the pin).
///
/// # Safety
///
/// As [`Api::dma_unmap_pages`]: `table` is the pin `mapping` was made on, neither freed yet;
/// inside a core call for the mapping's umem.
pub(crate) unsafe fn unmap_at_dereg(table: NonNull<ffi::nvidia_p2p_page_table>, mapping: DmaMapping, start: u64) {
    let Some(api) = Api::get() else { return };
    // SAFETY: guaranteed by the caller.
    if let Err(e) = unsafe { api.dma_unmap_pages(table, &mapping) } {
        stats::failure(Op::DmaUnmap, e);
        nv_err!("dma_unmap {:#x}: nvidia_p2p_dma_unmap_pages failed: {:?}\n", start, e);
    }
}

/// The NIC's PCI device (the core's `dma_device`), which NVIDIA maps for, borrowed: no reference
/// is taken, as NVIDIA's own module takes none. The core's DMA device is its ib_device's parent
/// and the ib_device holds a reference on it; the ib_device outlives every umem on it (the core
/// deregisters them all before an unregistration completes), so the device lives as long as the
/// core holds the umem; [`Api::dma_map_pages`] and [`Api::dma_unmap_pages`] are called only
/// inside the core's calls for that umem.
///
/// Not closed by any client (nor by the reference we took before, dropped at the same point):
/// NVIDIA frees a mapping it still has through its `pci_dev` later, on its own: a revoked one
/// when the free callback returns, after the core's invalidate for the umem has returned
/// (CONTRACT 1.7, step 4) and while the callback may still invalidate the pin's other
/// registrations; one whose `nvidia_p2p_dma_unmap_pages` failed when the pin is put, maybe by
/// another registration. The core may release the umem meanwhile; a NIC removed in that window
/// leaves NVIDIA a stale device.
///
/// # Invariants
///
/// `pdev` is the PCI device of a DMA device the core passed for a umem; valid while the core
/// holds that umem.
#[derive(Clone, Copy)]
pub(crate) struct PeerDevice {
    pdev: NonNull<bindings::pci_dev>,
}

// SAFETY: only the address, passed back to NVIDIA, from any thread.
unsafe impl Send for PeerDevice {}

impl PeerDevice {
    /// The PCI device behind `dev`, or -EINVAL when it is not a PCI device.
    ///
    /// # Safety
    ///
    /// `dev` is NULL or the live DMA device the core passed for a umem it holds.
    pub(crate) unsafe fn from_dma_device(dev: *mut bindings::device) -> Result<Self> {
        if dev.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: a live device (caller).
        let pdev = NonNull::new(unsafe { ffi::nvpeer_glue_to_pci_dev(dev) }).ok_or(EINVAL)?;
        // INVARIANT: the PCI device of the core's DMA device (caller).
        Ok(Self { pdev })
    }
}

/// NVIDIA's DMA mapping of a pin for one NIC.
///
/// # Invariants
///
/// `mapping` was returned by a successful `dma_map_pages` for a [`PeerDevice`], which NVIDIA
/// records in its `pci_dev` (so the registration keeps no copy: 8 bytes of its 88). It is live
/// until it is unmapped, its pin is put, or the pin's free callback returns; whoever holds the
/// value must stop using it before then (the context's state machine does: see `context`). The
/// peer is valid while the core holds the mapping's umem; we unmap only in the core's calls for
/// it.
pub(crate) struct DmaMapping {
    mapping: NonNull<ffi::nvidia_p2p_dma_mapping>,
}

// SAFETY: an NVIDIA handle, usable from any thread.
unsafe impl Send for DmaMapping {}

impl DmaMapping {
    /// Checks the mapping's version and returns its DMA addresses (one per 64 KiB page), for
    /// as long as the mapping is borrowed.
    ///
    /// # Safety
    ///
    /// The mapping is live (not unmapped, its pin neither put nor revoked) while the result is
    /// used.
    pub(crate) unsafe fn addresses(&self) -> Result<&[u64]> {
        let m = self.mapping.as_ptr();
        // SAFETY: live mapping (caller).
        let (version, page_size, entries, addrs) =
            unsafe { ((*m).version, (*m).page_size_type, (*m).entries, (*m).dma_addresses) };
        let want = ffi::NVIDIA_P2P_DMA_MAPPING_VERSION;
        if version >> 16 != want >> 16 || (version & 0xffff) < (want & 0xffff) {
            nv_err!("incompatible NVIDIA DMA mapping version {:#010x} (want {:#010x})\n", version, want);
            return Err(EINVAL);
        }
        if page_size != ffi::nvidia_p2p_page_size_type_NVIDIA_P2P_PAGE_SIZE_64KB {
            nv_err!("NVIDIA DMA mapping has page size type {}, expected 64 KiB\n", page_size);
            return Err(EINVAL);
        }
        if addrs.is_null() {
            nv_err!("NVIDIA DMA mapping of {} pages has no address array\n", entries);
            return Err(EINVAL);
        }
        // SAFETY: NVIDIA allocates `entries` addresses, alive as long as the mapping, which the
        // caller keeps live while `self` is borrowed.
        Ok(unsafe { core::slice::from_raw_parts(addrs, entries as usize) })
    }
}

impl DmaMapping {
    /// Writes the name of the PCI device the mapping was made for (the NIC: NVIDIA keeps the
    /// peer it was given in `pci_dev`) into `buf`, NUL-terminated; leaves `buf` as it is when
    /// there is none.
    ///
    /// # Safety
    ///
    /// The mapping is live for the duration of the call.
    pub(crate) unsafe fn peer_name(&self, buf: &mut [kernel::ffi::c_char]) {
        // SAFETY: live mapping (caller); `pci_dev` exists in every mapping version we accept.
        let pdev = unsafe { (*self.mapping.as_ptr()).pci_dev };
        let Ok(len) = u32::try_from(buf.len()) else { return };
        if !pdev.is_null() {
            // SAFETY: NVIDIA's peer of a live mapping: the core's live DMA device, which it
            // holds while the mapping exists; `buf` is writable for `len` bytes.
            unsafe { ffi::nvpeer_glue_pci_name(pdev, buf.as_mut_ptr(), len) };
        }
    }
}

/// NVIDIA's UUID of the GPU a live page table's pages are on (`gpu_uuid`, 16 bytes); `None`
/// when the table has none.
///
/// # Safety
///
/// `table` is live for the duration of the call.
pub(crate) unsafe fn gpu_uuid(table: NonNull<ffi::nvidia_p2p_page_table>) -> Option<[u8; 16]> {
    // SAFETY: live table (caller); `gpu_uuid` exists in every table version.
    let uuid = unsafe { (*table.as_ptr()).gpu_uuid };
    if uuid.is_null() {
        return None;
    }
    // SAFETY: NVIDIA's UUID of a live table: NVIDIA_P2P_GPU_UUID_LEN (16) bytes it owns as long
    // as the table.
    Some(unsafe { uuid.cast::<[u8; 16]>().read_unaligned() })
}
const _: () = assert!(ffi::NVIDIA_P2P_GPU_UUID_LEN == 16);

/// What `dma_map` needs to know of a live page table (CONTRACT 2.3, 5.7).
#[derive(Clone, Copy, Debug)]
pub(crate) struct TableInfo {
    pub(crate) version: u32,
    pub(crate) entries: u32,
    pub(crate) cpu_cacheable: bool,
}

/// Reads and checks the header of a live page table: version 1.x (minor >= 2) or 2.x, 64 KiB
/// pages; `flags` is read only on 2.x tables (1.x tables end before it).
///
/// # Safety
///
/// `table` is live for the duration of the call.
pub(crate) unsafe fn table_info(table: NonNull<ffi::nvidia_p2p_page_table>) -> Result<TableInfo> {
    let t = table.as_ptr();
    // SAFETY: live table (caller); `version`, `page_size` and `entries` exist in every version.
    let (version, page_size, entries) = unsafe { ((*t).version, (*t).page_size, (*t).entries) };
    let major = version >> 16;
    let minor = version & 0xffff;
    let flags = match major {
        1 if minor >= 2 => 0,
        // SAFETY: 2.x tables carry `flags` (580.65.06+).
        2 => unsafe { (*t).flags },
        _ => {
            nv_err!("unsupported NVIDIA page table version {:#010x} (want 1.2+ or 2.x)\n", version);
            return Err(EINVAL);
        }
    };
    if page_size != ffi::nvidia_p2p_page_size_type_NVIDIA_P2P_PAGE_SIZE_64KB {
        nv_err!("NVIDIA page table has page size type {}, expected 64 KiB\n", page_size);
        return Err(EINVAL);
    }
    Ok(TableInfo {
        version,
        entries,
        cpu_cacheable: flags & ffi::NVIDIA_P2P_PAGE_TABLE_FLAGS_CPU_CACHEABLE != 0,
    })
}
