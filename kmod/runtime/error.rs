// SPDX-License-Identifier: GPL-2.0

//! Kernel errors: a negative errno, as the kernel crate's `Error` (`to_result`, `from_result`,
//! the `code` constants the prelude brings in).

use core::fmt;
use core::num::NonZeroI32;

use crate::bindings;
use crate::ffi::c_int;

/// A kernel error: a negative errno in `-MAX_ERRNO..0`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Error(NonZeroI32);

/// The result of a kernel operation.
pub type Result<T = (), E = Error> = core::result::Result<T, E>;

/// The errno constants, as `Error`s.
pub mod code {
    use super::Error;
    use crate::bindings;

    macro_rules! declare_errors {
        ($($name:ident),* $(,)?) => {$(
            #[doc = concat!("`-", stringify!($name), "`")]
            pub const $name: Error = Error::from_const(bindings::$name as i32);
        )*};
    }
    declare_errors!(
        EPERM, ENOENT, EINTR, EIO, ENXIO, E2BIG, EBADF, EAGAIN, ENOMEM, EACCES, EFAULT, EBUSY,
        EEXIST, ENODEV, EINVAL, ENOSPC, ERANGE, ENOSYS, EOVERFLOW, EOPNOTSUPP, ENOTSUPP,
        ETIMEDOUT, ENOTTY, ENOEXEC, ECHILD,
    );
}

/// The names `{:?}` prints, as the kernel crate prints them.
const NAMES: &[(u32, &str)] = &[
    (bindings::EPERM, "EPERM"),
    (bindings::ENOENT, "ENOENT"),
    (bindings::EINTR, "EINTR"),
    (bindings::EIO, "EIO"),
    (bindings::ENXIO, "ENXIO"),
    (bindings::E2BIG, "E2BIG"),
    (bindings::EBADF, "EBADF"),
    (bindings::EAGAIN, "EAGAIN"),
    (bindings::ENOMEM, "ENOMEM"),
    (bindings::EACCES, "EACCES"),
    (bindings::EFAULT, "EFAULT"),
    (bindings::EBUSY, "EBUSY"),
    (bindings::EEXIST, "EEXIST"),
    (bindings::ENODEV, "ENODEV"),
    (bindings::EINVAL, "EINVAL"),
    (bindings::ENOSPC, "ENOSPC"),
    (bindings::ERANGE, "ERANGE"),
    (bindings::ENOSYS, "ENOSYS"),
    (bindings::EOVERFLOW, "EOVERFLOW"),
    (bindings::EOPNOTSUPP, "EOPNOTSUPP"),
    (bindings::ENOTSUPP, "ENOTSUPP"),
    (bindings::ETIMEDOUT, "ETIMEDOUT"),
    (bindings::ENOTTY, "ENOTTY"),
    (bindings::ENOEXEC, "ENOEXEC"),
    (bindings::ECHILD, "ECHILD"),
];

/// The largest errno (`MAX_ERRNO`).
const MAX_ERRNO: i32 = 4095;

impl Error {
    /// `-errno` of a positive errno constant (bindgen's); anything else becomes `EINVAL`, as in
    /// `from_errno`.
    const fn from_const(errno: i32) -> Self {
        match NonZeroI32::new(-errno) {
            Some(e) if errno > 0 && errno <= MAX_ERRNO => Self(e),
            _ => match NonZeroI32::new(-(bindings::EINVAL as i32)) {
                Some(e) => Self(e),
                None => Self(NonZeroI32::MIN),
            },
        }
    }

    /// The error of a negative errno; anything else (C returned garbage) becomes `EINVAL`, as
    /// in the kernel crate.
    pub fn from_errno(errno: c_int) -> Self {
        match NonZeroI32::new(errno) {
            Some(e) if (-MAX_ERRNO..0).contains(&errno) => Self(e),
            _ => code::EINVAL,
        }
    }

    /// The negative errno C expects.
    pub fn to_errno(self) -> c_int {
        self.0.get()
    }

    /// The errno's name, where it is one we know.
    pub fn name(&self) -> Option<&'static str> {
        let errno = self.0.get().unsigned_abs();
        NAMES.iter().find(|(n, _)| *n == errno).map(|(_, name)| *name)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "Error({})", self.0.get()),
        }
    }
}

impl From<crate::alloc::AllocError> for Error {
    fn from(_: crate::alloc::AllocError) -> Self {
        code::ENOMEM
    }
}

impl From<core::str::Utf8Error> for Error {
    fn from(_: core::str::Utf8Error) -> Self {
        code::EINVAL
    }
}

/// `Ok(())` for a C return of 0 or more, the error of a negative one.
pub fn to_result(err: c_int) -> Result {
    if err < 0 { Err(Error::from_errno(err)) } else { Ok(()) }
}

/// Runs `f` and turns its result into what a C callback returns: the value, or the negative
/// errno.
pub fn from_result<T, F>(f: F) -> T
where
    T: From<i16>,
    F: FnOnce() -> Result<T>,
{
    match f() {
        Ok(v) => v,
        // Every errno fits in an i16 (`MAX_ERRNO` is 4095).
        Err(e) => T::from(e.to_errno() as i16),
    }
}
