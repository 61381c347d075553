// SPDX-License-Identifier: GPL-2.0

//! The scatter-gather table handed to the IB core: one entry per run of physically contiguous
//! 64 KiB GPU pages (bounded by the NIC's maximum DMA segment size), or one per page.

use core::ptr::NonNull;

use kernel::bindings;
use kernel::error::to_result;
use kernel::prelude::*;
use kernel::types::Opaque;

use crate::ffi;
use crate::p2p::GPU_PAGE_SIZE;

/// An sg_table we filled with DMA addresses: allocated, or the one entry of a registration's
/// [`SgSlot`]. We keep our own copy of the header: 5.x cores zero theirs right after
/// `put_pages`.
///
/// # Invariants
///
/// Either `in_slot` is false and `sgl`, `nents` are the header a successful `sg_alloc_table`
/// set up (whose `orig_nents` is `nents` too), freed exactly once, by `Drop`; or `in_slot` is
/// true and `sgl` is the entry of an [`SgSlot`] initialised as a one-entry table (`nents` 1),
/// which the slot's owner keeps alive and in place while the value exists and which `Drop`
/// leaves alone. Every entry is filled unless the table is still inside an [`SgAlloc`]. (The
/// header is kept field by field so that `Option<SgTable>` costs no more than the header: `sgl`
/// is never null.)
pub(crate) struct SgTable {
    sgl: NonNull<bindings::scatterlist>,
    nents: u32,
    in_slot: bool,
}

// SAFETY: the entries are used only through this value and the core's copy of its header (an
// allocated table is its own; a slot's entry nothing else uses meanwhile, `SgAlloc::in_slot`);
// neither is tied to a thread.
unsafe impl Send for SgTable {}

/// Room for a one-entry table inside a registration: a buffer NVIDIA maps contiguously within
/// one DMA segment (every size up to the segment, with coalescing; one 64 KiB page with
/// `PER_PAGE_SG`) takes one entry, which then costs no allocation in `dma_map` and no free at
/// deregistration.
pub(crate) struct SgSlot(Opaque<bindings::scatterlist>);

// SAFETY: `&SgSlot` gives no access to the entry: it is set up only by `SgAlloc::in_slot`, whose
// caller guarantees that nobody else uses it, and then used only through the `SgTable` made
// there (by its holder, or by the core it was given to). (`Send` comes with `Opaque`.)
unsafe impl Sync for SgSlot {}

impl SgSlot {
    pub(crate) const fn new() -> Self {
        Self(Opaque::uninit())
    }
}

/// How DMA addresses are grouped into entries.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Layout {
    /// One 64 KiB entry per GPU page (what the legacy 4.x cores assume).
    PerPage,
    /// Contiguous pages merged, each entry at most `max_segment` bytes (a multiple of 64 KiB).
    Coalesced { max_segment: u64 },
}

impl Layout {
    /// Merging bounded by what `dma_device` accepts as one DMA segment.
    ///
    /// # Safety
    ///
    /// `dma_device` is a live device.
    pub(crate) unsafe fn coalesced_for(dma_device: *mut bindings::device) -> Self {
        // SAFETY: `dma_device` is live (caller).
        let max = u64::from(unsafe { ffi::nvpeer_glue_dma_max_seg_size(dma_device.cast()) });
        Layout::Coalesced {
            max_segment: (max / GPU_PAGE_SIZE).max(1) * GPU_PAGE_SIZE,
        }
    }
}

/// Calls `f(start, len)` for each entry `addrs` produce under `layout`.
fn for_each_run(addrs: &[u64], layout: Layout, mut f: impl FnMut(u64, u64)) {
    let max = match layout {
        Layout::PerPage => GPU_PAGE_SIZE,
        Layout::Coalesced { max_segment } => max_segment,
    };
    let mut run: Option<(u64, u64)> = None;
    for &addr in addrs {
        run = match run {
            Some((start, len))
                if start.checked_add(len) == Some(addr) && len + GPU_PAGE_SIZE <= max =>
            {
                Some((start, len + GPU_PAGE_SIZE))
            }
            Some((start, len)) => {
                f(start, len);
                Some((addr, GPU_PAGE_SIZE))
            }
            None => Some((addr, GPU_PAGE_SIZE)),
        };
    }
    if let Some((start, len)) = run {
        f(start, len);
    }
}

