// SPDX-License-Identifier: GPL-2.0

//! Logging: every failure logs one rate-limited line with the errno and the cause; debug traces
//! go through dynamic debug (`echo 'module nvidia_peermem +p' > /proc/dynamic_debug/control`),
//! since 7.2's Rust `pr_debug!` is compiled out and has no dynamic-debug hook.
//!
//! Two rate-limit budgets (10 lines per 5 s each, REVIEW-KMOD-2 T3-16): per-registration lines,
//! which an application can cause at any rate ("freed before it was mapped", a refused pin), and
//! pin-lifetime lines, rare and each worth reading (an unpin NVIDIA refused or that was left to
//! its callback, a lost reference), which the first kind must never crowd out.

use core::fmt;

use crate::ffi;

/// A line of `$budget`, printed with `$print` (`pr_err`, `pr_warn`) when its rate limit allows.
macro_rules! nv_ratelimited {
    ($budget:ident, $print:ident, $($arg:tt)*) => {
        if $crate::log::ratelimit($crate::log::Budget::$budget) {
            kernel::$print!($($arg)*);
        }
    };
}
pub(crate) use nv_ratelimited;

/// A rate-limited `pr_err!` from the per-registration budget. Every error on a
/// per-registration path goes through it: an application can make them at any rate.
macro_rules! nv_err {
    ($($arg:tt)*) => { $crate::log::nv_ratelimited!(Registration, pr_err, $($arg)*) };
}
pub(crate) use nv_err;

/// A rate-limited `pr_warn!`, from `nv_err!`'s budget.
macro_rules! nv_warn {
    ($($arg:tt)*) => { $crate::log::nv_ratelimited!(Registration, pr_warn, $($arg)*) };
}
pub(crate) use nv_warn;

/// A rate-limited `pr_err!` from the pin-lifetime budget.
macro_rules! nv_pin_err {
    ($($arg:tt)*) => { $crate::log::nv_ratelimited!(PinLifetime, pr_err, $($arg)*) };
}
pub(crate) use nv_pin_err;

/// A rate-limited `pr_warn!` from the pin-lifetime budget.
macro_rules! nv_pin_warn {
    ($($arg:tt)*) => { $crate::log::nv_ratelimited!(PinLifetime, pr_warn, $($arg)*) };
}
pub(crate) use nv_pin_warn;

/// The rate-limit budgets (the glue's `enum nvpeer_log_budget`).
#[derive(Clone, Copy)]
#[repr(u32)]
pub(crate) enum Budget {
    Registration = ffi::nvpeer_log_budget_NVPEER_LOG_REGISTRATION,
    PinLifetime = ffi::nvpeer_log_budget_NVPEER_LOG_PIN_LIFETIME,
}

/// Whether a rate-limited line of `budget` may be printed now.
pub(crate) fn ratelimit(budget: Budget) -> bool {
    // SAFETY: no preconditions: `__ratelimit` on a static state of the C glue, callable from
    // any context that may print.
    unsafe { ffi::nvpeer_glue_ratelimit(budget as u32) }
}

/// A debug trace, printed only when dynamic debug enables it for this module. It allocates
/// nothing (a stack buffer), so it may be used under a shard lock.
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

/// A debug line's text, NUL-terminated, cut at the buffer's end.
struct LineBuf {
    buf: [u8; LineBuf::SIZE],
    len: usize,
}

impl LineBuf {
    /// Our longest debug line is about 120 bytes.
    const SIZE: usize = 192;
}

impl fmt::Write for LineBuf {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        // One byte stays for the NUL.
        let n = s.len().min(Self::SIZE - 1 - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

pub(crate) fn debug(args: fmt::Arguments<'_>) {
    let mut line = LineBuf { buf: [0; LineBuf::SIZE], len: 0 };
    // `write_str` never fails; a longer line is cut.
    let _ = fmt::write(&mut line, args);
    line.buf[line.len] = 0;
    // SAFETY: a NUL-terminated string that outlives the call.
    unsafe { ffi::nvpeer_glue_debug(line.buf.as_ptr().cast()) };
}
