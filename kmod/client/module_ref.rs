// SPDX-License-Identifier: GPL-2.0

//! A reference on this module, held by every registration's object, and so by the pin it may
//! host (`pin::PinArc`): NVIDIA may call a pin's free callback, and the core a registration's
//! ops, only while the code is loaded.
//!
//! Where the last reference may go (REVIEW-KMOD C5): a registration's in the core's own calls
//! (`release`, a declined `acquire`, or another registration's `put_pages` or `release` that
//! drops the last reference to the pin this object hosts), which the core's unregister at
//! module exit waits for; in the module's work item to which NVIDIA's free callback hands its
//! pin reference (`pin::defer_drop`), which module exit flushes; and the free
//! callback's own, taken on entry and dropped by its last instruction, a tail jump into the
//! kernel's `module_put` (`nvpeer_callback.c`), so that no instruction of the module runs after
//! the reference keeping it loaded is gone.

use crate::compat;
use crate::ffi;

/// # Invariants
///
/// Holds one reference taken by a successful `try_module_get`.
pub(crate) struct ModuleRef(());

impl ModuleRef {
    /// `None` once rmmod began: a module being removed takes no new registration
    /// (`__module_get` would, and leave a context the core can no longer be told to revoke:
    /// REVIEW-KMOD C1).
    pub(crate) fn try_get() -> Option<Self> {
        // INVARIANT: a reference is held when it returns true.
        // SAFETY: this module's own `struct module`, valid while its code runs. (Through the
        // glue: without CONFIG_MODULE_UNLOAD `try_module_get` is a static inline with no Rust
        // helper.)
        unsafe { ffi::nvpeer_glue_module_get(compat::this_module()) }.then_some(Self(()))
    }
}

impl Drop for ModuleRef {
    fn drop(&mut self) {
        // The last thing a holder does before its memory is freed (the field is declared last);
        // never in NVIDIA's free callback (see the module documentation).
        // SAFETY: by the invariant we hold a reference.
        unsafe { ffi::nvpeer_glue_module_put(compat::this_module()) };
    }
}
