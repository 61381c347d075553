// SPDX-License-Identifier: GPL-2.0

//! The peer-memory clients registered with the IB core and their seven callbacks: `extern "C"`
//! glue only, delegating to [`RegContext`]. Return conventions follow CONTRACT 1.6: `acquire`
//! answers 1 or 0 (never an errno: 4.x cores forbid it), the others 0 or -errno, `dma_unmap`
//! always 0.

use core::ffi::c_void;
use core::ptr;

use kernel::bindings;
use kernel::error::from_result;
use kernel::ffi::{c_char, c_int, c_ulong};
use kernel::prelude::*;
use kernel::sync::Arc;
use kernel::types::Opaque;

use crate::atomic::{Acquire, Atomic, Relaxed, Release};
use crate::compat;
use crate::context::RegContext;
use crate::ffi;
use crate::p2p::GPU_PAGE_SIZE;
use crate::sg::Layout;
use crate::stats::{self, Op, Stat};

/// Whether a client's registrations can be revoked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ClientKind {
    /// Registered with an invalidate callback; pins with NVIDIA's free callback. The core
    /// offers it user MRs only.
    Invalidating,
    /// Registered without one; pins persistently. Offered every umem (CQ, QP, DEVX: needed by
    /// IBGDA/GDAKI/NVSHMEM).
    Persistent,
}

/// The ABI form of the client struct handed to the core (CONTRACT 1.3, 1.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Form {
    /// `peer_memory_client_ex` with `PEER_MEM_INVALIDATE_UNMAPS` (MOFED >= 5.1 with it).
    ExUnmaps,
    /// `peer_memory_client_legacy` with both private-data callbacks NULL: what 4.1-5.0 cores
    /// read (they skip a client whose `get_context_private_data` is set); 5.x cores read its
    /// first 136 bytes and find no `_ex` marker.
    Legacy,
}

/// One client slot: its struct (which the core keeps a pointer to until unregistration), the
/// invalidate function the core hands back, and the registration's state.
///
/// Ordering: `register` claims the slot, writes `raw`, registers and publishes `handle`;
/// `open` sets `accepting`, once every client of the module is registered (REVIEW-KMOD-2 T3-4);
/// `Registration::drop` clears `accepting`, unregisters, then clears `handle` and the claim. So
/// `handle` is valid whenever a context of this slot exists: every context is created by an
/// `acquire` that saw `accepting`, and the core's unregister returns only after every umem it
/// acquired was released (MOFED 25.10 `peer_mem.c`).
pub(crate) struct ClientSlot {
    kind: ClientKind,
    /// A `peer_memory_client_ex` or, same size, a `peer_memory_client_legacy`.
    raw: Opaque<ffi::peer_memory_client_ex>,
    invalidate: Opaque<ffi::invalidate_peer_memory>,
    /// Owned by one `Registration` at a time (its `register` to its `drop`).
    claimed: Atomic<bool>,
    /// New registrations are taken: cleared before unregistering, so a module being removed
    /// declines what the core still offers it.
    accepting: Atomic<bool>,
    /// The core's handle: non-null from registration until unregistration returned.
    handle: Atomic<*mut c_void>,
}

// SAFETY: `raw` is written only by the `Registration` that claimed the slot (`claimed`, an
// atomic compare-exchange), before the core is given it, and read by the core afterwards;
// `invalidate` is written by the core inside `ib_register_peer_memory_client` and only read
// after `handle` is published with Release ordering and read with Acquire; the rest is atomic.
unsafe impl Sync for ClientSlot {}

static INVALIDATING: ClientSlot = ClientSlot::new(ClientKind::Invalidating);
static PERSISTENT: ClientSlot = ClientSlot::new(ClientKind::Persistent);

// The two forms share the slot's storage.
const _: () = {
    use core::mem::{align_of, size_of};
    assert!(size_of::<ffi::peer_memory_client_legacy>() == size_of::<ffi::peer_memory_client_ex>());
    assert!(align_of::<ffi::peer_memory_client_legacy>() == align_of::<ffi::peer_memory_client_ex>());
};

/// `Layout::PerPage` when the core counts one page per SG entry (`core_gen`), else coalesced.
static PER_PAGE_SG: Atomic<bool> = Atomic::new(false);

pub(crate) fn set_layout(layout: Option<Layout>) {
    PER_PAGE_SG.store(matches!(layout, Some(Layout::PerPage)), Relaxed);
}

