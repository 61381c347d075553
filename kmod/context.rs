// SPDX-License-Identifier: GPL-2.0

//! The per-registration context: one per successful `acquire`, shared by the IB core (through
//! `client_context`) and by NVIDIA (through the free callback's `data`), so it is reference
//! counted (`Arc`) and driven by an explicit state machine.
//!
//! States and transitions (the callback is NVIDIA's free callback, i.e. a cudaFree):
//!
//! ```text
//!   Pinning --pinned--> Acquired --get_pages--> Pinned --dma_map--> Mapping --ok--> Mapped
//!      |                   |                    ^  |                   |             |
//!      |                   |                    |  +--put_pages/release--> Unpinning --> Unpinned
//!      |                   |                    +---------dma_unmap------------------------+
//!      +----callback-------+------callback------+-----callback--------+--> Revoked     (no NIC use yet:
//!                                                                          the core is told nothing)
//!   Mapped --callback--> Invalidating (the core's invalidate runs, lock dropped) --> Revoked
//!   Unpinning --callback--> Revoked (the callback won the race with put_pages)
//! ```
//!
//! In `Revoked` NVIDIA has freed (or is about to free, when the callback returns) the page table
//! and its DMA mappings: nothing of NVIDIA's is touched again.
//!
//! Why the callback only invalidates `Mapped` contexts: before `dma_map` returns, the core has
//! not exposed the range to the NIC, and MOFED 5.x holds the umem's `mapping_lock` around
//! get_pages/dma_map while those wait for NVIDIA's RM lock, which the callback holds: calling
//! invalidate then would deadlock (CONTRACT 1.10). Marking `Revoked` makes the pending `dma_map`
//! fail with -EFAULT instead. Likewise `put_pages` never calls NVIDIA while a callback is running
//! (state `Invalidating`): the MOFED 5.1-5.4 dereg path calls it under `mapping_lock` (the
//! 2696789 deadlock), and NVIDIA frees the pin itself when the callback returns.
//!
//! Lock order (CONTRACT 5.3): MOFED `peer_memory_mutex` -> core `mapping_lock` -> `inner`;
//! NVIDIA RM API lock -> `inner`. `inner` is the innermost lock: it is never held across a call
//! into the IB core, nor into an NVIDIA function that takes the RM lock (`dma_map_pages` and
//! `dma_unmap_pages` take none: the latter is called under `inner`, which keeps the callback from
//! completing, and so NVIDIA from freeing the table, while it runs).

use core::ffi::c_void;
use core::ptr::NonNull;

use kernel::bindings;
use kernel::prelude::*;
use kernel::sync::{new_mutex, Arc, Mutex};

use crate::client::{ClientKind, ClientSlot};
use crate::ffi;
use crate::log::{nv_dbg, nv_err};
use crate::p2p::{self, Api, GPU_PAGE_SIZE};
use crate::sg::{Layout, SgTable};
use crate::stats::{self, Op, Stat};

/// The 64 KiB-aligned GPU range covering a registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GpuRange {
    pub(crate) start: u64,
    pub(crate) len: u64,
}

impl GpuRange {
    /// `[addr, addr + size)` widened to 64 KiB pages; `None` for an empty or overflowing range.
    pub(crate) fn covering(addr: u64, size: u64) -> Option<Self> {
        if size == 0 {
            return None;
        }
        let end = addr.checked_add(size)?.checked_add(GPU_PAGE_SIZE - 1)? & !(GPU_PAGE_SIZE - 1);
        let start = addr & !(GPU_PAGE_SIZE - 1);
        Some(Self { start, len: end - start })
    }

    pub(crate) fn pages(&self) -> u64 {
        self.len / GPU_PAGE_SIZE
    }
}

