//! The one place concurrent code gets its atomics, cells, locks and threads.
//!
//! Invariant: no other module names `std::sync::atomic`, `std::cell::UnsafeCell`
//! or `std::sync::Mutex` directly. Under `--cfg loom` every type here is loom's,
//! so the loom models in `loom-tests/` run the engine's own transition code.
//! `crossbeam_queue::SegQueue` has no loom twin; `ReadyQueue` in `ready.rs` is
//! the seam that swaps it for a loom `Mutex<VecDeque>` (see docs/design.md).
//!
//! `Arc` and `Weak` are std's in both builds: they only own engines, queues and
//! shards, which live until every handle is gone; no slot memory is ever
//! reclaimed concurrently, so there is no reference-count protocol to model.

#[cfg(not(loom))]
mod imp {
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};
    pub(crate) use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};

    /// Parking a thread until another unparks it.
    pub(crate) mod thread {
        pub(crate) use std::thread::{Thread, current, park};
    }

    /// An `UnsafeCell` with loom's closure-based API, so call sites read the
    /// same under both backends.
    #[derive(Debug, Default)]
    pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

    impl<T> UnsafeCell<T> {
        pub(crate) const fn new(value: T) -> Self {
            Self(std::cell::UnsafeCell::new(value))
        }

        #[inline(always)]
        pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
            f(self.0.get())
        }

        #[inline(always)]
        pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0.get())
        }
    }

    /// One step of a spin wait on a state some other thread will leave soon.
    #[inline]
    pub(crate) fn busy_wait(spins: &mut u32) {
        if *spins < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
        *spins = spins.saturating_add(1);
    }
}

#[cfg(loom)]
mod imp {
    pub(crate) use loom::cell::UnsafeCell;
    pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};
    pub(crate) use loom::sync::{Condvar, Mutex, MutexGuard};
    pub(crate) use std::sync::{Arc, OnceLock};

    /// Parking a thread until another unparks it.
    pub(crate) mod thread {
        pub(crate) use loom::thread::{Thread, current, park};
    }

    /// Under loom a spin must yield, or the model never schedules the thread
    /// that would end it.
    #[inline]
    pub(crate) fn busy_wait(spins: &mut u32) {
        *spins = spins.saturating_add(1);
        loom::thread::yield_now();
    }
}

pub(crate) use imp::*;

/// A histogram bucket: a Relaxed sample count that orders nothing and that no
/// decision reads. It is a std atomic in both builds, a deliberate loom seam:
/// a queue has thousands of buckets, and as loom atomics their creation and
/// every `stats()` read of them would be model branches (loom's branch limit is
/// exceeded by one read) while adding no interleaving that could break an
/// invariant. The stats *counters*, which the gauges are derived from and
/// whose ordering matters, stay loom atomics.
pub(crate) type SampleCount = std::sync::atomic::AtomicU64;

/// A statistic that no transition reads (the late-call count per message, the
/// engine-wide count of long-polling receivers): a std atomic in both builds,
/// for the reason given for `SampleCount`. Each such counter is a few more
/// loom operations on the hottest paths (every send, every ack) and would
/// multiply the state space of the exhaustive models while checking nothing a
/// model asserts; long polling is outside the models (docs/loom.md).
pub(crate) type StatCount32 = std::sync::atomic::AtomicU32;
/// See `StatCount32`.
pub(crate) type StatCountUsize = std::sync::atomic::AtomicUsize;

/// The message-id counters (`shard.rs`): a std atomic in both builds. An id
/// must be unique, which needs only the atomicity of each read-modify-write;
/// no transition reads an id to decide anything, so its ordering is Relaxed
/// and there is nothing for loom to check in it, only interleavings to add to
/// every send.
pub(crate) type IdCount = std::sync::atomic::AtomicU64;

/// Locks a mutex, recovering the data if a panicking thread poisoned it: every
/// structure the engine guards with a mutex is left consistent between
/// statements, so poison carries no information here.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    #[cfg(not(loom))]
    {
        mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
    #[cfg(loom)]
    {
        mutex.lock().unwrap()
    }
}

/// Tries to lock without waiting; `None` when another thread holds it.
pub(crate) fn try_lock<T>(mutex: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match mutex.try_lock() {
        Ok(guard) => Some(guard),
        #[cfg(not(loom))]
        Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(_) => None,
    }
}

/// A small number per thread, handed out in the order threads first ask, so
/// threads spread over shards round-robin. Numbers are unique and never
/// reused (each comes from one `fetch_add`), so a number also identifies its
/// thread for good: `ShardStats` relies on that to give each shard one
/// single-writer owner. Nothing else depends on it, so a plain std counter
/// (Relaxed: only its atomicity matters) is enough.
/// The slot is const-initialised, so after a thread's first call this is one
/// thread-local load (it runs on every counter update).
#[cfg(not(loom))]
#[inline]
pub(crate) fn thread_number() -> usize {
    const UNSET: usize = usize::MAX;
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    thread_local! {
        static NUMBER: std::cell::Cell<usize> = const { std::cell::Cell::new(UNSET) };
    }
    NUMBER.with(|n| {
        let number = n.get();
        if number != UNSET {
            return number;
        }
        let number = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        n.set(number);
        number
    })
}

/// Under loom: numbered in the order model threads first touch the engine
/// within one execution (loom resets both statics per execution), so home
/// shards differ between model threads, as they do in production, and each
/// execution is reproducible from its schedule; numbers are unique within an
/// execution, as `ShardStats` needs. The counter is a std atomic on purpose:
/// it is not a synchronisation point, and a loom atomic would only add
/// interleavings that cannot matter.
#[cfg(loom)]
#[inline]
pub(crate) fn thread_number() -> usize {
    loom::lazy_static! {
        static ref NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    }
    loom::thread_local! {
        static NUMBER: usize = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    NUMBER.with(|n| *n)
}
