//! A replication sink whose groups stay pending until the test settles
//! them (shared by the replication and async-write tests), and a `block_on`
//! for futures on the test's thread.

#![allow(dead_code)]

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use leaseq::{PendingReplication, ReplicationSink};

/// A sink whose groups stay pending until the test settles them.
#[derive(Default)]
pub struct Held {
    groups: Mutex<Vec<Arc<Outcome>>>,
    started: Condvar,
    /// While set, groups are accepted at once (and not kept).
    pub accept_all: AtomicBool,
}

/// One pending group: its outcome once the test gives it.
#[derive(Default)]
pub struct Outcome {
    outcome: Mutex<Option<Result<(), String>>>,
    given: Condvar,
    /// Whether the replicator has taken the outcome (the group is settled).
    taken: AtomicBool,
}

/// The engine's handle on a shared `Held`.
pub struct HeldSink(pub Arc<Held>);

impl ReplicationSink for HeldSink {
    fn replicate(&self, frames: &[u8]) -> Result<(), String> {
        self.start(frames).wait()
    }

    fn start(&self, _frames: &[u8]) -> Box<dyn PendingReplication> {
        let outcome = Arc::new(Outcome::default());
        if self.0.accept_all.load(Ordering::SeqCst) {
            outcome.give(Ok(()));
            return Box::new(HeldGroup(outcome));
        }
        self.0.groups.lock().unwrap().push(outcome.clone());
        self.0.started.notify_all();
        Box::new(HeldGroup(outcome))
    }
}

struct HeldGroup(Arc<Outcome>);

impl PendingReplication for HeldGroup {
    /// Bounded (30 s), so a failing test ends instead of hanging on a
    /// group it never settled.
    fn wait(self: Box<Self>) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut outcome = self.0.outcome.lock().unwrap();
        loop {
            if let Some(outcome) = outcome.take() {
                self.0.taken.store(true, Ordering::SeqCst);
                return outcome;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err("the test never settled this group".into());
            }
            outcome = self.0.given.wait_timeout(outcome, left).unwrap().0;
        }
    }
}

impl Held {
    /// Waits (bounded) until `n` groups were started; returns group `n - 1`.
    pub fn nth_started(&self, n: usize) -> Arc<Outcome> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut groups = self.groups.lock().unwrap();
        while groups.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "only {} groups started, expected {n}", groups.len());
            groups = self.started.wait_timeout(groups, left).unwrap().0;
        }
        groups[n - 1].clone()
    }

    /// Settles every group started so far that is not settled yet with
    /// `outcome`; returns how many it settled.
    pub fn settle_all(&self, outcome: Result<(), String>) -> usize {
        let groups = self.groups.lock().unwrap();
        let mut settled = 0;
        for group in groups.iter() {
            let mut slot = group.outcome.lock().unwrap();
            if slot.is_none() && !group.taken.load(Ordering::SeqCst) {
                *slot = Some(outcome.clone());
                group.given.notify_all();
                settled += 1;
            }
        }
        settled
    }

    pub fn started_count(&self) -> usize {
        self.groups.lock().unwrap().len()
    }
}

impl Outcome {
    pub fn give(&self, outcome: Result<(), String>) {
        *self.outcome.lock().unwrap() = Some(outcome);
        self.given.notify_all();
    }
}

/// A waker that counts its wake-ups and unparks the thread that made it.
pub struct CountingWaker {
    pub wakes: AtomicUsize,
    thread: std::thread::Thread,
}

impl CountingWaker {
    pub fn new() -> Arc<Self> {
        Arc::new(CountingWaker { wakes: AtomicUsize::new(0), thread: std::thread::current() })
    }

    pub fn woken(&self) -> usize {
        self.wakes.load(Ordering::SeqCst)
    }

    /// Waits (bounded) until it has been woken at least once.
    pub fn wait_woken(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.woken() == 0 {
            assert!(Instant::now() < deadline, "the future was never woken");
            std::thread::park_timeout(Duration::from_millis(10));
        }
    }
}

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
        self.thread.unpark();
    }
}

/// Polls `future` once with `waker`.
pub fn poll_once<F: Future + Unpin>(future: &mut F, waker: &Arc<CountingWaker>) -> Poll<F::Output> {
    let waker = Waker::from(waker.clone());
    std::pin::Pin::new(future).poll(&mut Context::from_waker(&waker))
}

/// Runs `future` to its end on this thread (bounded: 10 s).
pub fn block_on<F: Future + Unpin>(mut future: F) -> F::Output {
    let waker = CountingWaker::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Poll::Ready(out) = poll_once(&mut future, &waker) {
            return out;
        }
        assert!(Instant::now() < deadline, "the future did not resolve in 10 s");
        std::thread::park_timeout(Duration::from_millis(10));
    }
}