impl ClientSlot {
    const fn new(kind: ClientKind) -> Self {
        Self {
            kind,
            // SAFETY: both are C structs of integers, pointers and `Option<fn>`s: all-zero is
            // valid (no callback, no name). (`Opaque::zeroed` is not in 6.12.)
            raw: Opaque::new(unsafe { core::mem::zeroed() }),
            // SAFETY: as above.
            invalidate: Opaque::new(unsafe { core::mem::zeroed() }),
            claimed: Atomic::new(false),
            accepting: Atomic::new(false),
            handle: Atomic::new(ptr::null_mut()),
        }
    }

    pub(crate) fn slot(kind: ClientKind) -> &'static ClientSlot {
        match kind {
            ClientKind::Invalidating => &INVALIDATING,
            ClientKind::Persistent => &PERSISTENT,
        }
    }

    pub(crate) fn kind(&self) -> ClientKind {
        self.kind
    }

    /// The client's name as registered, NUL-terminated, in the slot's static struct: written
    /// by `register` before the slot accepts registrations, unchanged afterwards.
    pub(crate) fn c_name(&self) -> *const c_char {
        // SAFETY: only a field's address is taken, within the static slot's struct.
        unsafe { ptr::addr_of!((*self.raw.get()).client.name) }.cast()
    }

    /// Whether `acquire` may take a new registration.
    fn accepting(&self) -> bool {
        self.accepting.load(Acquire)
    }

    /// Tells the core to stop the NIC's use of a registration (from NVIDIA's free callback).
    pub(crate) fn invalidate(&self, core_context: u64) {
        let handle = self.handle.load(Acquire);
        // SAFETY: written by the core during registration, published by `handle` (Acquire).
        let func = unsafe { *self.invalidate.get() };
        match func {
            Some(f) if !handle.is_null() => {
                // The handle is live: unregistration cannot have run, since the calling context
                // (held by its pin's member list, which the free callback took) holds a module
                // reference, and no registration exists before every client is registered and
                // opened (`NvPeer::init`). The umem may be released already; the core answers 0
                // for an id it no longer knows.
                // SAFETY: the core's own invalidate function with its live, non-null handle
                // (above); it may sleep, which our caller (NVIDIA's free path) allows.
                let _ = unsafe { f(handle, core_context) };
            }
            _ => {
                stats::failure(Op::FreeCallback, EINVAL);
                crate::log::nv_err!("cannot invalidate: the core gave no invalidate callback\n");
            }
        }
    }
}

/// A registered client; unregisters on drop. The core's unregister waits for every umem of the
/// client to be released; it cannot wait for long here, since each context holds a module
/// reference (`acquire` takes it with `try_module_get`, which fails once rmmod began), so rmmod
/// only gets here when no context exists or while an `acquire` is being declined.
pub(crate) struct Registration {
    slot: &'static ClientSlot,
    core: ffi::nvpeer_core_api,
    name: &'static str,
}

fn c_array<const N: usize>(s: &str) -> [c_char; N] {
    let mut a = [0; N];
    for (d, b) in a.iter_mut().zip(s.bytes().take(N - 1)) {
        *d = b;
    }
    a
}

