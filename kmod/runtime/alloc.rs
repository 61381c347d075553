// SPDX-License-Identifier: GPL-2.0

//! Kernel allocations: `KBox` and `KVec` on `kmalloc`/`krealloc`/`kfree`, with the kernel
//! crate's signatures (every allocation takes its `Flags`; failure is an `AllocError`).

use core::alloc::Layout;
use core::fmt;
use core::marker::PhantomData;
use core::mem::{self, ManuallyDrop};
use core::ops::{Deref, DerefMut};
use core::pin::Pin;
use core::ptr::{self, NonNull};

use crate::bindings;
use crate::error::Error;
use crate::init::PinInit;

/// Allocation flags (`gfp_t`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Flags(bindings::gfp_t);

impl Flags {
    /// The C value.
    pub fn as_raw(self) -> bindings::gfp_t {
        self.0
    }
}

/// The allocation flags the client uses.
pub mod flags {
    use super::Flags;
    use crate::bindings;

    /// `GFP_KERNEL`: may sleep.
    pub const GFP_KERNEL: Flags = Flags(bindings::GFP_KERNEL);
    /// `GFP_NOWAIT`: does not sleep (under a mutex the free callback waits for).
    pub const GFP_NOWAIT: Flags = Flags(bindings::GFP_NOWAIT);
}

/// An allocation failed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct AllocError;

/// `krealloc(ptr, layout)`: a new allocation when `ptr` is `None`.
///
/// kmalloc aligns to `ARCH_KMALLOC_MINALIGN` (at least 8) and a power-of-two size to itself,
/// so a layout that asks for more than 8 is rounded up to a power of two.
///
/// # Safety
///
/// `ptr`, if any, came from this function and is not used after a successful call.
unsafe fn realloc(ptr: Option<NonNull<u8>>, layout: Layout, flags: Flags) -> Result<NonNull<u8>, AllocError> {
    let mut size = layout.size().max(1);
    if layout.align() > 8 {
        size = size.max(layout.align()).checked_next_power_of_two().ok_or(AllocError)?;
    }
    // Larger than kmalloc serves: an error, not the page allocator's WARN.
    if size > bindings::KMALLOC_MAX_SIZE {
        return Err(AllocError);
    }
    let old = ptr.map_or(ptr::null_mut(), NonNull::as_ptr);
    // SAFETY: `old` is NULL or a live allocation of ours (the caller's guarantee).
    let new = unsafe { bindings::nvpeer_rt_krealloc(old.cast(), size, flags.0) };
    NonNull::new(new.cast()).ok_or(AllocError)
}

/// Frees what [`realloc`] returned.
///
/// # Safety
///
/// `ptr` came from [`realloc`] and is not used again.
unsafe fn free(ptr: NonNull<u8>) {
    // SAFETY: a live allocation of ours (the caller's guarantee).
    unsafe { bindings::nvpeer_rt_kfree(ptr.as_ptr().cast()) };
}

/// A `T` in its own kernel allocation.
///
/// # Invariants
///
/// `ptr` is a live allocation of [`realloc`] holding an initialised `T` that this box owns
/// (dangling and never freed when `T` is zero-sized).
pub struct KBox<T> {
    ptr: NonNull<T>,
    _owns: PhantomData<T>,
}

// SAFETY: a `KBox<T>` owns its `T` as a `T` itself would be owned.
unsafe impl<T: Send> Send for KBox<T> {}
// SAFETY: as above; shared access is `&T`.
unsafe impl<T: Sync> Sync for KBox<T> {}

impl<T> KBox<T> {
    fn alloc_uninit(flags: Flags) -> Result<NonNull<T>, AllocError> {
        if mem::size_of::<T>() == 0 {
            return Ok(NonNull::dangling());
        }
        // SAFETY: a new allocation.
        Ok(unsafe { realloc(None, Layout::new::<T>(), flags) }?.cast())
    }

