// SPDX-License-Identifier: GPL-2.0

//! A reference on this module, held by every registration and every pin: NVIDIA may call a
//! pin's free callback, and the core a registration's ops, only while the code is loaded.

use kernel::bindings;

use crate::compat;

/// # Invariants
///
/// Holds one reference taken by a successful `try_module_get`.
pub(crate) struct ModuleRef(());

impl ModuleRef {
    /// `None` once rmmod began: a module being removed takes no new registration
    /// (`__module_get` would, and leave a context the core can no longer be told to revoke:
    /// REVIEW-KMOD C1).
    pub(crate) fn try_get() -> Option<Self> {
        // SAFETY: this module's own `struct module`, valid while its code runs.
        // INVARIANT: a reference is held when it returns true.
        unsafe { bindings::try_module_get(compat::this_module()) }.then_some(Self(()))
    }
}

impl Drop for ModuleRef {
    fn drop(&mut self) {
        // The last thing a holder does before its memory is freed (the field is declared last).
        // On NVIDIA's free-callback path the thread still runs a few instructions of this module
        // after it (the kfree and the returns into NVIDIA), so a rmmod that ran to its end
        // within them would leave it in freed text (REVIEW-KMOD C5). Only NVIDIA could close
        // that, by pinning the callback's module; its own module has the same gap.
        // SAFETY: by the invariant we hold a reference.
        unsafe { bindings::module_put(compat::this_module()) };
    }
}