/// An sg_table set up for a number of entries (allocated, or in a slot) and not filled yet: the
/// allocation and the filling are apart so that a caller can allocate without holding the lock
/// its addresses need. Dropped unfilled, the table goes as the `SgTable` inside goes.
pub(crate) struct SgAlloc(SgTable);

impl SgAlloc {
    /// The number of entries `addrs` (one DMA address per 64 KiB page) take under `layout`.
    pub(crate) fn entries(addrs: &[u64], layout: Layout) -> u32 {
        let mut count = 0u32;
        for_each_run(addrs, layout, |_, _| count += 1);
        count
    }

    /// A table of `count` entries (-EINVAL for none).
    pub(crate) fn new(count: u32) -> Result<Self> {
        if count == 0 {
            return Err(EINVAL);
        }
        let mut table = bindings::sg_table::default();
        // SAFETY: `table` is a zeroed header; sg_alloc_table initialises it or fails cleanly.
        to_result(unsafe { bindings::sg_alloc_table(&mut table, count, bindings::GFP_KERNEL) })?;
        let Some(sgl) = NonNull::new(table.sgl) else {
            // Not reached: a table of `count` > 0 entries has a first one.
            // SAFETY: set up by the successful sg_alloc_table above, freed once, here.
            unsafe { bindings::sg_free_table(&mut table) };
            return Err(EINVAL);
        };
        // INVARIANT: the header sg_alloc_table set up (`orig_nents` equals `nents` there),
        // `count` entries, inside an `SgAlloc` until filled.
        Ok(Self(SgTable { sgl, nents: table.nents, in_slot: false }))
    }

    /// A one-entry table in `slot`, set up afresh (no allocation).
    ///
    /// # Safety
    ///
    /// While the result exists, `slot`'s entry is used only through it (by its holder, and by the
    /// core it is given to): no earlier table in the slot is still read or written by anyone (the
    /// core's first/last-entry restore writes). `slot` stays alive and at its address until the
    /// result is dropped.
    pub(crate) unsafe fn in_slot(slot: &SgSlot) -> Self {
        // `Opaque` is `repr(transparent)`: its address is the entry's.
        let sgl = NonNull::from(&slot.0).cast::<bindings::scatterlist>();
        // SAFETY: a valid entry that nobody else uses (caller).
        unsafe { bindings::sg_init_table(sgl.as_ptr(), 1) };
        // INVARIANT: the slot's entry, a one-entry table now, kept alive and in place by the
        // caller.
        Self(SgTable { sgl, nents: 1, in_slot: true })
    }

    /// Fills the table with `addrs` under `layout`, which must take exactly its entries
    /// (-EINVAL otherwise: the table goes, freed if allocated).
    pub(crate) fn fill(self, addrs: &[u64], layout: Layout) -> Result<SgTable> {
        if Self::entries(addrs, layout) != self.0.nents {
            return Err(EINVAL);
        }
        let mut sg = self.0.sgl.as_ptr();
        for_each_run(addrs, layout, |start, len| {
            // SAFETY: `sg` walks the `nents` entries set up (sg_next follows chains), as many
            // as the runs (checked above); `len` <= the max segment size <= u32::MAX.
            unsafe {
                ffi::nvpeer_glue_sg_set_dma(sg.cast(), start, len as u32);
                sg = bindings::sg_next(sg);
            }
        });
        // INVARIANT: every entry filled.
        Ok(self.0)
    }
}

impl SgTable {
    pub(crate) fn nents(&self) -> u32 {
        self.nents
    }

    fn header(&self) -> bindings::sg_table {
        let mut table = bindings::sg_table::default();
        table.sgl = self.sgl.as_ptr();
        table.nents = self.nents;
        table.orig_nents = self.nents;
        table
    }

    /// Gives the core its copy of the header (entries stay owned by us).
    ///
    /// # Safety
    ///
    /// `sg_head` is the core's writable `struct sg_table`.
    pub(crate) unsafe fn publish(&self, sg_head: *mut bindings::sg_table) {
        // SAFETY: guaranteed by the caller.
        unsafe { sg_head.write(self.header()) };
    }
}

impl Drop for SgTable {
    fn drop(&mut self) {
        if self.in_slot {
            // Its owner's entry: nothing was allocated.
            return;
        }
        let mut table = self.header();
        // SAFETY: by the invariant, the header of a table sg_alloc_table set up, not freed before.
        unsafe { bindings::sg_free_table(&mut table) };
    }
}
