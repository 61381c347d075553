// SPDX-License-Identifier: GPL-2.0

//! C's types as the kernel's C code has them (LP64: x86_64 and arm64), under the names the
//! kernel crate uses (`kernel::ffi::c_int`, ...): bindgen's output refers to them by this path.
//! `c_char` is `u8`, as in the kernel crate (the kernel builds with `-funsigned-char`).

#![allow(non_camel_case_types)]

pub type c_char = u8;
pub type c_schar = i8;
pub type c_uchar = u8;
pub type c_short = i16;
pub type c_ushort = u16;
pub type c_int = i32;
pub type c_uint = u32;
pub type c_long = isize;
pub type c_ulong = usize;
pub type c_longlong = i64;
pub type c_ulonglong = u64;
pub use core::ffi::c_void;