    /// Moves `value` into a new allocation.
    pub fn new(value: T, flags: Flags) -> Result<Self, AllocError> {
        let ptr = Self::alloc_uninit(flags)?;
        // SAFETY: `ptr` is valid for writes of a `T` and suitably aligned (`realloc`).
        unsafe { ptr.as_ptr().write(value) };
        // INVARIANT: allocated by `realloc` and initialised above.
        Ok(Self { ptr, _owns: PhantomData })
    }

    /// Initialises a `T` in place in a new allocation, which then never moves.
    pub fn pin_init<I: PinInit<T>>(init: I, flags: Flags) -> Result<Pin<Self>, Error> {
        let ptr = Self::alloc_uninit(flags)?;
        // SAFETY: `ptr` is valid for writes of a `T`, aligned, and the memory is never moved
        // again (the box is pinned below); on failure the initialiser left nothing to drop.
        if let Err(e) = unsafe { init.__pinned_init(ptr.as_ptr()) } {
            if mem::size_of::<T>() != 0 {
                // SAFETY: allocated above, uninitialised, not used again.
                unsafe { free(ptr.cast()) };
            }
            return Err(e);
        }
        // INVARIANT: allocated by `realloc` and initialised by `init`.
        // SAFETY: the `T` is not moved out of the allocation while the `Pin` lives.
        Ok(unsafe { Pin::new_unchecked(Self { ptr, _owns: PhantomData }) })
    }

    /// Gives up ownership: the pointer [`KBox::from_raw`] takes back.
    pub fn into_raw(b: Self) -> *mut T {
        ManuallyDrop::new(b).ptr.as_ptr()
    }

    /// Takes back what [`KBox::into_raw`] gave.
    ///
    /// # Safety
    ///
    /// `ptr` came from [`KBox::into_raw`] and is taken back once.
    pub unsafe fn from_raw(ptr: *mut T) -> Self {
        // SAFETY: non-NULL, from `into_raw` (the caller's guarantee).
        let ptr = unsafe { NonNull::new_unchecked(ptr) };
        // INVARIANT: `into_raw` kept the allocation and its `T`.
        Self { ptr, _owns: PhantomData }
    }
}

impl<T> Deref for KBox<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: an initialised `T` this box owns (type invariant).
        unsafe { self.ptr.as_ref() }
    }
}

impl<T> DerefMut for KBox<T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes the access exclusive.
        unsafe { self.ptr.as_mut() }
    }
}

impl<T> Drop for KBox<T> {
    fn drop(&mut self) {
        // SAFETY: the box owns an initialised `T` (type invariant), dropped once here.
        unsafe { ptr::drop_in_place(self.ptr.as_ptr()) };
        if mem::size_of::<T>() != 0 {
            // SAFETY: allocated by `realloc` (type invariant), not used again.
            unsafe { free(self.ptr.cast()) };
        }
    }
}

impl<T: fmt::Debug> fmt::Debug for KBox<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// A growable array in a kernel allocation.
///
/// # Invariants
///
/// `ptr` is dangling when `cap` is 0 or `T` is zero-sized, else a live allocation of
/// [`realloc`] with room for `cap` `T`s, of which the first `len` are initialised and owned.
pub struct KVec<T> {
    ptr: NonNull<T>,
    len: usize,
    cap: usize,
    _owns: PhantomData<T>,
}

// SAFETY: a `KVec<T>` owns its `T`s.
unsafe impl<T: Send> Send for KVec<T> {}
// SAFETY: as above; shared access is `&[T]`.
unsafe impl<T: Sync> Sync for KVec<T> {}

impl<T> KVec<T> {
    /// An empty vector; allocates nothing.
    pub const fn new() -> Self {
        // INVARIANT: no capacity, dangling pointer.
        Self { ptr: NonNull::dangling(), len: 0, cap: 0, _owns: PhantomData }
    }

    /// An empty vector with room for `capacity` elements.
    pub fn with_capacity(capacity: usize, flags: Flags) -> Result<Self, AllocError> {
        let mut v = Self::new();
        v.reserve(capacity, flags)?;
        Ok(v)
    }

