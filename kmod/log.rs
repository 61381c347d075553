// SPDX-License-Identifier: GPL-2.0

//! Logging: every failure logs one rate-limited line with the errno and the cause; debug traces
//! go through dynamic debug (`echo 'module nvidia_peermem +p' > /proc/dynamic_debug/control`),
//! since 7.2's Rust `pr_debug!` is compiled out and has no dynamic-debug hook.

use core::fmt;

use kernel::str::CString;

use crate::{compat, ffi};

/// A rate-limited `pr_err!` (one budget for the whole module: 10 lines per 5 s). Every error on
/// a per-registration path goes through it: an application can make them at any rate.
macro_rules! nv_err {
    ($($arg:tt)*) => {
        if $crate::log::ratelimit() {
            kernel::pr_err!($($arg)*);
        }
    };
}
pub(crate) use nv_err;

/// A rate-limited `pr_warn!`, sharing `nv_err!`'s budget.
macro_rules! nv_warn {
    ($($arg:tt)*) => {
        if $crate::log::ratelimit() {
            kernel::pr_warn!($($arg)*);
        }
    };
}
pub(crate) use nv_warn;

/// Whether a rate-limited line may be printed now.
pub(crate) fn ratelimit() -> bool {
    // SAFETY: no preconditions: `__ratelimit` on a static state of the C glue, callable from
    // any context that may print.
    unsafe { ffi::nvpeer_glue_ratelimit() }
}

/// A debug trace, printed only when dynamic debug enables it for this module.
macro_rules! nv_dbg {
    ($($arg:tt)*) => {
        if $crate::log::debug_enabled() {
            $crate::log::debug(core::format_args!($($arg)*));
        }
    };
}
pub(crate) use nv_dbg;

pub(crate) fn debug_enabled() -> bool {
    // SAFETY: no preconditions: reads the glue's static dynamic-debug descriptor.
    unsafe { ffi::nvpeer_glue_debug_enabled() }
}

pub(crate) fn debug(args: fmt::Arguments<'_>) {
    if let Ok(msg) = CString::try_from_fmt(args) {
        // SAFETY: `msg` is a NUL-terminated string that outlives the call.
        unsafe { ffi::nvpeer_glue_debug(compat::char_ptr(&msg).cast()) };
    }
}
