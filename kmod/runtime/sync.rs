// SPDX-License-Identifier: GPL-2.0

//! Reference counting (`Arc`, `ArcBorrow`) on the kernel's `refcount_t`, and the kernel's sleeping
//! `struct mutex` (`Mutex`, `Guard`, `new_mutex!`), with the kernel crate's signatures.
//!
//! `refcount_t` keeps its saturation and its WARN on underflow or on an increment from 0, and
//! the mutex keeps lockdep: a reference or lock mistake of the client is reported on the debug
//! test kernel under this runtime as under the kernel crate.

use core::cell::UnsafeCell;
use core::marker::{PhantomData, PhantomPinned};
use core::mem::{self, ManuallyDrop};
use core::ops::{Deref, DerefMut};
use core::ptr::{self, NonNull};

use crate::alloc::{AllocError, Flags, KBox};
use crate::bindings;
use crate::error::Error;
use crate::ffi::c_void;
use crate::init::PinInit;
use crate::str::CStr;
use crate::types::{ForeignOwnable, Opaque};

/// The shared allocation: the count, then the value.
#[repr(C)]
struct ArcInner<T> {
    refcount: Opaque<bindings::refcount_t>,
    data: T,
}

/// A reference-counted `T` in a kernel allocation.
///
/// # Invariants
///
/// `ptr` is a live `KBox`-made `ArcInner<T>` whose count includes this reference.
pub struct Arc<T> {
    ptr: NonNull<ArcInner<T>>,
    _owns: PhantomData<ArcInner<T>>,
}

// SAFETY: the value is shared between threads and dropped by the last one: `T: Send + Sync`.
unsafe impl<T: Send + Sync> Send for Arc<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for Arc<T> {}

impl<T> Arc<T> {
    /// Moves `value` into a new allocation with a count of one.
    pub fn new(value: T, flags: Flags) -> Result<Self, AllocError> {
        let inner = KBox::new(ArcInner { refcount: Opaque::uninit(), data: value }, flags)?;
        let ptr = KBox::into_raw(inner);
        // SAFETY: `ptr` is a live, exclusively owned `ArcInner`; the count is set before any
        // other reference exists.
        unsafe { bindings::nvpeer_rt_refcount_set(Opaque::raw_get(ptr::addr_of!((*ptr).refcount)), 1) };
        // INVARIANT: a `KBox` allocation whose count (1) is this reference.
        // SAFETY: `KBox::into_raw` never returns NULL.
        Ok(Self { ptr: unsafe { NonNull::new_unchecked(ptr) }, _owns: PhantomData })
    }

    /// The value's address (what `into_raw` returns), keeping the reference.
    pub fn as_ptr(this: &Self) -> *const T {
        // SAFETY: a live `ArcInner` (type invariant); no reference is created.
        unsafe { ptr::addr_of!((*this.ptr.as_ptr()).data) }
    }

    /// Gives the reference up as the value's address: [`Arc::from_raw`] takes it back.
    pub fn into_raw(this: Self) -> *const T {
        Self::as_ptr(&ManuallyDrop::new(this))
    }

    /// Takes back a reference that [`Arc::into_raw`] gave up.
    ///
    /// # Safety
    ///
    /// `ptr` came from [`Arc::into_raw`] for an `Arc<T>`, and that reference is taken back once.
    pub unsafe fn from_raw(ptr: *const T) -> Self {
        let offset = mem::offset_of!(ArcInner<T>, data);
        // SAFETY: `ptr` is the `data` field of a live `ArcInner<T>` (the caller's guarantee), so
        // stepping back by its offset stays within that allocation.
        let inner = unsafe { ptr.byte_sub(offset) }.cast::<ArcInner<T>>().cast_mut();
        // INVARIANT: the reference `into_raw` kept is now this one.
        // SAFETY: non-NULL: derived from a live allocation.
        Self { ptr: unsafe { NonNull::new_unchecked(inner) }, _owns: PhantomData }
    }

    /// Whether `a` and `b` share one allocation.
    pub fn ptr_eq(a: &Self, b: &Self) -> bool {
        a.ptr == b.ptr
    }

    /// Borrows this reference without changing the count.
    pub fn as_arc_borrow(&self) -> ArcBorrow<'_, T> {
        // INVARIANT: the allocation lives at least as long as `self`'s borrow.
        ArcBorrow { inner: self.ptr, _borrow: PhantomData }
    }

    fn refcount(&self) -> *mut bindings::refcount_t {
        // SAFETY: a live `ArcInner` (type invariant); no reference is created.
        Opaque::raw_get(unsafe { ptr::addr_of!((*self.ptr.as_ptr()).refcount) })
    }
}

impl<T> Deref for Arc<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the value lives while this reference is counted (type invariant) and is only
        // ever shared.
        unsafe { &(*self.ptr.as_ptr()).data }
    }
}

