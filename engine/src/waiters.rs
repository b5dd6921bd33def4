//! Long-polling receivers waiting for a queue to have something.
//!
//! Invariant (no lost wake-up): a waiter registers (under the list's mutex,
//! which also bumps `count`), then looks at the queue once more, then sleeps. A
//! notifier makes its messages ready, then issues a SeqCst fence, then reads
//! `count`. By the fences, either the notifier sees the registration and wakes
//! the waiter, or the waiter's second look sees the messages. Notifiers wake
//! every waiter (they re-check and re-register); waking all keeps the protocol
//! obviously correct, and waiters exist only on an idle queue, where a herd is
//! cheap.

use std::task::Waker;
use std::thread::Thread;

use crate::sync::{Arc, AtomicUsize, Mutex, Ordering, StatCountUsize, fence, lock};

#[derive(Debug)]
enum Wake {
    Thread(Thread),
    Task(Waker),
}

#[derive(Debug)]
struct Entry {
    id: u64,
    wake: Wake,
    /// For async waiters: when (engine clock) the driver must wake it so it
    /// can time out; blocking waiters time out on their own.
    wake_at: Option<u64>,
}

#[derive(Debug, Default)]
struct List {
    entries: Vec<Entry>,
    next_id: u64,
}

/// The waiters of one queue.
#[derive(Debug)]
pub(crate) struct Waiters {
    count: AtomicUsize,
    /// Waiters across every queue of the engine, so a moving manual clock can
    /// skip the queues when nobody waits anywhere (the common case).
    engine_count: Arc<StatCountUsize>,
    list: Mutex<List>,
}

/// A registration; remove it with `Waiters::deregister`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Registration(u64);

impl Waiters {
    pub(crate) fn new(engine_count: Arc<StatCountUsize>) -> Self {
        Waiters { count: AtomicUsize::new(0), engine_count, list: Mutex::new(List::default()) }
    }

    fn add(&self, n: usize) {
        self.count.fetch_add(n, Ordering::SeqCst);
        self.engine_count.fetch_add(n, Ordering::SeqCst);
    }

    fn remove(&self, n: usize) {
        self.count.fetch_sub(n, Ordering::SeqCst);
        self.engine_count.fetch_sub(n, Ordering::SeqCst);
    }

    /// Registers the current thread.
    pub(crate) fn register_thread(&self) -> Registration {
        self.register(Wake::Thread(std::thread::current()), None)
    }

    /// Registers (or re-registers) a task's waker.
    pub(crate) fn register_task(&self, waker: &Waker, wake_at: u64, previous: Option<Registration>) -> Registration {
        if let Some(previous) = previous {
            let mut list = lock(&self.list);
            if let Some(entry) = list.entries.iter_mut().find(|e| e.id == previous.0) {
                if let Wake::Task(old) = &mut entry.wake {
                    old.clone_from(waker);
                }
                entry.wake_at = Some(wake_at);
                return previous;
            }
        }
        self.register(Wake::Task(waker.clone()), Some(wake_at))
    }

    fn register(&self, wake: Wake, wake_at: Option<u64>) -> Registration {
        let mut list = lock(&self.list);
        let id = list.next_id;
        list.next_id += 1;
        list.entries.push(Entry { id, wake, wake_at });
        self.add(1);
        drop(list);
        // Pairs with the notifier's fence: our later look at the queue cannot
        // be ordered before this registration.
        fence(Ordering::SeqCst);
        Registration(id)
    }

    /// Removes a registration (a no-op if a notifier already removed it).
    pub(crate) fn deregister(&self, registration: Registration) {
        let mut list = lock(&self.list);
        if let Some(at) = list.entries.iter().position(|e| e.id == registration.0) {
            list.entries.swap_remove(at);
            self.remove(1);
        }
    }

    /// Wakes every waiter if there are any. Call after making messages ready.
    #[inline]
    pub(crate) fn notify(&self) {
        // SeqCst fence: orders our earlier ready-queue pushes before the read
        // of `count` (see the module invariant).
        fence(Ordering::SeqCst);
        if self.count.load(Ordering::Relaxed) == 0 {
            return;
        }
        self.wake_all();
    }

    #[cold]
    fn wake_all(&self) {
        let entries = {
            let mut list = lock(&self.list);
            self.remove(list.entries.len());
            std::mem::take(&mut list.entries)
        };
        for entry in entries {
            match entry.wake {
                Wake::Thread(thread) => thread.unpark(),
                Wake::Task(waker) => waker.wake(),
            }
        }
    }

    /// Wakes async waiters whose wait ran out by `now` (the driver calls this
    /// each tick so timeouts work on any executor).
    /// The earliest time the driver must wake an async waiter to let it time
    /// out, or `u64::MAX`.
    pub(crate) fn earliest_wake_at(&self) -> u64 {
        if self.count.load(Ordering::Relaxed) == 0 {
            return u64::MAX;
        }
        lock(&self.list).entries.iter().filter_map(|e| e.wake_at).min().unwrap_or(u64::MAX)
    }

    pub(crate) fn wake_timed_out(&self, now: u64) {
        if self.count.load(Ordering::Relaxed) == 0 {
            return;
        }
        let due: Vec<Entry> = {
            let mut list = lock(&self.list);
            let (due, keep): (Vec<_>, Vec<_>) =
                std::mem::take(&mut list.entries).into_iter().partition(|e| e.wake_at.is_some_and(|at| at <= now));
            list.entries = keep;
            self.remove(due.len());
            due
        };
        for entry in due {
            if let Wake::Task(waker) = entry.wake {
                waker.wake();
            }
        }
    }
}