    /// Makes room for `additional` more elements.
    pub fn reserve(&mut self, additional: usize, flags: Flags) -> Result<(), AllocError> {
        let needed = self.len.checked_add(additional).ok_or(AllocError)?;
        if needed <= self.cap || mem::size_of::<T>() == 0 {
            return Ok(());
        }
        let cap = needed.max(self.cap.saturating_mul(2)).max(4);
        let layout = Layout::array::<T>(cap).map_err(|_| AllocError)?;
        let old = (self.cap != 0).then(|| self.ptr.cast::<u8>());
        // SAFETY: `old` is our live allocation or `None` (type invariant); on success the old
        // pointer is replaced and not used again.
        let new = unsafe { realloc(old, layout, flags) }?;
        // INVARIANT: `krealloc` kept the first `len` elements; room for `cap`.
        self.ptr = new.cast();
        self.cap = cap;
        Ok(())
    }

    /// Appends `value`; allocates only when the capacity is used up.
    pub fn push(&mut self, value: T, flags: Flags) -> Result<(), AllocError> {
        self.reserve(1, flags)?;
        // SAFETY: `len < cap` after `reserve` (or `T` is zero-sized): the slot is in bounds
        // and uninitialised.
        unsafe { self.ptr.as_ptr().add(self.len).write(value) };
        // INVARIANT: the element at `len` was initialised above.
        self.len += 1;
        Ok(())
    }

    /// Removes and returns the last element.
    pub fn pop(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        // INVARIANT: the last element is moved out below and no longer counted.
        self.len -= 1;
        // SAFETY: the element at the old `len - 1` was initialised and is read once.
        Some(unsafe { self.ptr.as_ptr().add(self.len).read() })
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The elements' capacity.
    pub fn capacity(&self) -> usize {
        self.cap
    }
}

impl<T> Default for KVec<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Deref for KVec<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `len` initialised elements at an aligned, non-NULL pointer (type invariant).
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> DerefMut for KVec<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`; `&mut self` makes the access exclusive.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> Drop for KVec<T> {
    fn drop(&mut self) {
        // SAFETY: the first `len` elements are initialised and owned (type invariant).
        unsafe { ptr::drop_in_place(ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len)) };
        if self.cap != 0 && mem::size_of::<T>() != 0 {
            // SAFETY: a live allocation of ours (type invariant), not used again.
            unsafe { free(self.ptr.cast()) };
        }
    }
}

impl<T: fmt::Debug> fmt::Debug for KVec<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// The owning iterator of a `KVec`.
///
/// # Invariants
///
/// The elements `next..len` of `vec`'s allocation are initialised and owned by the iterator;
/// `vec.len` is 0, so dropping `vec` frees only the allocation.
pub struct IntoIter<T> {
    vec: ManuallyDrop<KVec<T>>,
    next: usize,
    len: usize,
}

impl<T> IntoIterator for KVec<T> {
    type Item = T;
    type IntoIter = IntoIter<T>;
    fn into_iter(mut self) -> IntoIter<T> {
        let len = mem::replace(&mut self.len, 0);
        // INVARIANT: the elements move to the iterator's ownership; the vector keeps none.
        IntoIter { vec: ManuallyDrop::new(self), next: 0, len }
    }
}

impl<T> Iterator for IntoIter<T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        if self.next == self.len {
            return None;
        }
        // SAFETY: `next < len`: an initialised element the iterator owns, read once.
        let value = unsafe { self.vec.ptr.as_ptr().add(self.next).read() };
        self.next += 1;
        Some(value)
    }
}

impl<T> Drop for IntoIter<T> {
    fn drop(&mut self) {
        let rest = ptr::slice_from_raw_parts_mut(
            // SAFETY: `next <= len <= cap`: within (or one past) the allocation.
            unsafe { self.vec.ptr.as_ptr().add(self.next) },
            self.len - self.next,
        );
        // SAFETY: the remaining elements are initialised and owned (type invariant).
        unsafe { ptr::drop_in_place(rest) };
        // SAFETY: taken once; its `len` is 0, so only the allocation is freed.
        drop(unsafe { ManuallyDrop::take(&mut self.vec) });
    }
}
