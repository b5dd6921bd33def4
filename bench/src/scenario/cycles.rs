//! Independent cycles: each of T threads loops send, receive(1), ack of its
//! own 16-byte message on one shared queue with a 600 s lease, on the engine,
//! the full-contract baseline and the lean baseline.
//!
//! Invariant: the three queues get the same `Setup` (the engine's queue with
//! its default shard count, one per core), the same thread loop
//! (`scaling::cycles_on`) and the same allocator, so the ratios compare the
//! queues and what each one's contract costs.

use std::time::Duration;

use leaseq_bench::{CycleQueue, Setup};

use super::scaling::{Cycles, cycles_on};

/// The lease of every receive: long enough that none runs out in a trial,
/// so the cycle never includes an expiry.
pub(crate) const LEASE: Duration = Duration::from_secs(600);

/// T threads of independent cycles on `S`; `same_clock` puts the baselines on
/// the engine's clock instead of `Instant`.
pub(crate) fn independent<S: CycleQueue>(threads: usize, duration: Duration, same_clock: bool) -> Cycles {
    let shards = std::thread::available_parallelism().map_or(1, |n| n.get());
    let setup = Setup {
        shards,
        capacity: 1 << 16,
        visibility: LEASE,
        baseline_on_engine_clock: same_clock,
        ..Setup::default()
    };
    cycles_on::<S>(&setup, threads, duration)
}
