// SPDX-License-Identifier: GPL-2.0

//! `Opaque` (memory that C may change behind Rust's back) and `ForeignOwnable` (a Rust owner
//! handed to C as a `void *`).

use core::cell::UnsafeCell;
use core::marker::PhantomPinned;
use core::mem::MaybeUninit;

use crate::ffi::c_void;

/// A `T` that C code reads and writes: never assumed initialised or unchanged by Rust.
#[repr(transparent)]
pub struct Opaque<T> {
    value: UnsafeCell<MaybeUninit<T>>,
    _pin: PhantomPinned,
}

impl<T> Opaque<T> {
    /// Holds `value`.
    pub const fn new(value: T) -> Self {
        Self { value: UnsafeCell::new(MaybeUninit::new(value)), _pin: PhantomPinned }
    }

    /// Holds nothing yet: C initialises it.
    pub const fn uninit() -> Self {
        Self { value: UnsafeCell::new(MaybeUninit::uninit()), _pin: PhantomPinned }
    }

    /// The pointer C uses.
    pub const fn get(&self) -> *mut T {
        UnsafeCell::get(&self.value).cast()
    }

    /// The pointer C uses, from a pointer to the `Opaque`.
    pub const fn raw_get(this: *const Self) -> *mut T {
        UnsafeCell::raw_get(this.cast::<UnsafeCell<MaybeUninit<T>>>()).cast()
    }
}

/// A type whose ownership can be handed to C as a `void *` and taken back.
///
/// # Safety
///
/// `into_foreign` returns a non-NULL pointer that `borrow` and `from_foreign` accept.
pub unsafe trait ForeignOwnable: Sized {
    /// What `borrow` gives.
    type Borrowed<'a>;

    /// Hands ownership to C.
    fn into_foreign(self) -> *mut c_void;

    /// Takes ownership back.
    ///
    /// # Safety
    ///
    /// `ptr` came from `into_foreign` and is taken back once; no borrow of it outlives this.
    unsafe fn from_foreign(ptr: *mut c_void) -> Self;

    /// Borrows what C holds.
    ///
    /// # Safety
    ///
    /// `ptr` came from `into_foreign` and is not taken back before the borrow ends.
    unsafe fn borrow<'a>(ptr: *mut c_void) -> Self::Borrowed<'a>;
}
