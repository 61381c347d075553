// SPDX-License-Identifier: GPL-2.0

//! What differs between the kernels we build for (6.12 LTS ... 7.3), in one place.
//!
//! Each difference is decided by `kmod/scripts/probe-kernel.sh`, which looks at the tree's own `rust/`
//! (its sources where the tree has them, else its built `libkernel.rmeta` / `libmacros.so`) and
//! passes one `--cfg` per feature the tree offers:
//!
//! | cfg                       | the tree has                                   | 6.12 | 7.2 | 7.3 |
//! |---------------------------|------------------------------------------------|------|-----|-----|
//! | `nvpeer_module_authors`   | `module!`'s `authors: [..]` (not `author:`)    | no   | yes | yes |
//! | `nvpeer_this_module_meta` | `THIS_MODULE` as `ModuleMetadata::THIS_MODULE` | no   | no  | yes |
//! |                           | (not a `static` `module!` puts at crate root)  |      |     |     |
//!
//! (Seen in the test kernels of those series; kernels between them get what their tree has.)
//!
//! The module's atomics and its set-once cell are `core`'s on every kernel (`atomic`), not the
//! kernel's `Atomic` and `SetOnce` where the tree has them: see there why.
//!
//! Differences that need no cfg are bridged here too, so the rest of the module reads the same on
//! every kernel: `ForeignOwnable` hands out `*const c_void` on 6.12 and `*mut c_void` on 7.x.
//! What 6.12's bindings lack entirely (PCI) is done in C (`nvpeer_glue.c`) on every kernel.

use kernel::bindings;
use kernel::ffi::c_void;
use kernel::sync::{Arc, ArcBorrow};
use kernel::types::ForeignOwnable;

/// `module!` with the author key the tree's macro takes (`authors: [..]` on 7.x, `author:` on
/// 6.12); `$name` is a string literal.
macro_rules! nvpeer_module {
    ($type:ident, $name:tt, $author:tt, $description:tt) => {
        #[cfg(nvpeer_module_authors)]
        kernel::prelude::module! {
            type: $type,
            name: $name,
            authors: [$author],
            description: $description,
            license: "GPL",
        }
        #[cfg(not(nvpeer_module_authors))]
        kernel::prelude::module! {
            type: $type,
            name: $name,
            author: $author,
            description: $description,
            license: "GPL",
        }
    };
}
pub(crate) use nvpeer_module;

/// This module's `struct module` (C's `THIS_MODULE`).
pub(crate) fn this_module() -> *mut bindings::module {
    #[cfg(nvpeer_this_module_meta)]
    let this = &<crate::LocalModule as kernel::ModuleMetadata>::THIS_MODULE;
    #[cfg(not(nvpeer_this_module_meta))]
    let this = &crate::THIS_MODULE;
    this.as_ptr()
}

/// The NUL-terminated string C reads.
pub(crate) fn char_ptr(s: &kernel::str::CStr) -> *const kernel::ffi::c_char {
    // `as_char_ptr` is `CStr`'s own on 6.12 and the prelude's `CStrExt`'s on 7.x.
    #[allow(unused_imports)]
    use kernel::prelude::*;
    s.as_char_ptr()
}

/// Hands `arc`'s reference to C as the untyped pointer C stores.
pub(crate) fn arc_into_foreign<T: Send + Sync + 'static>(arc: Arc<T>) -> *mut c_void {
    // `as`: the trait returns `*const c_void` on 6.12 and `*mut c_void` on 7.x.
    arc.into_foreign() as *mut c_void
}

/// Borrows the `Arc` whose reference C holds at `ptr`.
///
/// # Safety
///
/// `ptr` came from [`arc_into_foreign`] for an `Arc<T>` and has not been given back with
/// [`arc_from_foreign`]; the borrow ends before it is.
pub(crate) unsafe fn arc_borrow<'a, T: Send + Sync + 'static>(ptr: *mut c_void) -> ArcBorrow<'a, T> {
    // SAFETY: guaranteed by the caller. (`*mut` coerces to the `*const` older kernels take.)
    unsafe { <Arc<T> as ForeignOwnable>::borrow(ptr) }
}

/// Takes back the reference [`arc_into_foreign`] handed C.
///
/// # Safety
///
/// `ptr` came from [`arc_into_foreign`] for an `Arc<T>` and is given back exactly once; no
/// borrow of it outlives this call.
pub(crate) unsafe fn arc_from_foreign<T: Send + Sync + 'static>(ptr: *mut c_void) -> Arc<T> {
    // SAFETY: guaranteed by the caller.
    unsafe { <Arc<T> as ForeignOwnable>::from_foreign(ptr) }
}
