//! Lock helpers. A panic while a lock is held aborts the process in release
//! builds, so a poisoned lock only shows up in tests; its data is still whole
//! (every critical section leaves it consistent) and is used as is.
//!
//! `SpinLock` is for state that one thread uses at a time in practice: a
//! client connection's wire, shared by its task and its request's body, and
//! a worker thread's idle upstream connections.

use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

pub fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

pub fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

pub fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

/// A lock whose holder gives it back with a plain store. `Mutex` makes its
/// release an atomic exchange too, to learn whether a thread sleeps on it,
/// and each such instruction waits for every store before it: a request
/// takes these locks about ten times. A thread that finds a `SpinLock`
/// taken yields until it is free, which suits only sections that never
/// wait: these hold it for reads and writes of memory, the parsing of a
/// head, and non-blocking socket calls (a read, the writes of a response's
/// pieces until the socket takes no more, the closing of idle connections
/// in a sweep). On a worker's own runtime one thread runs every task that
/// takes a given lock, so none ever finds it taken; the yield is for tests
/// and the caller's runtime.
pub struct SpinLock<T: ?Sized> {
    taken: AtomicBool,
    value: UnsafeCell<T>,
}

// Safety: the value is reached only through a guard, and `taken` lets one
// guard exist at a time (its swap acquires what the last holder's store
// released), so the value moves between threads as under a `Mutex`.
unsafe impl<T: ?Sized + Send> Send for SpinLock<T> {}
unsafe impl<T: ?Sized + Send> Sync for SpinLock<T> {}

impl<T> SpinLock<T> {
    pub const fn new(value: T) -> SpinLock<T> {
        SpinLock {
            taken: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }
}

impl<T: ?Sized> SpinLock<T> {
    pub fn lock(&self) -> SpinGuard<'_, T> {
        while self.taken.swap(true, Ordering::Acquire) {
            // Read, not swapped, while it is taken: the holder's cache line
            // is not taken from it at every turn.
            while self.taken.load(Ordering::Relaxed) {
                std::thread::yield_now();
            }
        }
        SpinGuard {
            lock: self,
            stays_on_its_thread: PhantomData,
        }
    }
}

/// The value of a taken `SpinLock`, given back when dropped. Not `Send`,
/// as `MutexGuard` is not: a future that held one across an `.await` could
/// not be spawned, where it would otherwise leave every other taker of the
/// lock on its thread yielding for good.
pub struct SpinGuard<'a, T: ?Sized> {
    lock: &'a SpinLock<T>,
    stays_on_its_thread: PhantomData<*const ()>,
}

// Safety: a shared guard gives out only `&T`, so threads may share one
// when they may share a `&T`.
unsafe impl<T: ?Sized + Sync> Sync for SpinGuard<'_, T> {}

impl<T: ?Sized> Deref for SpinGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // Safety: this guard is the only one (see `SpinLock::lock`).
        unsafe { &*self.lock.value.get() }
    }
}

impl<T: ?Sized> DerefMut for SpinGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // Safety: this guard is the only one, and borrowed mutably.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T: ?Sized> Drop for SpinGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.taken.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Increments made from several threads at once are all kept: no two
    /// guards were ever out together.
    #[test]
    fn a_spin_lock_lets_one_thread_in_at_a_time() {
        const THREADS: u64 = 4;
        const EACH: u64 = 20_000;
        // Two fields written apart: a second guard out at the same time
        // would sooner or later see them differ.
        let lock = Arc::new(SpinLock::new((0u64, 0u64)));
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                let lock = lock.clone();
                std::thread::spawn(move || {
                    for _ in 0..EACH {
                        let mut pair = lock.lock();
                        assert_eq!(pair.0, pair.1);
                        pair.0 += 1;
                        std::hint::black_box(&mut *pair);
                        pair.1 += 1;
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(*lock.lock(), (THREADS * EACH, THREADS * EACH));
    }

    #[test]
    fn a_guard_gives_the_lock_back_when_dropped() {
        let lock = SpinLock::new(Vec::new());
        let mut guard = lock.lock();
        guard.push(1);
        assert!(lock.taken.load(Ordering::Relaxed), "taken while guarded");
        drop(guard);
        assert!(!lock.taken.load(Ordering::Relaxed), "given back on drop");
        lock.lock().push(2);
        assert_eq!(*lock.lock(), [1, 2]);
    }

    /// What a request's body reads through: the wire, seen as a trait object.
    #[test]
    fn a_spin_lock_holds_a_trait_object() {
        let lock: Arc<SpinLock<dyn std::fmt::Debug + Send>> = Arc::new(SpinLock::new(7u8));
        assert_eq!(format!("{:?}", &*lock.lock()), "7");
    }
}