/// A pin held on NVIDIA memory.
///
/// # Invariants
///
/// `table` was returned by a successful pin of the context's range and has not been unpinned.
/// It stays valid while the owning context's state holds this `GpuPin` (a revocation first moves
/// the state to `Invalidating`/`Revoked` under the context's lock, dropping the `GpuPin`).
struct GpuPin {
    table: NonNull<ffi::nvidia_p2p_page_table>,
}

/// A reference on the NIC's PCI device (the core's `dma_device`).
///
/// # Invariants
///
/// `pdev` is a valid `pci_dev` on which this value holds a reference.
struct PciDevRef {
    pdev: *mut bindings::pci_dev,
}

impl PciDevRef {
    /// The PCI device behind `dev`, or -EINVAL when it is not a PCI device.
    fn from_dma_device(dev: *mut bindings::device) -> Result<Self> {
        // SAFETY: the core hands a live device that outlives the registration.
        if dev.is_null() || !unsafe { bindings::dev_is_pci(dev) } {
            return Err(EINVAL);
        }
        // SAFETY: `dev` is embedded in a `pci_dev` (dev_is_pci above).
        let pdev = unsafe { kernel::container_of!(dev, bindings::pci_dev, dev) };
        // SAFETY: live device; the reference is dropped in `Drop`.
        unsafe { bindings::pci_dev_get(pdev) };
        // INVARIANT: reference taken above.
        Ok(Self { pdev })
    }
}

impl Drop for PciDevRef {
    fn drop(&mut self) {
        // SAFETY: by the invariant we hold a reference.
        unsafe { bindings::pci_dev_put(self.pdev) };
    }
}

/// NVIDIA's DMA mapping of a pin for one NIC.
///
/// # Invariants
///
/// `mapping` was returned by `dma_map_pages` for `peer` on the pin it sits beside in `Mapped`.
struct Mapping {
    mapping: NonNull<ffi::nvidia_p2p_dma_mapping>,
    peer: PciDevRef,
}

enum State {
    /// A pin is being taken (NVIDIA's lock may be held by a racing callback).
    Pinning,
    /// Pinned by `acquire`; kept for `get_pages` (one pin per registration).
    Acquired(GpuPin),
    /// `get_pages` done; not visible to the NIC.
    Pinned(GpuPin),
    /// `dma_map` is calling NVIDIA (lock dropped).
    Mapping(GpuPin),
    /// DMA addresses handed to the core: the NIC may use them.
    Mapped(GpuPin, Mapping),
    /// The free callback is telling the core to stop the NIC (lock dropped).
    Invalidating,
    /// NVIDIA revoked the memory: nothing of NVIDIA's may be touched.
    Revoked,
    /// `put_pages`/`release` is calling NVIDIA to unpin (lock dropped).
    Unpinning,
    /// No pin.
    Unpinned,
}

impl State {
    fn name(&self) -> &'static str {
        match self {
            State::Pinning => "pinning",
            State::Acquired(_) => "acquired",
            State::Pinned(_) => "pinned",
            State::Mapping(_) => "mapping",
            State::Mapped(..) => "mapped",
            State::Invalidating => "invalidating",
            State::Revoked => "revoked",
            State::Unpinning => "unpinning",
            State::Unpinned => "unpinned",
        }
    }
}

struct Inner {
    state: State,
    /// From `get_pages`: the core's handle for this umem, passed back to its invalidate.
    core_context: u64,
    /// The entries we handed the core: freed by the core's `dma_unmap`/`put_pages` or with the
    /// context, never by the free callback (the core may still be using them then).
    sg: Option<SgTable>,
}

// SAFETY: the raw pointers in `State` are NVIDIA handles and a device reference, usable from
// any thread; access is serialised by the `Mutex`.
unsafe impl Send for Inner {}

/// One registration.
#[pin_data(PinnedDrop)]
pub(crate) struct RegContext {
    client: &'static ClientSlot,
    range: GpuRange,
    #[pin]
    inner: Mutex<Inner>,
}

