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
use kernel::sync::atomic::{Acquire, Atomic, Relaxed, Release};
use kernel::sync::Arc;
use kernel::types::{ForeignOwnable, Opaque};

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
    /// The common 136 bytes followed by 16 zero bytes: read as a zero legacy tail by 4.x cores
    /// (which skip clients whose `get_context_private_data` is set) and ignored by 5.x.
    Plain,
}

/// One client slot: its struct (which the core keeps a pointer to until unregistration), the
/// invalidate function the core hands back, and the registration handle.
pub(crate) struct ClientSlot {
    kind: ClientKind,
    raw: Opaque<ffi::peer_memory_client_ex>,
    invalidate: Opaque<ffi::invalidate_peer_memory>,
    /// Non-null once registered: until then `acquire` declines, so no context can need it.
    handle: Atomic<*mut c_void>,
}

// SAFETY: `raw` is written only by `register` before the core sees it (module init is single
// threaded) and read by the core afterwards; `invalidate` is written by the core inside
// `ib_register_peer_memory_client` and only read after `handle` is published with Release
// ordering and read with Acquire; `handle` is atomic.
unsafe impl Sync for ClientSlot {}

static INVALIDATING: ClientSlot = ClientSlot::new(ClientKind::Invalidating);
static PERSISTENT: ClientSlot = ClientSlot::new(ClientKind::Persistent);

/// `Layout::PerPage` when the core is a legacy 4.x one (it accounts `nmap * page_size` bytes,
/// i.e. it assumes one page per SG entry), else coalesced entries.
static PER_PAGE_SG: Atomic<bool> = Atomic::new(false);

pub(crate) fn set_per_page_sg(per_page: bool) {
    PER_PAGE_SG.store(per_page, Relaxed);
}

impl ClientSlot {
    const fn new(kind: ClientKind) -> Self {
        Self {
            kind,
            raw: Opaque::zeroed(),
            invalidate: Opaque::zeroed(),
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

    fn handle(&self) -> *mut c_void {
        self.handle.load(Acquire)
    }

    /// Tells the core to stop the NIC's use of a registration (from NVIDIA's free callback).
    pub(crate) fn invalidate(&self, core_context: u64) {
        let handle = self.handle();
        // SAFETY: written by the core during registration, published by `handle` (Acquire).
        let func = unsafe { *self.invalidate.get() };
        match func {
            // SAFETY: the core's own invalidate function and handle; it may sleep, which our
            // caller (NVIDIA's free path) allows.
            Some(f) if !handle.is_null() => {
                let _ = unsafe { f(handle, core_context) };
            }
            _ => {
                stats::failure(Op::FreeCallback, EINVAL);
                crate::log::nv_err!("cannot invalidate: the core gave no invalidate callback\n");
            }
        }
    }
}

/// A registered client; unregisters on drop (the core then waits for every umem to go, which
/// cannot block here: each context holds a module reference, so rmmod is refused before).
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
    /// Registers `kind` under `name` in the given ABI form.
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
        let slot = ClientSlot::slot(kind);
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
        let (ex_size, flags) = match form {
            Form::ExUnmaps => {
                client.version[VER_MAX - 1] = 1;
                (
                    core::mem::size_of::<ffi::peer_memory_client_ex>(),
                    ffi::PEER_MEM_INVALIDATE_UNMAPS,
                )
            }
            Form::Plain => (0, 0),
        };
        // SAFETY: the slot is not registered (module init, single threaded): nobody reads it.
        unsafe { slot.raw.get().write(ffi::peer_memory_client_ex { client, ex_size, flags }) };
        let register = core.register_client.ok_or(ENODEV)?;
        let invalidate_out = match kind {
            ClientKind::Invalidating => slot.invalidate.get(),
            ClientKind::Persistent => ptr::null_mut(),
        };
        // SAFETY: `raw` is a static the core may keep a pointer to until we unregister;
        // `invalidate_out` is a static cell or NULL.
        let handle = unsafe { register(slot.raw.get().cast(), invalidate_out) };
        if handle.is_null() {
            pr_err!(
                "the IB core refused peer-memory client {}: a client of that name is already registered (NVIDIA's nvidia-peermem or Mellanox's nv_peer_mem loaded? rmmod it) or the core rejected the client; see the core's message above\n",
                name
            );
            return Err(EINVAL);
        }
        if kind == ClientKind::Invalidating
            // SAFETY: written by the core inside the call above.
            && unsafe { (*slot.invalidate.get()).is_none() }
        {
            pr_warn!("the IB core gave {} no invalidate callback: freed GPU memory cannot be revoked\n", name);
        }
        slot.handle.store(handle, Release);
        Ok(Self { slot, core, name })
    }

