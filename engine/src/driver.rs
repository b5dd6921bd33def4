//! The background driver: one thread per engine on a real clock.
//!
//! Invariant: the driver never holds an engine handle (`EngineInner`), only
//! the engine's shared state and its list of live queues, so the last handle
//! a user drops is always dropped on that user's thread, which stops the
//! driver (and waits for it) before it closes the engine: a durable engine's
//! data dir is unlocked when that drop returns. The driver exits when
//! `stop` is set. Each wake it applies due timers of every
//! queue (which wakes long-polling receivers when messages become ready),
//! sweeps out timer entries of leases that already ended, and wakes async
//! receivers whose wait ran out; then it sleeps until the earliest deadline
//! it knows of, at least one tick and at most `IDLE_TICKS` ticks. An idle
//! engine therefore wakes about ten times a second, not a thousand.
//!
//! Invariant (no deadline slept through): a thread that adds a deadline
//! earlier than any its shard had (or an async waiter's timeout) unparks the
//! driver when the driver plans to wake later than that (see `DriverSignal`).

use std::thread::{JoinHandle, Thread};
use std::time::Duration;

use crate::clock::duration_nanos;
use crate::engine::{EngineShared, LiveQueues};
use crate::sync::{Arc, AtomicBool, OnceLock, Ordering};

/// The longest the driver sleeps, in ticks, when nothing is due (100 ms with
/// the default 1 ms tick): the cadence of sweeping ended timers and of moving
/// timer inboxes into the wheels while every deadline is far away.
const IDLE_TICKS: u32 = 100;

/// How operations tell a sleeping driver about a deadline it has not seen.
///
/// Invariant (a Dekker pattern, as in `waiters.rs`): before sleeping, the
/// driver stores when it will wake in `wake_at`, issues a SeqCst fence, and
/// reads every shard's `next_due` hint and every async waiter's deadline once
/// more. A thread that lowers a hint (or registers an async waiter) issues a
/// SeqCst fence after doing so, then reads `wake_at` and unparks the driver if
/// its deadline is earlier. By the fences, either the driver's second look
/// sees the new deadline, or the thread sees the planned wake and unparks it.
/// While the driver is awake `wake_at` is 0, so nobody unparks it: it looks
/// again before it sleeps.
#[derive(Debug, Default)]
pub(crate) struct DriverSignal {
    /// Engine time the sleeping driver wakes at; 0 while it is awake. A std
    /// atomic under loom too: loom models use a manual clock, which has no
    /// driver.
    wake_at: std::sync::atomic::AtomicU64,
    thread: OnceLock<Thread>,
    /// Times the driver woke (tests: an idle engine must sleep).
    #[cfg(all(test, not(loom)))]
    wakes: std::sync::atomic::AtomicU64,
}

impl DriverSignal {
    /// A deadline at `at` (engine time) was added where the driver may not
    /// have seen it.
    #[inline]
    pub(crate) fn deadline_added(&self, at: u64) {
        // Under loom there is no driver (models use a manual clock); the
        // fence would only add interleavings to the timer model.
        #[cfg(not(loom))]
        {
            std::sync::atomic::fence(Ordering::SeqCst);
            if at < self.wake_at.load(Ordering::Relaxed) {
                if let Some(thread) = self.thread.get() {
                    thread.unpark();
                }
            }
        }
        #[cfg(loom)]
        let _ = at;
    }
}

/// A running driver thread.
#[derive(Debug)]
pub(crate) struct Driver {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl Driver {
    /// Starts the driver. It uses a plain std thread: it only exists with a
    /// real clock, which loom models never use.
    pub(crate) fn spawn(shared: Arc<EngineShared>, live: Arc<LiveQueues>, tick: Duration) -> Driver {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("leaseq-driver".into())
            .spawn(move || run(&thread_shared, &live, tick, &stopping))
            .expect("the OS refused to start the leaseq driver thread");
        let _ = shared.driver.thread.set(thread.thread().clone());
        Driver { stop, thread }
    }

