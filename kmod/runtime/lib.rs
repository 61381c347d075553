// SPDX-License-Identifier: GPL-2.0

//! nvpeer's own kernel runtime: the small part of the kernel's `kernel` crate that the client
//! uses (`Arc`/`ArcBorrow`, `Mutex` and its `Guard`, `Opaque`, `ForeignOwnable`, errors, `CStr`
//! and `c_str!`, `KBox`/`KVec`, `pr_*!`, the module declaration), for kernels whose build tree
//! has no Rust support of its own (RHEL/Rocky, Debian 12, Ubuntu arm64): the crate is named
//! `kernel`, so the client's code reads the same on both foundations.
//!
//! It is compiled into the `.ko` with `core`, both built for the target kernel's code model and
//! mitigations (`kmod/runtime/rust-flags.sh` reads them from its `.config`), and linked with fat
//! LTO into one object whose only global symbols are the client's C entry points: nothing of it
//! is exported, so two modules built this way load side by side.
//!
//! Every call into the kernel goes through `helpers.c` (what C provides as inline functions or
//! macros, or exports on some kernels only: `mutex_lock` under lockdep, `kmalloc`, `refcount_t`,
//! `printk`, the scatterlist calls), so the Rust object imports no kernel symbol but the helpers'
//! and what the compiler itself calls (`memcpy`, `memset`, the return and retpoline thunks).

#![no_std]
#![feature(arbitrary_self_types, core_intrinsics)]
#![allow(internal_features)]

pub mod alloc;
pub mod bindings;
pub mod error;
pub mod ffi;
pub mod init;
pub mod module;
pub mod prelude;
pub mod print;
pub mod str;
pub mod sync;
pub mod types;

pub use module::{Module, ModuleMetadata, ThisModule};

/// Where `core`'s checks end (an index out of bounds, an arithmetic overflow under
/// `CONFIG_RUST_OVERFLOW_CHECKS`): the message, then a trap (`ud2`, `brk`) that oopses as `BUG()`
/// does, as the kernel's own Rust ends. The client itself never panics (no `unwrap`, no
/// `panic!`). A trap, not a call to a C `BUG()` helper: objtool knows a trap ends the function,
/// not which of our helpers never return.
#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    print::call_printk(print::level::EMERG, b"nvpeer\0", format_args!("{}\n", info));
    core::intrinsics::abort()
}