impl<T> Clone for Arc<T> {
    fn clone(&self) -> Self {
        // SAFETY: a live count that includes `self`, so it is not 0.
        unsafe { bindings::nvpeer_rt_refcount_inc(self.refcount()) };
        // INVARIANT: the increment above is the new reference's.
        Self { ptr: self.ptr, _owns: PhantomData }
    }
}

impl<T> Drop for Arc<T> {
    fn drop(&mut self) {
        // SAFETY: a live count that includes this reference, dropped once here.
        if unsafe { bindings::nvpeer_rt_refcount_dec_and_test(self.refcount()) } {
            // SAFETY: that was the last reference: the allocation came from `KBox::into_raw`
            // (`new`) and nothing else uses it now.
            drop(unsafe { KBox::from_raw(self.ptr.as_ptr()) });
        }
    }
}

// SAFETY: `into_foreign` returns the non-NULL `ArcInner` address that `borrow` and
// `from_foreign` expect.
unsafe impl<T: 'static> ForeignOwnable for Arc<T> {
    type Borrowed<'a> = ArcBorrow<'a, T>;

    fn into_foreign(self) -> *mut c_void {
        ManuallyDrop::new(self).ptr.as_ptr().cast()
    }

    unsafe fn from_foreign(ptr: *mut c_void) -> Self {
        // INVARIANT: the reference `into_foreign` kept is now this one.
        // SAFETY: non-NULL and from `into_foreign` (the caller's guarantee).
        Self { ptr: unsafe { NonNull::new_unchecked(ptr.cast()) }, _owns: PhantomData }
    }

    unsafe fn borrow<'a>(ptr: *mut c_void) -> ArcBorrow<'a, T> {
        // INVARIANT: C's reference keeps the allocation for `'a` (the caller's guarantee).
        // SAFETY: non-NULL and from `into_foreign`.
        ArcBorrow { inner: unsafe { NonNull::new_unchecked(ptr.cast()) }, _borrow: PhantomData }
    }
}

/// A borrowed `Arc<T>`: the value without a count of its own.
///
/// # Invariants
///
/// `inner` is a live `ArcInner<T>` whose count stays above 0 for `'a`.
pub struct ArcBorrow<'a, T> {
    inner: NonNull<ArcInner<T>>,
    _borrow: PhantomData<&'a ()>,
}

impl<T> Clone for ArcBorrow<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for ArcBorrow<'_, T> {}

impl<T> Deref for ArcBorrow<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the value lives for `'a` (type invariant) and is only ever shared.
        unsafe { &(*self.inner.as_ptr()).data }
    }
}

impl<T> From<ArcBorrow<'_, T>> for Arc<T> {
    fn from(b: ArcBorrow<'_, T>) -> Self {
        // SAFETY: the count is above 0 while `b` lives (type invariant).
        unsafe { bindings::nvpeer_rt_refcount_inc(Opaque::raw_get(ptr::addr_of!((*b.inner.as_ptr()).refcount))) };
        // INVARIANT: the increment above is this reference's.
        Arc { ptr: b.inner, _owns: PhantomData }
    }
}

/// A lockdep class: one per place a lock is made (`new_mutex!` makes it a `static`).
#[repr(transparent)]
pub struct LockClassKey(Opaque<bindings::lock_class_key>);

// SAFETY: only lockdep reads and writes it, under its own locking.
unsafe impl Sync for LockClassKey {}

impl LockClassKey {
    /// A key for a `static`: lockdep takes static memory as it is.
    pub const fn new_static() -> Self {
        Self(Opaque::uninit())
    }

    /// The pointer C takes.
    pub fn as_ptr(&self) -> *mut bindings::lock_class_key {
        self.0.get()
    }
}

/// A lock's C side.
pub mod lock {
    pub use super::{Backend, Guard, Lock};

    /// The sleeping mutex's backend.
    pub mod mutex {
        pub use super::super::MutexBackend;
    }
}

/// What a lock is made of in C.
///
/// # Safety
///
/// `lock` acquires and `unlock` releases the lock `init` made, with the usual mutual exclusion.
pub unsafe trait Backend {
    /// The C lock.
    type State;

    /// Initialises `*ptr`.
    ///
    /// # Safety
    ///
    /// `ptr` is valid for writes and never moves afterwards; `name` and `key` are static.
    unsafe fn init(ptr: *mut Self::State, name: *const crate::ffi::c_char, key: *mut bindings::lock_class_key);

    /// Acquires it.
    ///
    /// # Safety
    ///
    /// `ptr` was initialised by `init`.
    unsafe fn lock(ptr: *mut Self::State);

    /// Releases it.
    ///
    /// # Safety
    ///
    /// `ptr` was initialised by `init` and is held by this thread.
    unsafe fn unlock(ptr: *mut Self::State);
}

/// The kernel's `struct mutex`.
pub struct MutexBackend;