impl RegContext {
    /// `acquire`: is `[addr, addr + size)` GPU memory? Answers by pinning it and keeps the pin
    /// for `get_pages`. `None` means "not ours" (host memory, freed memory, ...).
    pub(crate) fn acquire(client: &'static ClientSlot, addr: u64, size: u64) -> Option<Arc<Self>> {
        let range = GpuRange::covering(addr, size)?;
        let ctx = Arc::pin_init(
            try_pin_init!(Self {
                client,
                range,
                inner <- new_mutex!(Inner { state: State::Pinning, core_context: 0, sg: None }),
            }? Error),
            GFP_KERNEL,
        )
        .ok()?;
        // SAFETY: the matching `module_put` is in `Drop`, after NVIDIA's last reference is gone,
        // so the module (and the callback code) outlives every context.
        unsafe { bindings::__module_get(crate::THIS_MODULE.as_ptr()) };
        stats::inc(Stat::LiveContexts);
        match ctx.pin() {
            Ok(pin) => {
                ctx.inner.lock().state = State::Acquired(pin);
                nv_dbg!(
                    "acquire {:#x}+{:#x}: GPU memory, pinned {:#x}+{:#x} ({:?})",
                    addr, size, range.start, range.len, client.kind()
                );
                Some(ctx)
            }
            Err(e) => {
                // Most often host memory or a freed VA: not a failure, just not ours.
                nv_dbg!("acquire {:#x}+{:#x}: not GPU memory ({:?})", addr, size, e);
                None
            }
        }
    }

    /// Pins the range (state `Pinning` -> returns the pin, or the state ends `Unpinned` or
    /// `Revoked`).
    fn pin(self: &Arc<Self>) -> Result<GpuPin> {
        let api = Api::get().ok_or(ENODEV)?;
        stats::inc(Stat::PinCalls);
        let result = match self.client.kind() {
            ClientKind::Persistent => {
                // SAFETY: not called from a free callback (acquire/get_pages context).
                unsafe { api.get_pages_persistent(self.range.start, self.range.len) }
            }
            ClientKind::Invalidating => {
                // NVIDIA holds this reference for the callback; it comes back through
                // `free_callback` or after `put_pages` (see `unpin`).
                let data = Arc::into_raw(self.clone()).cast_mut().cast::<c_void>();
                // SAFETY: not in a callback; `data` stays valid until the callback ran or the
                // pin is put (we hold a reference for NVIDIA).
                let r = unsafe { api.get_pages(self.range.start, self.range.len, free_callback, data) };
                if r.is_err() {
                    // No callback was registered: take NVIDIA's reference back.
                    // SAFETY: from `Arc::into_raw` above, not used by NVIDIA.
                    drop(unsafe { Arc::from_raw(data.cast::<Self>()) });
                }
                r
            }
        };
        let mut inner = self.inner.lock();
        match result {
            Ok(table) => {
                if matches!(inner.state, State::Revoked) {
                    // The memory was freed while get_pages returned: the table is gone.
                    return Err(EFAULT);
                }
                stats::add(Stat::PinnedPages, self.range.pages());
                stats::add(Stat::PinnedBytes, self.range.len);
                // INVARIANT: a successful pin, not revoked.
                Ok(GpuPin { table })
            }
            Err(e) => {
                inner.state = State::Unpinned;
                Err(e)
            }
        }
    }

