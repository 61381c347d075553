// SPDX-License-Identifier: GPL-2.0

//! The module declaration: `module!` makes the `.modinfo` entries, `init_module` and
//! `cleanup_module` around a type implementing [`Module`], `THIS_MODULE`, and the log prefix of
//! `pr_*!`, as the kernel crate's `module!` does for a loadable module.

use crate::bindings;
use crate::error::Result;

/// A loadable module's state: made by `init`, dropped at unload.
pub trait Module: Sized + Sync + Send {
    /// Called once, when the module loads; an error fails the load.
    fn init(module: &'static ThisModule) -> Result<Self>;
}

/// The kernel crate's per-module metadata trait; nothing of the client uses it here (its
/// `THIS_MODULE` is the crate-root static), so it only names the module.
pub trait ModuleMetadata {
    /// The module's name.
    const NAME: &'static crate::str::CStr;
}

/// This module's `struct module` (C's `THIS_MODULE`).
///
/// # Invariants
///
/// The pointer is the module's own `__this_module`, which lives as long as its code.
pub struct ThisModule(*mut bindings::module);

// SAFETY: the pointer is only handed to C, which synchronises its own use of `struct module`.
unsafe impl Sync for ThisModule {}

impl ThisModule {
    /// Wraps `ptr`.
    ///
    /// # Safety
    ///
    /// `ptr` is the module's own `__this_module`.
    pub const unsafe fn from_ptr(ptr: *mut bindings::module) -> Self {
        // INVARIANT: the caller's guarantee.
        Self(ptr)
    }

    /// The pointer C takes.
    pub const fn as_ptr(&self) -> *mut bindings::module {
        self.0
    }
}

/// One `.modinfo` entry, `key=value\0`, as module-level assembly: it survives fat LTO (a
/// `#[used]` static does not, and `#[used(linker)]` makes a section `ld -r` does not merge with
/// C's `.modinfo`, so modpost would not see it). `value` has no `"` or `\\`.
#[doc(hidden)]
#[macro_export]
macro_rules! modinfo_entry {
    ($key:literal, $value:expr) => {
        core::arch::global_asm!(concat!(
            ".pushsection .modinfo,\"a\"\n.asciz \"", $key, "=", $value, "\"\n.popsection"
        ));
    };
}

/// Declares the loadable module: `type`, `name`, `authors`, `description`, `license`.
#[macro_export]
macro_rules! module {
    (
        type: $type:ty,
        name: $name:literal,
        authors: [$($author:literal),* $(,)?],
        description: $description:literal,
        license: $license:literal $(,)?
    ) => {
        /// The prefix of this module's `pr_*!` lines.
        const __LOG_PREFIX: &[u8] = concat!($name, "\0").as_bytes();

        $( $crate::modinfo_entry!("author", $author); )*
        $crate::modinfo_entry!("description", $description);
        $crate::modinfo_entry!("license", $license);

        extern "C" {
            static __this_module: $crate::bindings::module;
        }

        /// This module (C's `THIS_MODULE`).
        // SAFETY: `__this_module` is the module's own, made by modpost.
        static THIS_MODULE: $crate::ThisModule =
            unsafe { $crate::ThisModule::from_ptr(core::ptr::addr_of!(__this_module).cast_mut()) };

        /// The module's state between `init_module` and `cleanup_module`.
        static mut __NVPEER_MODULE: core::mem::MaybeUninit<$type> = core::mem::MaybeUninit::uninit();

        // The kernel calls both through `struct module`, which modpost makes later: a reference
        // of their own, as C's module_init()/module_exit() make (___ADDRESSABLE in
        // .init.data/.exit.data), keeps objtool from sealing their ENDBR under IBT.
        core::arch::global_asm!(
            ".pushsection .init.data,\"aw\"\n.balign 8\n.quad init_module\n.popsection",
            ".pushsection .exit.data,\"aw\"\n.balign 8\n.quad cleanup_module\n.popsection",
        );

        /// # Safety
        ///
        /// Called by the kernel once, when the module loads.
        #[no_mangle]
        pub unsafe extern "C" fn init_module() -> $crate::ffi::c_int {
            match <$type as $crate::Module>::init(&THIS_MODULE) {
                Ok(m) => {
                    // SAFETY: nothing else runs in the module before init returns.
                    unsafe { (*core::ptr::addr_of_mut!(__NVPEER_MODULE)).write(m) };
                    0
                }
                Err(e) => e.to_errno(),
            }
        }

        /// # Safety
        ///
        /// Called by the kernel once, at unload, after `init_module` succeeded.
        #[no_mangle]
        pub unsafe extern "C" fn cleanup_module() {
            // SAFETY: `init_module` succeeded (the kernel's guarantee), so the state is
            // initialised; it is dropped once, and nothing of the module runs after.
            unsafe { (*core::ptr::addr_of_mut!(__NVPEER_MODULE)).assume_init_drop() };
        }
    };
}
