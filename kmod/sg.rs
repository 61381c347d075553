// SPDX-License-Identifier: GPL-2.0

//! The scatter-gather table handed to the IB core: one entry per run of physically contiguous
//! 64 KiB GPU pages (bounded by the NIC's maximum DMA segment size), or one per page.

use core::ptr::NonNull;

use kernel::bindings;
use kernel::error::to_result;
use kernel::prelude::*;

use crate::ffi;
use crate::p2p::GPU_PAGE_SIZE;

/// An sg_table we allocated and filled with DMA addresses. We keep our own copy of the header:
/// 5.x cores zero theirs right after `put_pages`.
///
/// # Invariants
///
/// `sgl`, `nents`, `orig_nents` are the header a successful `sg_alloc_table` set up, with
/// `nents` entries, every entry filled unless the table is still inside an [`SgAlloc`]; the
/// table is freed exactly once, by `Drop`. (The header is kept field by field so that
/// `Option<SgTable>` costs no more than the header: `sgl` is never null.)
pub(crate) struct SgTable {
    sgl: NonNull<bindings::scatterlist>,
    nents: u32,
    orig_nents: u32,
}

// SAFETY: the table is owned exclusively by this value; its memory is not tied to a thread.
unsafe impl Send for SgTable {}

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

    /// Whether `len` bytes of GPU pages can take one entry: a single page, or a range within one
    /// DMA segment (one entry when NVIDIA maps it contiguously).
    pub(crate) fn may_fit_one(self, len: u64) -> bool {
        match self {
            Layout::PerPage => len <= GPU_PAGE_SIZE,
            Layout::Coalesced { max_segment } => len <= max_segment,
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

/// An sg_table allocated for a number of entries and not filled yet: the allocation and the
/// filling are apart so that a caller can allocate without holding the lock its addresses need.
/// Dropped unfilled, the table is freed by the `SgTable` inside.
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
        // INVARIANT: the header sg_alloc_table set up, `count` entries, inside an `SgAlloc`
        // until filled.
        Ok(Self(SgTable { sgl, nents: table.nents, orig_nents: table.orig_nents }))
    }

    /// Fills the table with `addrs` under `layout`, which must take exactly its entries
    /// (-EINVAL otherwise: the table is freed).
    pub(crate) fn fill(self, addrs: &[u64], layout: Layout) -> Result<SgTable> {
        if Self::entries(addrs, layout) != self.0.nents {
            return Err(EINVAL);
        }
        let mut sg = self.0.sgl.as_ptr();
        for_each_run(addrs, layout, |start, len| {
            // SAFETY: `sg` walks the `nents` entries allocated (sg_next follows chains), as many
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
        table.orig_nents = self.orig_nents;
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
        let mut table = self.header();
        // SAFETY: by the invariant, the header of a table sg_alloc_table set up, not freed before.
        unsafe { bindings::sg_free_table(&mut table) };
    }
}
