//! Extension: many leases renewed at a high rate while others run out. The
//! cost of an extend, and the cost of an expiry with and without the
//! renewals going on (their ratio shows whether renewals slow expiry).
//!
//! `ManualClock`, one shard: `expiring` leases have deadlines spread over
//! `steps` milliseconds; `kept` leases of 10 ms are all extended by another
//! 10 ms every millisecond, so they never run out, and their timer entries
//! keep surfacing and being rescheduled (lazy rescheduling) among the expiries.

use std::time::{Duration, Instant};

use leaseq::ManualClock;
use leaseq_bench::{Setup, Subject};
use serde_json::{Value, json};

use super::payload;

const STEP: Duration = Duration::from_millis(1);
const KEPT_LEASE: Duration = Duration::from_millis(10);

/// What one extension run measured.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Renewals {
    pub(crate) ns_per_extend: f64,
    pub(crate) ns_per_expiry: f64,
    pub(crate) ns_per_expiry_alone: f64,
}

impl Renewals {
    pub(crate) fn to_json(self) -> Value {
        json!({"ns_per_extend": self.ns_per_extend, "ns_per_expiry_with_renewals": self.ns_per_expiry,
               "ns_per_expiry_alone": self.ns_per_expiry_alone,
               "expiry_slowdown": self.ns_per_expiry / self.ns_per_expiry_alone})
    }
}

fn one<S: Subject>(kept: usize, expiring: usize, steps: usize) -> (f64, f64) {
    let clock = ManualClock::new();
    let lease = STEP * (steps as u32 + 10);
    let setup = Setup {
        shards: 1,
        capacity: kept + expiring + 1024,
        visibility: lease,
        clock: Some(clock.clone()),
        ..Setup::default()
    };
    let queue = S::build(&setup);
    let body = payload(16);
    for _ in 0..kept + expiring {
        assert!(queue.send(body.clone()), "the extension queue has room");
    }
    // Expiring leases: deadlines spread over `steps` ms, starting at `lease`.
    let chunk = expiring.div_ceil(steps);
    let mut leased = 0;
    while leased < expiring {
        let mut in_chunk = 0;
        while in_chunk < chunk && leased < expiring {
            let got = queue.receive_for((chunk - in_chunk).min(1024).min(expiring - leased), lease).len();
            in_chunk += got;
            leased += got;
        }
        clock.advance(STEP);
    }
    let mut receipts = Vec::with_capacity(kept);
    while receipts.len() < kept {
        let k = (kept - receipts.len()).min(1024);
        receipts.extend(queue.receive_for(k, KEPT_LEASE).iter().map(|d| S::receipt(d).clone()));
    }
    // Run until every expiring lease is due: fire, renew, step.
    let (mut expiry_time, mut extend_time, mut extends, mut rounds) = (Duration::ZERO, Duration::ZERO, 0usize, 0usize);
    let until = lease.as_nanos() as u64 + (steps as u64 + 1) * STEP.as_nanos() as u64;
    while queue.now() < until {
        let started = Instant::now();
        drop(queue.receive_for(1, Duration::from_secs(3600)));
        expiry_time += started.elapsed();
        let started = Instant::now();
        for r in &receipts {
            extends += usize::from(queue.extend(r, KEPT_LEASE));
        }
        extend_time += started.elapsed();
        rounds += 1;
        // A moving manual clock applies the engine's due expiries: that work
        // belongs to the expiry figure.
        let started = Instant::now();
        clock.advance(STEP);
        expiry_time += started.elapsed();
    }
    assert_eq!(extends, receipts.len() * rounds, "every renewal is accepted");
    let ns_per_extend = if extends == 0 { 0.0 } else { extend_time.as_secs_f64() * 1e9 / extends as f64 };
    (ns_per_extend, expiry_time.as_secs_f64() * 1e9 / expiring as f64)
}

/// Runs with renewals and without, on a fresh `S` each.
pub(crate) fn run<S: Subject>(kept: usize, expiring: usize, steps: usize) -> Renewals {
    let (ns_per_extend, ns_per_expiry) = one::<S>(kept, expiring, steps);
    let (_, ns_per_expiry_alone) = one::<S>(0, expiring, steps);
    Renewals { ns_per_extend, ns_per_expiry, ns_per_expiry_alone }
}
