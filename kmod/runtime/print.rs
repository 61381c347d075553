// SPDX-License-Identifier: GPL-2.0

//! `pr_*!`: a line formatted in Rust and printed by `printk` with the module's name in front, as
//! the kernel crate's macros print it. Kernels without Rust have no `%pA`, so the line is
//! formatted into a stack buffer first; a longer one is cut and ends in `...`.

use core::fmt;

use crate::bindings;

/// The log levels (`KERN_*`), NUL-terminated.
pub mod level {
    /// `KERN_EMERG`
    pub const EMERG: &[u8] = b"\x010\0";
    /// `KERN_ALERT`
    pub const ALERT: &[u8] = b"\x011\0";
    /// `KERN_CRIT`
    pub const CRIT: &[u8] = b"\x012\0";
    /// `KERN_ERR`
    pub const ERR: &[u8] = b"\x013\0";
    /// `KERN_WARNING`
    pub const WARNING: &[u8] = b"\x014\0";
    /// `KERN_NOTICE`
    pub const NOTICE: &[u8] = b"\x015\0";
    /// `KERN_INFO`
    pub const INFO: &[u8] = b"\x016\0";
}

/// A line being formatted.
struct Line {
    buf: [u8; Line::SIZE],
    len: usize,
    cut: bool,
}

impl Line {
    /// The longest line of the client is about 250 bytes.
    const SIZE: usize = 480;
}

impl fmt::Write for Line {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let n = s.len().min(Self::SIZE - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        self.cut |= n < s.len();
        Ok(())
    }
}

/// Prints `args` at `level` (one of [`level`]) as `<prefix>: <text>`; `prefix` is
/// NUL-terminated (the module's `__LOG_PREFIX`).
pub fn call_printk(level: &[u8], prefix: &[u8], args: fmt::Arguments<'_>) {
    // C reads both up to their NUL: a string without one is not printed (the macros pass
    // NUL-terminated constants; this keeps a safe function sound for any caller).
    if level.last() != Some(&0) || prefix.last() != Some(&0) {
        return;
    }
    let mut line = Line { buf: [0; Line::SIZE], len: 0, cut: false };
    // `write_str` never fails; a longer line is cut.
    let _ = fmt::write(&mut line, args);
    if line.cut {
        let end = Line::SIZE - 4;
        line.buf[end..].copy_from_slice(b"...\n");
        line.len = Line::SIZE;
    }
    // SAFETY: `level` and `prefix` end in a NUL (checked above) and outlive the call; `line.len`
    // bytes of `line.buf` are initialised and outlive the call.
    unsafe {
        bindings::nvpeer_rt_printk(level.as_ptr().cast(), prefix.as_ptr().cast(), line.buf.as_ptr().cast(), line.len)
    };
}

/// Expands a `pr_*!` call in the crate that makes it (its `__LOG_PREFIX`, which `module!` sets).
#[doc(hidden)]
#[macro_export]
macro_rules! print_macro {
    ($level:ident, $($arg:tt)*) => {
        $crate::print::call_printk($crate::print::level::$level, crate::__LOG_PREFIX, core::format_args!($($arg)*))
    };
}

/// `pr_emerg!`
#[macro_export]
macro_rules! pr_emerg { ($($arg:tt)*) => { $crate::print_macro!(EMERG, $($arg)*) }; }
/// `pr_alert!`
#[macro_export]
macro_rules! pr_alert { ($($arg:tt)*) => { $crate::print_macro!(ALERT, $($arg)*) }; }
/// `pr_crit!`
#[macro_export]
macro_rules! pr_crit { ($($arg:tt)*) => { $crate::print_macro!(CRIT, $($arg)*) }; }
/// `pr_err!`
#[macro_export]
macro_rules! pr_err { ($($arg:tt)*) => { $crate::print_macro!(ERR, $($arg)*) }; }
/// `pr_warn!`
#[macro_export]
macro_rules! pr_warn { ($($arg:tt)*) => { $crate::print_macro!(WARNING, $($arg)*) }; }
/// `pr_notice!`
#[macro_export]
macro_rules! pr_notice { ($($arg:tt)*) => { $crate::print_macro!(NOTICE, $($arg)*) }; }
/// `pr_info!`
#[macro_export]
macro_rules! pr_info { ($($arg:tt)*) => { $crate::print_macro!(INFO, $($arg)*) }; }
/// `pr_debug!`: compiled out, as the kernel crate's is (the client's debug lines go through
/// dynamic debug in its C glue).
#[macro_export]
macro_rules! pr_debug {
    ($($arg:tt)*) => {
        if false {
            let _ = core::format_args!($($arg)*);
        }
    };
}
