//! The background driver: one thread per engine on a real clock.
//!
//! Invariant: the driver holds only a `Weak` reference between ticks, so it
//! never keeps an engine alive; it exits when the engine is gone or `stop` is
//! called, whichever comes first. Each tick it applies due timers of every
//! queue (which wakes long-polling receivers when messages become ready),
//! sweeps out timer entries of leases that already ended, and wakes async
//! receivers whose wait ran out.

use std::thread::JoinHandle;
use std::time::Duration;

use crate::engine::EngineInner;
use crate::sync::{Arc, AtomicBool, Ordering, Weak};

/// A running driver thread.
#[derive(Debug)]
pub(crate) struct Driver {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl Driver {
    /// Starts the driver. It uses a plain std thread: it only exists with a
    /// real clock, which loom models never use.
    pub(crate) fn spawn(engine: Weak<EngineInner>, tick: Duration) -> Driver {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name("leaseq-driver".into())
            .spawn(move || run(engine, tick, &stopping))
            .expect("the OS refused to start the leaseq driver thread");
        Driver { stop, thread }
    }

    /// Stops the thread and waits for it, unless called on the driver thread
    /// itself (when the driver held the last engine handle), where it only
    /// asks it to stop.
    pub(crate) fn stop(self) {
        self.stop.store(true, Ordering::Release);
        self.thread.thread().unpark();
        if self.thread.thread().id() != std::thread::current().id() {
            let _ = self.thread.join();
        }
    }
}

fn run(engine: Weak<EngineInner>, tick: Duration, stop: &AtomicBool) {
    while !stop.load(Ordering::Acquire) {
        {
            let Some(engine) = engine.upgrade() else {
                return;
            };
            let now = engine.shared.clock.now().0;
            for queue in engine.live_queues().iter() {
                queue.tidy_timers(now);
                queue.waiters.wake_timed_out(now);
            }
            // Our references end here, before sleeping, so a deleted queue or
            // a dropped engine is freed promptly.
        }
        std::thread::park_timeout(tick);
    }
}