impl Registration {
    /// Registers `kind` under `name` in the given ABI form; -EBUSY when that slot is registered
    /// already.
    pub(crate) fn register(
        core: ffi::nvpeer_core_api,
        kind: ClientKind,
        name: &'static str,
        version: &str,
        form: Form,
    ) -> Result<Self> {
        const VER_MAX: usize = ffi::IB_PEER_MEMORY_VER_MAX as usize;
        // The byte after the NUL is the _ex marker: the string may hold VER_MAX - 2 characters.
        if version.len() > VER_MAX - 2 || name.len() >= ffi::IB_PEER_MEMORY_NAME_MAX as usize {
            pr_err!("client name {} or version {} too long for the peer-memory ABI\n", name, version);
            return Err(EINVAL);
        }
        let register = core.register_client.ok_or(ENODEV)?;
        let slot = ClientSlot::slot(kind);
        if slot.claimed.cmpxchg(false, true, Acquire).is_err() {
            pr_err!("peer-memory client {} ({:?}) is registered already\n", name, kind);
            return Err(EBUSY);
        }
        let mut client = ffi::peer_memory_client {
            name: c_array(name),
            version: c_array(version),
            acquire: Some(match kind {
                ClientKind::Invalidating => acquire_invalidating,
                ClientKind::Persistent => acquire_persistent,
            }),
            get_pages: Some(get_pages),
            dma_map: Some(dma_map),
            dma_unmap: Some(dma_unmap),
            put_pages: Some(put_pages),
            get_page_size: Some(get_page_size),
            release: Some(release),
        };
        match form {
            Form::ExUnmaps => {
                client.version[VER_MAX - 1] = 1;
                let ex = ffi::peer_memory_client_ex {
                    client,
                    ex_size: core::mem::size_of::<ffi::peer_memory_client_ex>(),
                    flags: ffi::PEER_MEM_INVALIDATE_UNMAPS,
                };
                // SAFETY: we hold the slot's claim and the core is not given the struct yet:
                // nobody else reads or writes it.
                unsafe { slot.raw.get().write(ex) };
            }
            Form::Legacy => {
                let legacy = ffi::peer_memory_client_legacy {
                    client,
                    get_context_private_data: None,
                    put_context_private_data: None,
                };
                // SAFETY: as above; the legacy struct has the slot's size and alignment (const
                // assertion above).
                unsafe { slot.raw.get().cast::<ffi::peer_memory_client_legacy>().write(legacy) };
            }
        }
        let invalidate_out = match kind {
            ClientKind::Invalidating => slot.invalidate.get(),
            ClientKind::Persistent => ptr::null_mut(),
        };
        // SAFETY: `raw` is a static the core may keep a pointer to until we unregister;
        // `invalidate_out` is a static cell or NULL.
        let handle = unsafe { register(slot.raw.get().cast(), invalidate_out) };
        if handle.is_null() {
            slot.claimed.store(false, Release);
            pr_err!(
                "the IB core refused peer-memory client {}: a client of that name is already registered (NVIDIA's nvidia-peermem or Mellanox's nv_peer_mem loaded? rmmod it) or the core rejected the client; see the core's message above\n",
                name
            );
            return Err(EINVAL);
        }
        if kind == ClientKind::Invalidating
            // SAFETY: written by the core inside the call above, which returned.
            && unsafe { (*slot.invalidate.get()).is_none() }
        {
            pr_warn!("the IB core gave {} no invalidate callback: freed GPU memory cannot be revoked\n", name);
        }
        slot.handle.store(handle, Release);
        Ok(Self { slot, core, name })
    }

    /// Lets `acquire` take registrations: called once every client of the module is registered,
    /// so that a later registration's failure, which unregisters the ones before it and fails
    /// the load, never has to wait for a registration taken meanwhile (the core's unregister
    /// waits for every umem of the client: `modprobe` would hang until the application
    /// deregistered) nor leaves a pin behind the module that the failed init frees.
    pub(crate) fn open(&self) {
        self.slot.accepting.store(true, Release);
    }

    pub(crate) fn name(&self) -> &'static str {
        self.name
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        // First: an acquire the core is about to call declines from now on (REVIEW-KMOD C1).
        self.slot.accepting.store(false, Release);
        let handle = self.slot.handle.load(Acquire);
        if let Some(unregister) = self.core.unregister_client {
            // SAFETY: the handle from a successful registration, unregistered once. After it
            // returns the core calls no op of ours again and every umem is released.
            unsafe { unregister(handle) };
        }
        // Only now: a free callback of a context the core still held needed the handle.
        self.slot.handle.store(ptr::null_mut(), Release);
        self.slot.claimed.store(false, Release);
    }
}

/// Borrows the context the core holds for us.
///
/// # Safety
///
/// `client_context` came from `acquire` and `release` has not been called for it.
unsafe fn context<'a>(client_context: *mut c_void) -> kernel::sync::ArcBorrow<'a, RegContext> {
    // SAFETY: guaranteed by the caller.
    unsafe { compat::arc_borrow(client_context) }
}

fn acquire_common(
    kind: ClientKind,
    addr: c_ulong,
    size: usize,
    client_context: *mut *mut c_void,
) -> c_int {
    let slot = ClientSlot::slot(kind);
    if !slot.accepting() || client_context.is_null() {
        stats::inc(Stat::Declined);
        return 0;
    }
    match RegContext::acquire(slot, addr as u64, size as u64) {
        Some(ctx) => {
            stats::inc(Stat::Acquired);
            // SAFETY: the core's out-pointer; it gives the reference back through `release`.
            unsafe { *client_context = compat::arc_into_foreign(ctx) };
            1
        }
        None => {
            stats::inc(Stat::Declined);
            0
        }
    }
}

/// The invalidating client's `acquire`.
///
/// # Safety
///
/// Only called by the MOFED peer-memory core, with `client_context` a writable out-pointer.
unsafe extern "C" fn acquire_invalidating(
    addr: c_ulong,
    size: usize,
    _peer_mem_private_data: *mut c_void,
    _peer_mem_name: *mut c_char,
    client_context: *mut *mut c_void,
) -> c_int {
    acquire_common(ClientKind::Invalidating, addr, size, client_context)
}