    /// `get_pages`: the pin taken by `acquire` is reused when the core asks for the same range.
    pub(crate) fn get_pages(self: &Arc<Self>, addr: u64, size: u64, core_context: u64) -> Result {
        let same_range = GpuRange::covering(addr, size) == Some(self.range);
        {
            let mut inner = self.inner.lock();
            inner.core_context = core_context;
            match core::mem::replace(&mut inner.state, State::Unpinned) {
                State::Acquired(pin) if same_range => {
                    inner.state = State::Pinned(pin);
                    nv_dbg!("get_pages {:#x}: reusing acquire's pin, core_context {}", self.range.start, core_context);
                    return Ok(());
                }
                State::Revoked => {
                    inner.state = State::Revoked;
                    nv_err!("get_pages {:#x}+{:#x}: the GPU memory was freed after acquire\n", addr, size);
                    return Err(EFAULT);
                }
                other => inner.state = other,
            }
        }
        // Every core passes acquire's range again; anything else is a core bug.
        nv_err!(
            "get_pages {:#x}+{:#x} differs from the acquired range {:#x}+{:#x}\n",
            addr, size, self.range.start, self.range.len
        );
        self.unpin();
        Err(EINVAL)
    }

    /// `dma_map`: maps the pin for the NIC and hands the core an sg_table.
    ///
    /// # Safety
    ///
    /// `sg_head` and `nmap` are the core's valid pointers; `dma_device` is a live device.
    pub(crate) unsafe fn dma_map(
        &self,
        sg_head: *mut bindings::sg_table,
        dma_device: *mut bindings::device,
        nmap: *mut i32,
        layout: Option<Layout>,
    ) -> Result {
        let api = Api::get().ok_or(ENODEV)?;
        let peer = PciDevRef::from_dma_device(dma_device).inspect_err(|_| {
            nv_err!("dma_map: the DMA device is not a PCI device\n");
        })?;
        let table = {
            let mut inner = self.inner.lock();
            match core::mem::replace(&mut inner.state, State::Unpinned) {
                State::Pinned(pin) => {
                    // SAFETY: not revoked while we hold `inner`: the table is live.
                    let info = match unsafe { p2p::table_info(pin.table) } {
                        Ok(info) => info,
                        Err(e) => {
                            inner.state = State::Pinned(pin);
                            return Err(e);
                        }
                    };
                    nv_dbg!(
                        "dma_map {:#x}+{:#x}: table v{:#x}, {} pages, cpu_cacheable={}",
                        self.range.start, self.range.len, info.version, info.entries, info.cpu_cacheable
                    );
                    let table = pin.table;
                    inner.state = State::Mapping(pin);
                    table
                }
                State::Revoked => {
                    inner.state = State::Revoked;
                    nv_err!("dma_map {:#x}: the GPU memory was freed before it was mapped\n", self.range.start);
                    return Err(EFAULT);
                }
                other => {
                    nv_err!("dma_map {:#x}: called in state {}\n", self.range.start, other.name());
                    inner.state = other;
                    return Err(EINVAL);
                }
            }
        };
        // SAFETY: not in a callback; `peer` is a referenced PCI device; a concurrent revocation
        // is serialised by NVIDIA's RM lock.
        let mapped = unsafe { api.dma_map_pages(peer.pdev, table) };
        let mut inner = self.inner.lock();
        let pin = match core::mem::replace(&mut inner.state, State::Unpinned) {
            State::Mapping(pin) => pin,
            other => {
                // Revoked meanwhile: NVIDIA freed the table and any mapping on it.
                inner.state = other;
                nv_err!("dma_map {:#x}: the GPU memory was freed while being mapped\n", self.range.start);
                return Err(EFAULT);
            }
        };
        let mapping = match mapped {
            Ok(m) => Mapping { mapping: m, peer },
            Err(e) => {
                inner.state = State::Pinned(pin);
                nv_err!("dma_map {:#x}: nvidia_p2p_dma_map_pages failed: {:?}\n", self.range.start, e);
                return Err(e);
            }
        };
        // SAFETY: live mapping (not revoked, `inner` held).
        let built = unsafe { p2p::mapping_addresses(mapping.mapping) }.and_then(|addrs| {
            let layout = layout.unwrap_or_else(|| Layout::coalesced_for(dma_device));
            SgTable::build(addrs, layout)
        });
        match built {
            Ok(sg) => {
                // SAFETY: the core's pointers (caller).
                unsafe {
                    sg.publish(sg_head);
                    *nmap = sg.nents() as i32;
                }
                stats::inc(Stat::Registrations);
                stats::add(Stat::SgEntries, u64::from(sg.nents()));
                nv_dbg!(
                    "dma_map {:#x}+{:#x}: {} pages in {} sg entries",
                    self.range.start, self.range.len, self.range.pages(), sg.nents()
                );
                inner.sg = Some(sg);
                inner.state = State::Mapped(pin, mapping);
                Ok(())
            }
            Err(e) => {
                // SAFETY: table and mapping live (`inner` held, not revoked); no RM lock taken.
                let _ = unsafe { api.dma_unmap_pages(mapping.peer.pdev, pin.table, mapping.mapping) };
                inner.state = State::Pinned(pin);
                nv_err!("dma_map {:#x}: building the sg_table failed: {:?}\n", self.range.start, e);
                Err(e)
            }
        }
    }

