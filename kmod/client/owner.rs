// SPDX-License-Identifier: GPL-2.0

//! The process that owns a pin: the thread group of the task that pinned it, held as its
//! `struct pid`, since that is how NVIDIA's RM scopes pins (REVIEW-KMOD-2 T3-1, T3-7).
//!
//! RM's `nvidia_p2p_get_pages` and `nvidia_p2p_put_pages` look the VA and the page table up
//! among the RM objects of the *calling* process (`RmP2PGetInfoWithoutToken`, keyed by
//! `current->tgid`): a `put_pages` from another process finds nothing and answers 0, freeing
//! nothing, and NVIDIA keeps the pin and calls its free callback later. So a pin's owner is
//! recorded (and pins are shared only within it), and an unpin from any other thread group is
//! never taken for one (`pin`). Compared by thread group, not by `mm`: during exit the task's
//! `mm` is gone before its files are closed (`exit_mm` precedes `exit_files`), its thread group
//! is not, and RM still matches it.
//!
//! The pin keeps no reference of its own: the thread group's `struct pid` is the one its host
//! registration's record holds (`records`), which lives in the same object as the pin
//! (`pin::PinArc`), so its address is never another process's while the pin lives. Through it
//! a per-registration report names the process (its pid number as a reader's namespace sees
//! it, `pid_nr_ns`, and through the pid its task's `comm` and cgroup while it runs).

use core::ffi::c_void;
use core::ptr::NonNull;

use crate::ffi;

/// A thread group's `struct pid`, borrowed from a record.
///
/// # Invariants
///
/// `pid` is a thread group's `struct pid` on which the record of the registration whose object
/// holds this value (in the pin slot, dropped before the record) keeps a reference for as long
/// as the value exists.
pub(crate) struct Owner {
    pid: NonNull<c_void>,
}

// SAFETY: through `&Owner` only the address and the immutable pid number are read, from any
// thread; the reference it borrows is the record's.
unsafe impl Send for Owner {}
// SAFETY: as above.
unsafe impl Sync for Owner {}

impl Owner {
    /// The thread group whose `struct pid` is `pid`.
    ///
    /// # Safety
    ///
    /// `pid` is a thread group's `struct pid`, referenced by a record that lives at least as
    /// long as the object the value is kept in (a pin's host registration).
    pub(crate) unsafe fn borrowed(pid: NonNull<c_void>) -> Self {
        // INVARIANT: referenced by the record of the value's holder (caller).
        Self { pid }
    }

    /// Whether the calling task belongs to this thread group.
    pub(crate) fn is_current(&self) -> bool {
        // SAFETY: a referenced `struct pid` (invariant); only its address is compared.
        unsafe { ffi::nvpeer_glue_current_in_tgid(self.pid.as_ptr()) }
    }

    /// The thread group's id in the initial pid namespace, for log lines. The record's `struct pid`
    /// keeps its number, but once the thread group has exited the kernel may give that number to
    /// a new process.
    pub(crate) fn tgid(&self) -> i32 {
        // SAFETY: a referenced `struct pid` (invariant).
        unsafe { ffi::nvpeer_glue_pid_nr(self.pid.as_ptr()) }
    }

    /// The `struct pid`'s address: a pin's key, unique while the record holding it lives.
    pub(crate) fn addr(&self) -> usize {
        self.pid.as_ptr() as usize
    }

    /// The calling task's thread group's address, no reference taken (it only spreads pins
    /// over locks).
    pub(crate) fn current_addr() -> usize {
        // SAFETY: no precondition: reads the current task's thread-group pid pointer.
        (unsafe { ffi::nvpeer_glue_current_tgid() }) as usize
    }

    /// The calling task's thread group id, for log lines.
    pub(crate) fn current_tgid() -> i32 {
        // SAFETY: the current task's pid lives while it runs; no reference is kept.
        unsafe { ffi::nvpeer_glue_pid_nr(ffi::nvpeer_glue_current_tgid()) }
    }
}