/// The persistent client's `acquire`.
///
/// # Safety
///
/// Only called by the MOFED peer-memory core, with `client_context` a writable out-pointer.
unsafe extern "C" fn acquire_persistent(
    addr: c_ulong,
    size: usize,
    _peer_mem_private_data: *mut c_void,
    _peer_mem_name: *mut c_char,
    client_context: *mut *mut c_void,
) -> c_int {
    acquire_common(ClientKind::Persistent, addr, size, client_context)
}

/// Counts and returns a callback's result as the core expects it.
fn finish(op: Op, r: Result) -> c_int {
    from_result(|| {
        r.inspect_err(|&e| stats::failure(op, e))?;
        Ok(0)
    })
}

/// `get_pages`. `write` is always 1 and `force` only says the MR is read-only (CoW-break
/// semantics): GPU memory is always writable and never copy-on-write, so neither changes how it
/// is pinned.
///
/// # Safety
///
/// Only called by the MOFED peer-memory core, with a `client_context` from `acquire` that has
/// not been released.
unsafe extern "C" fn get_pages(
    addr: c_ulong,
    size: usize,
    _write: c_int,
    _force: c_int,
    _sg_head: *mut bindings::sg_table,
    client_context: *mut c_void,
    core_context: u64,
) -> c_int {
    // SAFETY: the core passes acquire's context before release.
    let ctx = unsafe { context(client_context) };
    finish(Op::GetPages, ctx.get_pages(addr as u64, size as u64, core_context))
}

/// `dma_map`.
///
/// # Safety
///
/// Only called by the MOFED peer-memory core, with a `client_context` from `acquire` that has
/// not been released, its own `sg_head` and `nmap`, and the live DMA device of its NIC for the
/// umem of that context, which it holds.
unsafe extern "C" fn dma_map(
    sg_head: *mut bindings::sg_table,
    client_context: *mut c_void,
    dma_device: *mut bindings::device,
    _dmasync: c_int,
    nmap: *mut c_int,
) -> c_int {
    if sg_head.is_null() || nmap.is_null() {
        return finish(Op::DmaMap, Err(EINVAL));
    }
    let layout = PER_PAGE_SG.load(Relaxed).then_some(Layout::PerPage);
    // SAFETY: the core passes acquire's context before release.
    let ctx = unsafe { context(client_context) };
    // SAFETY: the core's valid sg_head and nmap, its live DMA device for this umem.
    finish(Op::DmaMap, unsafe { ctx.dma_map(sg_head, dma_device, nmap, layout) })
}

/// `dma_unmap` (also called by old-style cores from inside our free callback's invalidate):
/// nothing to do. The core never touches `sg_head` afterwards and always follows with
/// `put_pages`, which unmaps in the critical section that leaves the pin (`context`), or it is
/// inside our callback, where NVIDIA frees the mapping when the callback returns. Touches
/// nothing, so it is a safe function.
extern "C" fn dma_unmap(
    _sg_head: *mut bindings::sg_table,
    _client_context: *mut c_void,
    _dma_device: *mut bindings::device,
) -> c_int {
    0
}

/// `put_pages`.
///
/// # Safety
///
/// Only called by the MOFED peer-memory core, with a `client_context` from `acquire` that has
/// not been released.
unsafe extern "C" fn put_pages(_sg_head: *mut bindings::sg_table, client_context: *mut c_void) {
    // SAFETY: the core passes acquire's context before release.
    unsafe { context(client_context) }.unpin();
}

/// `get_page_size`: the GPU page size, as NVIDIA's modules answer: 4.x and 5.1-5.4 cores build
/// their page shift from it, 5.5+ cores fix the first and last SG entry up from it (CONTRACT
/// 1.6). Touches nothing, so it is a safe function.
extern "C" fn get_page_size(_client_context: *mut c_void) -> c_ulong {
    GPU_PAGE_SIZE as c_ulong
}

/// `release`: the core gives back the reference `acquire` handed it.
///
/// # Safety
///
/// Only called by the MOFED peer-memory core, once per successful `acquire`, with its
/// `client_context`, after which the core uses that context no more.
unsafe extern "C" fn release(client_context: *mut c_void) {
    if client_context.is_null() {
        return;
    }
    // SAFETY: the reference `acquire` handed the core, given back exactly once.
    let ctx: Arc<RegContext> = unsafe { compat::arc_from_foreign(client_context) };
    ctx.release();
}