    pub(crate) fn name(&self) -> &'static str {
        self.name
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let handle = self.slot.handle.xchg(ptr::null_mut(), Relaxed);
        if let Some(unregister) = self.core.unregister_client {
            // SAFETY: the handle from a successful registration, unregistered once.
            unsafe { unregister(handle) };
        }
    }
}

/// Borrows the context the core holds for us.
///
/// # Safety
///
/// `client_context` came from `acquire` and `release` has not been called for it.
unsafe fn context<'a>(client_context: *mut c_void) -> kernel::sync::ArcBorrow<'a, RegContext> {
    // SAFETY: guaranteed by the caller.
    unsafe { <Arc<RegContext> as ForeignOwnable>::borrow(client_context) }
}

fn acquire_common(
    kind: ClientKind,
    addr: c_ulong,
    size: usize,
    client_context: *mut *mut c_void,
) -> c_int {
    let slot = ClientSlot::slot(kind);
    if slot.handle().is_null() || client_context.is_null() {
        return 0;
    }
    match RegContext::acquire(slot, addr as u64, size as u64) {
        Some(ctx) => {
            stats::inc(Stat::Acquired);
            // SAFETY: the core's out-pointer; it gives the reference back through `release`.
            unsafe { *client_context = ctx.into_foreign() };
            1
        }
        None => {
            stats::inc(Stat::Declined);
            0
        }
    }
}

unsafe extern "C" fn acquire_invalidating(
    addr: c_ulong,
    size: usize,
    _peer_mem_private_data: *mut c_void,
    _peer_mem_name: *mut c_char,
    client_context: *mut *mut c_void,
) -> c_int {
    acquire_common(ClientKind::Invalidating, addr, size, client_context)
}

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

// `write` is always 1 and `force` only says the MR is read-only (CoW-break semantics): GPU memory
// is always writable and never copy-on-write, so neither changes how it is pinned.
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
    let ctx: Arc<RegContext> = ctx.into();
    finish(Op::GetPages, ctx.get_pages(addr as u64, size as u64, core_context))
}

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
    // SAFETY: the core's valid sg_head and nmap, its live DMA device.
    finish(Op::DmaMap, unsafe { ctx.dma_map(sg_head, dma_device, nmap, layout) })
}

unsafe extern "C" fn dma_unmap(
    _sg_head: *mut bindings::sg_table,
    client_context: *mut c_void,
    _dma_device: *mut bindings::device,
) -> c_int {
    // SAFETY: the core passes acquire's context before release.
    unsafe { context(client_context) }.dma_unmap();
    0
}

unsafe extern "C" fn put_pages(_sg_head: *mut bindings::sg_table, client_context: *mut c_void) {
    // SAFETY: the core passes acquire's context before release.
    let ctx: Arc<RegContext> = unsafe { context(client_context) }.into();
    ctx.unpin();
}

unsafe extern "C" fn get_page_size(_client_context: *mut c_void) -> c_ulong {
    // The GPU page size, as NVIDIA's modules answer: 4.x and 5.1-5.4 cores build their page
    // shift from it, 5.5+ cores fix the first and last SG entry up from it (CONTRACT 1.6).
    GPU_PAGE_SIZE as c_ulong
}

unsafe extern "C" fn release(client_context: *mut c_void) {
    if client_context.is_null() {
        return;
    }
    // SAFETY: the reference `acquire` handed the core, given back exactly once.
    let ctx = unsafe { <Arc<RegContext> as ForeignOwnable>::from_foreign(client_context) };
    ctx.unpin();
}