    /// Stops the thread and waits for it. (Never called on the driver thread,
    /// which holds no engine handle; if it were, it would only ask.)
    pub(crate) fn stop(self) {
        self.stop.store(true, Ordering::Release);
        self.thread.thread().unpark();
        if self.thread.thread().id() != std::thread::current().id() {
            let _ = self.thread.join();
        }
    }
}

fn run(shared: &EngineShared, live: &LiveQueues, tick: Duration, stop: &AtomicBool) {
    let tick_nanos = duration_nanos(tick);
    while !stop.load(Ordering::Acquire) {
        let sleep = {
            let signal = &shared.driver;
            let clock = &shared.clock;
            // Awake: nobody needs to unpark us until we publish a wake time.
            signal.wake_at.store(0, Ordering::Relaxed);
            #[cfg(all(test, not(loom)))]
            signal.wakes.fetch_add(1, Ordering::Relaxed);
            let now = clock.now().0;
            let queues = live.snapshot();
            let mut sweeping = false;
            for queue in queues.iter() {
                sweeping |= queue.tidy_timers(now);
                queue.waiters.wake_timed_out(now);
            }
            // An unfinished sweep continues next tick: at 4096 entries per
            // shard per wake it must keep up with acks, not wait for idleness.
            let idle_ticks = if sweeping { 1 } else { u64::from(IDLE_TICKS) };
            let earliest = || {
                let idle = now.saturating_add(tick_nanos.saturating_mul(idle_ticks));
                queues.iter().map(|queue| queue.next_due().min(queue.waiters.earliest_wake_at())).fold(idle, u64::min)
            };
            let planned = earliest();
            signal.wake_at.store(planned, Ordering::Relaxed);
            // SeqCst fence: the planned wake is ordered before the second look
            // (see `DriverSignal`).
            std::sync::atomic::fence(Ordering::SeqCst);
            let wake = earliest().min(planned);
            // At least a tick between wakes, so a stream of due timers costs
            // at most one wake per tick; the queue list ends here, before
            // sleeping, so a deleted queue is freed promptly.
            Duration::from_nanos(wake.saturating_sub(clock.now().0).max(tick_nanos))
        };
        std::thread::park_timeout(sleep);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::time::{Duration, Instant};

    use crate::{Engine, QueueConfig, ReceiveOptions};

    /// With nothing due, the driver sleeps up to `IDLE_TICKS` ticks at a
    /// time instead of waking every tick.
    #[test]
    fn an_idle_engine_sleeps() {
        let engine = Engine::builder().tick(Duration::from_millis(1)).build();
        let _q = engine.create_queue("idle", QueueConfig::default()).unwrap();
        let started = Instant::now();
        std::thread::sleep(Duration::from_millis(500));
        let wakes = engine.inner.shared.driver.wakes.load(std::sync::atomic::Ordering::Relaxed);
        let ticks = started.elapsed().as_millis();
        assert!(wakes <= 20, "{wakes} driver wakes in {ticks} ticks of an idle engine");
    }

    /// A lease taken while the driver sleeps idle still expires on time: the
    /// receive that schedules the earlier deadline wakes the driver, which
    /// expires the lease and wakes the blocked receiver (with a 10 ms tick
    /// the idle sleep is a whole second).
    #[test]
    fn a_deadline_added_during_an_idle_sleep_wakes_the_driver() {
        let engine = Engine::builder().tick(Duration::from_millis(10)).build();
        let config = QueueConfig::default().visibility_timeout(Duration::from_millis(50));
        let q = engine.create_queue("jobs", config).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        q.send(&b"m"[..]).unwrap();
        let first = q.receive(1).unwrap().remove(0);
        let deadline = Instant::now() + first.lease_left(q.now());
        let wait = ReceiveOptions { wait: Some(Duration::from_secs(5)), ..ReceiveOptions::default() };
        let again = q.receive_with(1, wait).unwrap();
        let late = Instant::now().saturating_duration_since(deadline);
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].delivery_count, 2);
        assert!(late < Duration::from_millis(500), "redelivered {late:?} after its deadline");
    }
}