    /// `dma_unmap` (also called by old-style cores from inside our own callback's invalidate).
    pub(crate) fn dma_unmap(&self) {
        let mut inner = self.inner.lock();
        inner.sg = None;
        match core::mem::replace(&mut inner.state, State::Unpinned) {
            State::Mapped(pin, mapping) => {
                if let Some(api) = Api::get() {
                    // SAFETY: live table and mapping (`inner` held, not revoked); takes no RM lock.
                    if let Err(e) = unsafe { api.dma_unmap_pages(mapping.peer.pdev, pin.table, mapping.mapping) } {
                        stats::failure(Op::DmaUnmap, e);
                        nv_err!("dma_unmap {:#x}: nvidia_p2p_dma_unmap_pages failed: {:?}\n", self.range.start, e);
                    }
                }
                stats::inc(Stat::Deregistrations);
                nv_dbg!("dma_unmap {:#x}", self.range.start);
                inner.state = State::Pinned(pin);
            }
            // Inside our callback's invalidate (4.x, 5.x old-style): NVIDIA frees the mapping
            // when the callback returns; it must not be touched twice.
            State::Invalidating => inner.state = State::Invalidating,
            other => inner.state = other,
        }
    }

    /// `put_pages` and the unpin part of `release`.
    pub(crate) fn unpin(self: &Arc<Self>) {
        if self.inner.lock().state_is_mapped() {
            // The core skipped dma_unmap: unmap before unpinning (put_pages frees mappings).
            self.dma_unmap();
        }
        let pin = {
            let mut inner = self.inner.lock();
            inner.sg = None;
            match core::mem::replace(&mut inner.state, State::Unpinning) {
                State::Acquired(pin) | State::Pinned(pin) => pin,
                other => {
                    // Revoked, being revoked (NVIDIA frees it) or never pinned.
                    inner.state = other;
                    return;
                }
            }
        };
        let Some(api) = Api::get() else { return };
        stats::inc(Stat::UnpinCalls);
        // Not in a callback: the core calls put_pages/release from its own context, and calls
        // made inside our callback's invalidate find the state `Invalidating` and returned above.
        let result = match self.client.kind() {
            // SAFETY: see above; the persistent pin is ours and not used afterwards.
            ClientKind::Persistent => unsafe { api.put_pages_persistent(self.range.start, pin.table) },
            // SAFETY: see above; the pin is ours and not used afterwards.
            ClientKind::Invalidating => unsafe { api.put_pages(self.range.start, pin.table) },
        };
        let mut inner = self.inner.lock();
        let callback_ran = matches!(inner.state, State::Revoked);
        inner.state = State::Unpinned;
        drop(inner);
        nv_dbg!("unpin {:#x}: {:?}, callback ran meanwhile: {}", self.range.start, result, callback_ran);
        match result {
            Ok(()) => {
                if !callback_ran {
                    stats::sub(Stat::PinnedPages, self.range.pages());
                    stats::sub(Stat::PinnedBytes, self.range.len);
                    if self.client.kind() == ClientKind::Invalidating {
                        // NVIDIA dropped the callback: give back its reference.
                        // SAFETY: the reference handed over in `pin`, not used since.
                        drop(unsafe { Arc::from_raw(Arc::as_ptr(self)) });
                    }
                }
            }
            // The callback won the race for the RM lock: NVIDIA freed the pin and the table
            // before our call reached RM, so whatever it answered there was nothing left to
            // unpin (RM answers 0; a stale table pointer may also meet another pin's table).
            // Logged by the debug line above, not a failure.
            Err(_) if callback_ran => {}
            Err(e) => {
                // The pin may still be registered with NVIDIA: keep its reference (the callback
                // will drop it when the memory is freed) rather than risk a dangling `data`.
                stats::failure(Op::PutPages, e);
                nv_err!("put_pages {:#x}: NVIDIA failed to unpin: {:?}\n", self.range.start, e);
            }
        }
    }