// SAFETY: `mutex_lock`/`mutex_unlock` of a mutex `__mutex_init` made.
unsafe impl Backend for MutexBackend {
    type State = bindings::mutex;

    unsafe fn init(ptr: *mut Self::State, name: *const crate::ffi::c_char, key: *mut bindings::lock_class_key) {
        // SAFETY: the caller's guarantees are `__mutex_init`'s.
        unsafe { bindings::nvpeer_rt_mutex_init(ptr, name, key) }
    }

    unsafe fn lock(ptr: *mut Self::State) {
        // SAFETY: an initialised mutex (the caller's guarantee).
        unsafe { bindings::nvpeer_rt_mutex_lock(ptr) }
    }

    unsafe fn unlock(ptr: *mut Self::State) {
        // SAFETY: an initialised mutex this thread holds (the caller's guarantee).
        unsafe { bindings::nvpeer_rt_mutex_unlock(ptr) }
    }
}

/// A `T` behind a C lock of backend `B`.
///
/// # Invariants
///
/// `state` was initialised by `B::init` and the lock never moves (`PhantomPinned`); `data` is
/// only accessed while it is held.
pub struct Lock<T, B: Backend> {
    state: Opaque<B::State>,
    _pin: PhantomPinned,
    data: UnsafeCell<T>,
}

/// A `T` behind the kernel's sleeping mutex.
pub type Mutex<T> = Lock<T, MutexBackend>;

// SAFETY: the lock may move between threads with its value: `T: Send`.
unsafe impl<T: Send, B: Backend> Send for Lock<T, B> {}
// SAFETY: the lock gives one thread at a time `&mut T`: `T: Send` suffices.
unsafe impl<T: Send, B: Backend> Sync for Lock<T, B> {}

/// The initialiser `Lock::new` returns.
pub struct LockInit<T, B> {
    value: T,
    name: &'static CStr,
    key: &'static LockClassKey,
    _backend: PhantomData<B>,
}

impl<T, B: Backend> Lock<T, B> {
    /// An initialiser of a lock holding `value`, of lockdep class `key`, named `name`.
    pub fn new(value: T, name: &'static CStr, key: &'static LockClassKey) -> LockInit<T, B> {
        LockInit { value, name, key, _backend: PhantomData }
    }

    /// Acquires the lock; it is released when the guard drops.
    pub fn lock(&self) -> Guard<'_, T, B> {
        // SAFETY: initialised by `B::init` (type invariant).
        unsafe { B::lock(self.state.get()) };
        // INVARIANT: acquired above; released once, by the guard's `drop`.
        Guard { lock: self, _not_send: PhantomData }
    }
}

// SAFETY: `Ok` only after both the value and the lock are initialised; nothing on `Err` (there
// is none).
unsafe impl<T, B: Backend> PinInit<Lock<T, B>> for LockInit<T, B> {
    unsafe fn __pinned_init(self, slot: *mut Lock<T, B>) -> Result<(), Error> {
        // SAFETY: `slot` is valid for writes and never moves (the caller's guarantee).
        unsafe {
            ptr::addr_of_mut!((*slot).data).write(UnsafeCell::new(self.value));
            B::init(Opaque::raw_get(ptr::addr_of!((*slot).state)), self.name.as_char_ptr(), self.key.as_ptr());
        }
        Ok(())
    }
}

/// A held lock: the value while it is held.
///
/// # Invariants
///
/// This thread holds `lock`, and this guard releases it once.
pub struct Guard<'a, T, B: Backend> {
    lock: &'a Lock<T, B>,
    // A lock is released by the thread that took it.
    _not_send: PhantomData<*mut ()>,
}

// SAFETY: `&Guard` only gives `&T`: sharing it is sharing `&T`.
unsafe impl<T: Sync, B: Backend> Sync for Guard<'_, T, B> {}

impl<T, B: Backend> Deref for Guard<'_, T, B> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the lock is held (type invariant).
        unsafe { &*self.lock.data.get() }
    }
}

impl<T, B: Backend> DerefMut for Guard<'_, T, B> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the lock is held (type invariant) and `&mut self` is exclusive.
        unsafe { &mut *self.lock.data.get() }
    }
}

impl<T, B: Backend> Drop for Guard<'_, T, B> {
    fn drop(&mut self) {
        // SAFETY: held by this thread (type invariant), released once.
        unsafe { B::unlock(self.lock.state.get()) };
    }
}

/// `Mutex::new` with a lockdep class of its own for this place in the source.
#[macro_export]
macro_rules! new_mutex {
    ($inner:expr $(, $name:literal)? $(,)?) => {
        $crate::sync::Mutex::new(
            $inner,
            $crate::c_str!(concat!(file!(), ":", line!())),
            {
                static KEY: $crate::sync::LockClassKey = $crate::sync::LockClassKey::new_static();
                &KEY
            },
        )
    };
}
pub use new_mutex;
