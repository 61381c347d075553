// SPDX-License-Identifier: GPL-2.0

//! The module's atomics and its set-once cell: `core`'s, behind the interfaces of the kernel's
//! `Atomic` (its method names, and its orderings as types, so that an ordering an operation
//! cannot take, a `Release` load, is refused at build time as by the kernel's, not at run time by
//! `core`) and `SetOnce`.
//!
//! Why not `kernel::sync::atomic` and `SetOnce` (7.x): on a kernel built with GCC, which is every
//! distribution kernel, each of their operations is a call to an out-of-line C helper
//! (`rust_helper_atomic_ptr_read_acquire`, ...): the helpers are inlined into Rust only when
//! clang builds the kernel. A registration and its deregistration make about thirty of them
//! (the registry pointer behind every shard lock, the pin's table, the flags, the statistics,
//! NVIDIA's API behind its `SetOnce`), each a call and a return where `core`'s is one
//! instruction. On Debian's 7.2 kernel our client time per deregistration was 1.94 times NVIDIA's
//! module's with the kernel's atomics and 1.62 times with these (medians of three boots each, in
//! the benchmark's conditions: tests/BENCHMARKS.md, "core's atomics"). 6.12, whose tree has
//! neither, used these already: every kernel now runs the same code.
//!
//! This departs, for that cost alone, from the kernel's rule (`kernel::sync::atomic`: the LKMM is
//! the only model for Rust in the kernel, Rust's own atomics should be avoided) and from the
//! drivers upstream, which follow it (binder since 7.2). What keeps it sound here: every location
//! below is accessed only by this crate's Rust (the C glue reads the statistics through Rust
//! functions), so none is shared between the two models; acquire, release and relaxed mean the
//! same in `core` as in the LKMM on x86_64 and arm64 (the architectures we build and test; Kbuild
//! also knows riscv and loongarch, where the same holds by the two models' definitions but nothing
//! was compiled or run); and no user relies on the LKMM's dependency or control ordering under
//! `Relaxed` (`PER_PAGE_SG`, the statistics), nor on its full ordering of value-returning
//! read-modify-writes (`cmpxchg` and `xchg` take an explicit ordering).
//!
//! Two orderings cross the boundary between the models, as for every Rust user of a kernel lock:
//! a pin's `callback_ran` is published by NVIDIA's RM lock (the callback sets it under RM, an
//! unpin reads it after RM answered it: `pin::SharedPin::unpin`), and a pin's table by the shard
//! mutex. Both are C locks whose acquire/release the C side provides, as `kernel::sync::Mutex`
//! relies on for the data it guards.
//!
//! Cost on arm64: `core`'s read-modify-writes compile to LL/SC loops (the kernel's Rust target
//! enables no LSE), where the C atomics patch in LSE instructions; only the statistics' adds and
//! the few `cmpxchg`/`xchg` are read-modify-writes (REVIEW-KMOD-2 T3-11).

use core::cell::UnsafeCell;
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, Ordering};
use kernel::ffi::c_void;

/// No ordering.
pub(crate) struct Relaxed;
/// Acquire ordering.
pub(crate) struct Acquire;
/// Release ordering.
pub(crate) struct Release;

/// An ordering a load may take.
pub(crate) trait LoadOrdering {
    const ORD: Ordering;
}
/// An ordering a store may take.
pub(crate) trait StoreOrdering {
    const ORD: Ordering;
}
/// An ordering a read-modify-write may take, and the one its failed compare takes.
pub(crate) trait RmwOrdering {
    const ORD: Ordering;
    const FAILURE: Ordering;
}
impl LoadOrdering for Relaxed {
    const ORD: Ordering = Ordering::Relaxed;
}
impl LoadOrdering for Acquire {
    const ORD: Ordering = Ordering::Acquire;
}
impl StoreOrdering for Relaxed {
    const ORD: Ordering = Ordering::Relaxed;
}
impl StoreOrdering for Release {
    const ORD: Ordering = Ordering::Release;
}
impl RmwOrdering for Relaxed {
    const ORD: Ordering = Ordering::Relaxed;
    const FAILURE: Ordering = Ordering::Relaxed;
}
impl RmwOrdering for Acquire {
    const ORD: Ordering = Ordering::Acquire;
    const FAILURE: Ordering = Ordering::Acquire;
}
impl RmwOrdering for Release {
    const ORD: Ordering = Ordering::Release;
    const FAILURE: Ordering = Ordering::Relaxed;
}

/// A value accessed only atomically.
///
/// # Invariants
///
/// After `new`, the cell is only accessed through `core`'s atomic type of the same size (as
/// `core` guarantees) and alignment (asserted below), created over it by `from_ptr`.
#[repr(transparent)]
pub(crate) struct Atomic<T>(UnsafeCell<T>);

const _: () = assert!(core::mem::align_of::<u64>() == core::mem::align_of::<AtomicU64>());
const _: () = assert!(core::mem::align_of::<bool>() == core::mem::align_of::<AtomicBool>());
const _: () = assert!(core::mem::align_of::<u8>() == core::mem::align_of::<AtomicU8>());
const _: () = assert!(
    core::mem::align_of::<*mut c_void>() == core::mem::align_of::<AtomicPtr<c_void>>()
);

impl<T> Atomic<T> {
    pub(crate) const fn new(value: T) -> Self {
        // INVARIANT: not yet shared; accessed only through the methods below.
        Self(UnsafeCell::new(value))
    }
}

