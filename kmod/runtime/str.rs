// SPDX-License-Identifier: GPL-2.0

//! NUL-terminated strings: `CStr` and `c_str!`, as the client uses them.

use core::fmt;

use crate::ffi::c_char;

/// A NUL-terminated byte string with no NUL inside.
#[repr(transparent)]
pub struct CStr([u8]);

impl CStr {
    /// The string `bytes` holds, which ends in its only NUL.
    ///
    /// # Safety
    ///
    /// `bytes` ends with a NUL byte and has no other.
    pub const unsafe fn from_bytes_with_nul_unchecked(bytes: &[u8]) -> &CStr {
        // SAFETY: `CStr` is a transparent wrapper of `[u8]`, so the pointer casts keep the
        // slice's length and provenance; the caller guarantees the NUL.
        unsafe { &*(bytes as *const [u8] as *const CStr) }
    }

    /// The string C gave us at `ptr`.
    ///
    /// # Safety
    ///
    /// `ptr` points to a NUL-terminated string that stays valid and unchanged for `'a`.
    pub unsafe fn from_char_ptr<'a>(ptr: *const c_char) -> &'a CStr {
        let mut len = 0;
        // SAFETY: every byte up to and including the NUL is readable (the caller's guarantee).
        while unsafe { *ptr.add(len) } != 0 {
            len += 1;
        }
        // SAFETY: `len + 1` readable bytes, the last one the first NUL.
        unsafe { Self::from_bytes_with_nul_unchecked(core::slice::from_raw_parts(ptr.cast(), len + 1)) }
    }

    /// The pointer C takes.
    pub const fn as_char_ptr(&self) -> *const c_char {
        self.0.as_ptr().cast()
    }

    /// The bytes without the NUL.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0[..self.0.len() - 1]
    }

    /// The text, if it is UTF-8.
    pub fn to_str(&self) -> Result<&str, core::str::Utf8Error> {
        core::str::from_utf8(self.as_bytes())
    }
}

impl fmt::Display for CStr {
    /// Printable ASCII as it is, other bytes as `\xNN` (as the kernel crate prints a `CStr`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for &c in self.as_bytes() {
            if (0x20..0x7f).contains(&c) {
                f.write_char(c as char)?;
            } else {
                write!(f, "\\x{:02x}", c)?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for CStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_char('"')?;
        fmt::Display::fmt(self, f)?;
        f.write_char('"')
    }
}

use core::fmt::Write as _;

/// A `&'static CStr` from a string literal (with no NUL inside: checked at compile time).
#[macro_export]
macro_rules! c_str {
    ($s:expr) => {{
        const S: &str = concat!($s, "\0");
        const C: &$crate::str::CStr = {
            let bytes = S.as_bytes();
            let mut i = 0;
            while i < bytes.len() - 1 {
                assert!(bytes[i] != 0, "c_str! with a NUL inside");
                i += 1;
            }
            // SAFETY: `bytes` ends in the NUL added above and has no other (checked above).
            unsafe { $crate::str::CStr::from_bytes_with_nul_unchecked(bytes) }
        };
        C
    }};
}
