// SPDX-License-Identifier: GPL-2.0

//! In-place initialisation of values that must not move once initialised (a `struct mutex`):
//! the one form of the kernel crate's pin-init the client uses, `KBox::pin_init(new_mutex!(..))`.

use crate::error::Error;

/// Initialises a `T` at its final address.
///
/// # Safety
///
/// An implementation either initialises `*slot` completely and returns `Ok`, or returns `Err`
/// leaving nothing in `*slot` that needs dropping.
pub unsafe trait PinInit<T, E = Error> {
    /// Initialises `*slot`.
    ///
    /// # Safety
    ///
    /// `slot` is valid for writes of a `T`, aligned, and the `T` is never moved after `Ok`.
    unsafe fn __pinned_init(self, slot: *mut T) -> Result<(), E>;
}