macro_rules! atomic_ops {
    ($t:ty, $core:ty) => {
        // SAFETY: every access is atomic (type invariant); as the kernel's `Atomic`, shared
        // use of an atomic pointer says nothing about what it points to.
        unsafe impl Sync for Atomic<$t> {}
        // SAFETY: as the kernel's `Atomic`, moving the cell to another thread moves only its
        // value (a pointer's address at most).
        unsafe impl Send for Atomic<$t> {}

        // Not every type uses every operation.
        #[allow(dead_code)]
        impl Atomic<$t> {
            fn get(&self) -> &$core {
                // SAFETY: the cell is valid for the life of `self`, aligned for `$core`
                // (asserted above) and only accessed atomically (type invariant).
                unsafe { <$core>::from_ptr(self.0.get()) }
            }
            pub(crate) fn load<O: LoadOrdering>(&self, _: O) -> $t {
                self.get().load(O::ORD)
            }
            pub(crate) fn store<O: StoreOrdering>(&self, value: $t, _: O) {
                self.get().store(value, O::ORD)
            }
            pub(crate) fn cmpxchg<O: RmwOrdering>(&self, old: $t, new: $t, _: O) -> Result<$t, $t> {
                self.get().compare_exchange(old, new, O::ORD, O::FAILURE)
            }
            /// Stores `value` and returns the old value, as the kernel's `Atomic::xchg`.
            pub(crate) fn xchg<O: RmwOrdering>(&self, value: $t, _: O) -> $t {
                self.get().swap(value, O::ORD)
            }
        }
    };
}
atomic_ops!(bool, AtomicBool);
atomic_ops!(u8, AtomicU8);
atomic_ops!(u64, AtomicU64);
atomic_ops!(*mut c_void, AtomicPtr<c_void>);

impl Atomic<u64> {
    /// Wrapping add, as the kernel's `Atomic::add`.
    pub(crate) fn add<O: RmwOrdering>(&self, value: u64, _: O) {
        self.get().fetch_add(value, O::ORD);
    }

    /// Wrapping add that returns the old value, as the kernel's `Atomic::fetch_add`.
    pub(crate) fn fetch_add<O: RmwOrdering>(&self, value: u64, _: O) -> u64 {
        self.get().fetch_add(value, O::ORD)
    }
}

impl Atomic<u8> {
    /// Sets the bits of `value`; returns the old value, as the kernel's `Atomic::fetch_or`.
    pub(crate) fn fetch_or<O: RmwOrdering>(&self, value: u8, _: O) -> u8 {
        self.get().fetch_or(value, O::ORD)
    }

    /// Keeps only the bits of `value`; returns the old value.
    pub(crate) fn fetch_and<O: RmwOrdering>(&self, value: u8, _: O) -> u8 {
        self.get().fetch_and(value, O::ORD)
    }
}

/// [`SetOnce`]'s states.
const EMPTY: u8 = 0;
const WRITING: u8 = 1;
const READY: u8 = 2;

/// A value written at most once, then read without locks, with the kernel `SetOnce`'s interface
/// (whose `as_ref` is a C helper call: NVIDIA's API, behind this one, is read in every operation).
///
/// # Invariants
///
/// `state` only moves `EMPTY` -> `WRITING` -> `READY`. While it is `WRITING`, only the thread
/// whose compare-exchange moved it there touches `value`; when it is `READY`, `value` is
/// initialised and is not written again.
pub(crate) struct SetOnce<T> {
    state: AtomicU8,
    value: UnsafeCell<MaybeUninit<T>>,
}

// SAFETY: `value` is written once, by the one caller that moved `state` from EMPTY, before
// `state` is published READY with Release; readers see it only after an Acquire load of READY.
// `as_ref` hands `&T` to any thread (`T: Sync`), and the value moved in by one thread may be
// dropped by another (`T: Send`).
unsafe impl<T: Send + Sync> Sync for SetOnce<T> {}

impl<T> SetOnce<T> {
    pub(crate) const fn new() -> Self {
        // INVARIANT: `EMPTY`, nothing initialised.
        Self { state: AtomicU8::new(EMPTY), value: UnsafeCell::new(MaybeUninit::uninit()) }
    }

    /// Stores `value` unless a value is (being) stored; says whether it was stored.
    pub(crate) fn populate(&self, value: T) -> bool {
        let claimed =
            self.state.compare_exchange(EMPTY, WRITING, Ordering::Acquire, Ordering::Relaxed);
        if claimed.is_err() {
            return false;
        }
        // SAFETY: the compare-exchange above made us the only writer, and no reader reads
        // before READY.
        unsafe { (*self.value.get()).write(value) };
        // INVARIANT: `WRITING` -> `READY`, initialised just above by the one writer.
        self.state.store(READY, Ordering::Release);
        true
    }

    pub(crate) fn as_ref(&self) -> Option<&T> {
        if self.state.load(Ordering::Acquire) != READY {
            return None;
        }
        // SAFETY: READY means initialised and never written again (type invariant).
        Some(unsafe { (*self.value.get()).assume_init_ref() })
    }
}

impl<T> Drop for SetOnce<T> {
    fn drop(&mut self) {
        if *self.state.get_mut() == READY {
            // SAFETY: READY means initialised (type invariant); dropped once, here.
            unsafe { self.value.get_mut().assume_init_drop() };
        }
    }
}
