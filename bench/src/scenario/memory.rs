//! Memory: bytes per queued and per in-flight message, excluding payload
//! (payloads are static, so they allocate nothing), measured by the counting
//! allocator as live bytes after the operations, including every index the
//! queue keeps (ready queue, timer inbox and wheel or heap) with its growth
//! slack.

use std::time::Duration;

use leaseq_bench::{Setup, Subject};
use serde_json::{Value, json};

use super::payload;
use crate::alloc;

/// Bytes per message queued (ready) and in flight.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Footprint {
    pub(crate) per_queued: f64,
    pub(crate) per_in_flight: f64,
    /// Bytes still held per message that was sent, received and acked within
    /// its lease (timer entries waiting for a deadline that no longer matters:
    /// the price of lazy cancellation, until the deadline passes or, in the
    /// engine, the driver sweeps them out).
    pub(crate) per_acked_within_lease: f64,
}

impl Footprint {
    pub(crate) fn to_json(self) -> Value {
        json!({"bytes_per_queued": self.per_queued, "bytes_per_in_flight": self.per_in_flight,
               "bytes_per_acked_within_lease": self.per_acked_within_lease})
    }
}

/// Long enough for the engine's driver to wake at least twice when nothing is
/// due (it sleeps at most 100 ticks, 100 ms by default).
const SETTLE: Duration = Duration::from_millis(250);

/// Sends `n` messages, then receives them all (system clock, so the engine's
/// driver moves timer entries into its wheel as it would in production).
pub(crate) fn run<S: Subject>(n: usize) -> Footprint {
    alloc::start_counting();
    let setup = Setup { shards: 1, capacity: n + 1024, visibility: Duration::from_secs(600), ..Setup::default() };
    let queue = S::build(&setup);
    std::thread::sleep(Duration::from_millis(5));
    let empty = alloc::live_bytes();
    let body = payload(16);
    for _ in 0..n {
        assert!(queue.send(body.clone()), "the memory queue has room");
    }
    let queued = alloc::live_bytes();
    let mut received = 0;
    while received < n {
        received += queue.receive((n - received).min(1024)).len();
    }
    // Let the driver drain the timer inbox into the wheel: it wakes at least
    // every 100 ms (100 ticks) even when nothing is due.
    std::thread::sleep(SETTLE);
    let in_flight = alloc::live_bytes();
    alloc::stop_counting();
    drop(queue);
    // If the driver was mid-wake when the queue was dropped, it held the last
    // engine handle and frees the engine itself; let it finish before the
    // count restarts, or those frees would be subtracted from the next phase.
    std::thread::sleep(SETTLE);

    // Full cycles with a 600 s lease: everything is acked, nothing is due.
    alloc::start_counting();
    let queue = S::build(&setup);
    std::thread::sleep(Duration::from_millis(5));
    let empty_again = alloc::live_bytes();
    let mut deliveries = Vec::with_capacity(1);
    for _ in 0..n {
        queue.send(body.clone());
        deliveries.clear();
        queue.receive_into(1, &mut deliveries);
        if let Some(d) = deliveries.first() {
            queue.ack(S::receipt(d));
        }
    }
    drop(deliveries);
    std::thread::sleep(SETTLE);
    let acked = alloc::live_bytes();
    alloc::stop_counting();
    drop(queue);
    Footprint {
        per_queued: (queued - empty) as f64 / n as f64,
        per_in_flight: (in_flight - empty) as f64 / n as f64,
        per_acked_within_lease: (acked - empty_again) as f64 / n as f64,
    }
}