    /// NVIDIA's free callback: the memory is being freed (cudaFree) under its RM lock.
    fn revoke(self: &Arc<Self>) {
        let mut inner = self.inner.lock();
        // (mapped: the NIC may be using it; counted: the pin is in PinnedPages/Bytes)
        let (was_mapped, counted) = match core::mem::replace(&mut inner.state, State::Revoked) {
            State::Mapped(..) => (true, true),
            State::Acquired(_) | State::Pinned(_) | State::Mapping(_) | State::Unpinning => (false, true),
            // Fired inside get_pages: `pin` sees `Revoked` and reports the pin as failed.
            State::Pinning => (false, false),
            other => {
                // Already revoked or unpinned: nothing to do.
                inner.state = other;
                return;
            }
        };
        stats::inc(Stat::Revocations);
        if counted {
            stats::sub(Stat::PinnedPages, self.range.pages());
            stats::sub(Stat::PinnedBytes, self.range.len);
        }
        if !was_mapped {
            nv_dbg!("free callback {:#x}: not mapped yet, no invalidation needed", self.range.start);
            return;
        }
        inner.state = State::Invalidating;
        let core_context = inner.core_context;
        drop(inner);
        nv_dbg!("free callback {:#x}: invalidating core_context {}", self.range.start, core_context);
        stats::inc(Stat::InvalidateCalls);
        // Old-style cores call our dma_unmap/put_pages (and 4.x release) from inside.
        self.client.invalidate(core_context);
        // The sg_table stays: a dereg that took the core's mapping_lock before this invalidate
        // may still restore its first/last-entry fix-ups in it and call dma_unmap with it
        // (CONTRACT 1.7, items 5 and 6); it goes with dma_unmap, put_pages or the context.
        self.inner.lock().state = State::Revoked;
    }
}

impl Inner {
    fn state_is_mapped(&self) -> bool {
        matches!(self.state, State::Mapped(..))
    }
}

#[pinned_drop]
impl PinnedDrop for RegContext {
    fn drop(self: core::pin::Pin<&mut Self>) {
        stats::sub(Stat::LiveContexts, 1);
        // SAFETY: pairs with `__module_get` in `acquire`.
        unsafe { bindings::module_put(crate::THIS_MODULE.as_ptr()) };
    }
}

/// NVIDIA's free callback for non-persistent pins; `data` is the context reference from `pin`.
unsafe extern "C" fn free_callback(data: *mut c_void) {
    if data.is_null() {
        stats::failure(Op::FreeCallback, EINVAL);
        nv_err!("free callback without a context\n");
        return;
    }
    // SAFETY: `data` is the reference we handed NVIDIA in `pin`; NVIDIA calls this at most once
    // and never after a successful put_pages, so we own that reference now.
    let ctx = unsafe { Arc::from_raw(data.cast::<RegContext>()) };
    ctx.revoke();
    // Dropping NVIDIA's reference last: the context outlives everything above.
}
