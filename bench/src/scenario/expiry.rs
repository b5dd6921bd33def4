//! Expiry: N leases in flight run out, at one deadline or spread over 100
//! deadlines a millisecond apart; the cost per expiry must not grow with N.
//!
//! The firing part runs on a `ManualClock` (deterministic: the clock jumps to
//! the deadline and one `receive(1)`, which applies due timers, is timed), on
//! one shard so that one receive applies all of them, and in steady state: a
//! first round of leasing and expiring warms the buffers, the second is timed.
//! With one deadline the engine's timer entries are still in its inbox when
//! the clock jumps (nothing was due before), so they go straight to firing;
//! the `Wheel` kind first files them in the timing wheel, as the system
//! clock's driver does every tick, so the firing includes the wheel's
//! cascade. The delay part runs on the system clock: a consumer polls while
//! leases run out and records how long after its deadline each message was
//! received again. The far-lease part holds leases past the wheel's range
//! (250 days) and measures what they cost an idle engine and how late they
//! make unrelated short leases.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use leaseq::ManualClock;
use leaseq_bench::{Setup, Subject};
use serde_json::{Value, json};

use super::payload;

/// Leases long enough that nothing re-leased during a measurement expires.
const LEASE: Duration = Duration::from_secs(1);
const STEPS: usize = 100;
const STEP: Duration = Duration::from_millis(1);

/// When the leases of one measurement run out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deadlines {
    /// All at one deadline, fired from where the leases put their entries.
    Same,
    /// In `STEPS` groups a millisecond apart.
    Spread,
    /// All at one deadline, with the entries filed in the timing wheel first.
    Wheel,
}

impl Deadlines {
    pub(crate) const ALL: [Deadlines; 3] = [Deadlines::Same, Deadlines::Spread, Deadlines::Wheel];

    /// The name in the JSON (`points[].deadlines`).
    pub(crate) fn key(self) -> &'static str {
        match self {
            Deadlines::Same => "same",
            Deadlines::Spread => "spread",
            Deadlines::Wheel => "wheel",
        }
    }

    /// The words in the table.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Deadlines::Same => "same deadline",
            Deadlines::Spread => "spread deadline",
            Deadlines::Wheel => "same deadline, filed in the wheel",
        }
    }
}

/// Moves the engine's timer entries of leases just made into its wheel: a
/// probe lease of one step, taken and acked before the others, falls due
/// when the clock moves two steps, and applying it drains the timer inbox.
/// The baseline's heap already holds every deadline; the same clock move
/// costs it nothing. Returns how far the clock moved.
fn file_in_wheel(clock: &ManualClock) -> Duration {
    clock.advance(2 * STEP);
    2 * STEP
}

/// The probe of `file_in_wheel`: one message leased for one step and acked.
fn take_probe<S: Subject>(queue: &S) {
    assert!(queue.send(payload(16)), "the expiry queue has room for the probe");
    let probe = queue.receive_for(1, STEP);
    assert_eq!(probe.len(), 1, "a message was ready for the probe");
    queue.ack(S::receipt(&probe[0]));
}

/// One firing measurement.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Firing {
    pub(crate) in_flight: usize,
    pub(crate) ns_per_expiry: f64,
    pub(crate) expirations_per_s: f64,
}

impl Firing {
    /// The run with the median cost.
    pub(crate) fn median(runs: &[Firing]) -> Firing {
        let mut sorted = runs.to_vec();
        sorted.sort_by(|a, b| a.ns_per_expiry.total_cmp(&b.ns_per_expiry));
        sorted[sorted.len() / 2]
    }

    pub(crate) fn to_json(self) -> Value {
        json!({"in_flight": self.in_flight, "ns_per_expiry": self.ns_per_expiry,
               "expirations_per_s": self.expirations_per_s})
    }
}

fn build<S: Subject>(n: usize) -> (ManualClock, S) {
    let clock = ManualClock::new();
    let setup =
        Setup { shards: 1, capacity: n + 1024, visibility: LEASE, clock: Some(clock.clone()), ..Setup::default() };
    let queue = S::build(&setup);
    let body = payload(16);
    let mut left = n;
    while left > 0 {
        let k = left.min(1024);
        assert_eq!(queue.send_batch(vec![body.clone(); k]), k, "the expiry queue has room for N");
        left -= k;
    }
    (clock, queue)
}

/// Leases every ready message (up to `n`), at one time or in `STEPS` chunks
/// a millisecond apart; returns how many it leased.
fn lease_all<S: Subject>(clock: &ManualClock, queue: &S, n: usize, spread: bool) -> usize {
    let chunk = if spread { n.div_ceil(STEPS) } else { n };
    let (mut leased, mut in_chunk) = (0, 0);
    loop {
        let k = (n - leased).min(1024).min(chunk - in_chunk);
        let got = if k == 0 { 0 } else { queue.receive(k).len() };
        leased += got;
        in_chunk += got;
        if in_chunk == chunk || got == 0 {
            in_chunk = 0;
            if spread {
                clock.advance(STEP);
            }
        }
        if got == 0 || leased == n {
            return leased;
        }
    }
}

/// Runs the clock over the deadlines of leases just made by `lease_all` and
/// times the clock moves together with the receives that observe them: the
/// engine applies due expiries when a manual clock moves (so no operation on
/// any queue can see a lease that is over but not yet expired), the baseline
/// in its next receive, and either way the work is inside the timed region.
fn fire<S: Subject>(clock: &ManualClock, queue: &S, spread: bool, moved: Duration) -> Duration {
    let timed = |by: Duration| {
        let started = Instant::now();
        clock.advance(by);
        let got = queue.receive(1);
        let elapsed = started.elapsed();
        drop(got);
        elapsed
    };
    if spread {
        // The first chunk was leased STEPS ms ago (the fill moved the clock).
        let mut total = timed(LEASE - STEP * STEPS as u32);
        for _ in 1..STEPS {
            total += timed(STEP);
        }
        total
    } else {
        timed(LEASE - moved)
    }
}

/// Expiries timed per trial at least: a small N is timed over several rounds,
/// not as one firing of a few dozen microseconds (where one cold cache line
/// or page fault would be a visible share of the figure).
const MIN_TIMED_EXPIRIES: usize = 100_000;

/// Times the expiry of `n` in-flight leases in steady state: one round of
/// leasing and expiring warms every buffer the timers use (as a running
/// queue has), then enough rounds for `MIN_TIMED_EXPIRIES` are timed (only
/// the firing of each, not the leasing).
pub(crate) fn firing<S: Subject>(n: usize, deadlines: Deadlines) -> Firing {
    let (clock, queue) = build::<S>(n);
    let spread = deadlines == Deadlines::Spread;
    // One round: lease all (after the probe, for the wheel), file, fire.
    let round = |timed: bool| {
        if deadlines == Deadlines::Wheel {
            take_probe(&queue);
        }
        let leased = lease_all(&clock, &queue, n, spread);
        let moved = if deadlines == Deadlines::Wheel { file_in_wheel(&clock) } else { Duration::ZERO };
        let elapsed = fire(&clock, &queue, spread, moved);
        (leased, if timed { elapsed.as_secs_f64() } else { 0.0 })
    };
    round(false);
    let rounds = (MIN_TIMED_EXPIRIES / n.max(1)).max(1);
    let (mut leased, mut seconds) = (0, 0.0);
    for _ in 0..rounds {
        let (l, s) = round(true);
        leased += l;
        seconds += s;
    }
    drop(queue);
    Firing {
        in_flight: leased / rounds,
        ns_per_expiry: seconds * 1e9 / leased as f64,
        expirations_per_s: leased as f64 / seconds,
    }
}

/// Leases of the far-lease part: past the timing wheel's range at the default
/// 1 ms tick (about 208 days), within the one-year limit on durations.
const FAR: Duration = Duration::from_secs(250 * 24 * 3600);
/// The short leases timed beside them.
const SHORT: Duration = Duration::from_millis(2);

/// Real clock: `far` leases of 250 days are held while the queue is otherwise
/// idle. Measures the CPU the whole process uses over an idle second (the
/// engine's driver wakes ten times a second), then how late each of `short`
/// 2 ms leases of an unrelated message is received again by a polling
/// consumer. Neither may grow with `far`: leases beyond the wheel's range
/// once cost every timer pass a walk over all of them.
pub(crate) fn far_leases<S: Subject>(far: usize, short: usize) -> Value {
    let year = Duration::from_secs(365 * 24 * 3600);
    let setup = Setup { shards: 1, capacity: far + 1024, max_lease: year, ..Setup::default() };
    let queue = S::build(&setup);
    let body = payload(16);
    let mut left = far;
    while left > 0 {
        let k = left.min(1024);
        assert_eq!(queue.send_batch(vec![body.clone(); k]), k, "the far-lease queue has room");
        left -= k;
    }
    let mut held = 0;
    while held < far {
        let got = queue.receive_for((far - held).min(1024), FAR).len();
        assert!(got > 0, "every far message is ready");
        held += got;
    }
    // The driver moves the entries from its inbox into the wheel first.
    std::thread::sleep(Duration::from_millis(300));
    let (cpu_before, started) = (super::process_cpu_ns(), Instant::now());
    std::thread::sleep(Duration::from_secs(1));
    let idle_cpu_percent = match (cpu_before, super::process_cpu_ns()) {
        (Some(before), Some(after)) => {
            Some(after.saturating_sub(before) as f64 / started.elapsed().as_nanos() as f64 * 100.0)
        }
        _ => None,
    };
    let mut late = hdrhistogram::Histogram::<u64>::new(3).expect("valid histogram");
    let give_up = Instant::now() + Duration::from_secs(30);
    for _ in 0..short {
        assert!(queue.send(body.clone()), "room for the short lease");
        let first = queue.receive_for(1, SHORT);
        let Some(first) = first.first() else { break };
        let (id, deadline) = (S::id(first), S::deadline(first));
        while Instant::now() < give_up {
            let again = queue.receive_for(1, Duration::from_secs(60));
            if let Some(d) = again.first().filter(|d| S::id(d) == id) {
                late.record(queue.now().saturating_sub(deadline).max(1)).ok();
                queue.ack(S::receipt(d));
                break;
            }
        }
    }
    json!({
        "far_leases": far, "far_lease_days": FAR.as_secs() / 86_400, "short_lease_ms": SHORT.as_millis() as u64,
        "idle_cpu_percent": idle_cpu_percent, "short_leases_timed": late.len(),
        "late_p50_ns": late.value_at_quantile(0.5), "late_p99_ns": late.value_at_quantile(0.99),
    })
}

/// Real clock: `n` leases of 200..220 ms (long enough that leasing them all
/// ends before the first deadline, even on a loaded machine) run out while one
/// consumer polls; the delay from each deadline to the message's next
/// receive, in nanoseconds (p50, p99, max).
pub(crate) fn delay<S: Subject>(n: usize) -> Value {
    let setup = Setup { shards: 1, capacity: n + 1024, ..Setup::default() };
    let queue = S::build(&setup);
    let body = payload(16);
    for _ in 0..n {
        queue.send(body.clone());
    }
    let mut deadlines: HashMap<u64, u64> = HashMap::with_capacity(n);
    let per_ms = n.div_ceil(20);
    let mut leased = 0;
    while leased < n {
        // Deadlines 200..220 ms from now, in 20 groups.
        let ms = (leased / per_ms) as u64;
        for d in queue.receive_for(per_ms.min(1024).min(n - leased), Duration::from_millis(200 + ms)) {
            deadlines.insert(S::id(&d), S::deadline(&d));
            leased += 1;
        }
    }
    let first_deadline = deadlines.values().copied().min().unwrap_or(0);
    let leased_in_time = queue.now() < first_deadline;
    let mut delays = hdrhistogram::Histogram::<u64>::new(3).expect("valid histogram");
    let give_up = Instant::now() + Duration::from_secs(10);
    while !deadlines.is_empty() && Instant::now() < give_up {
        for d in queue.receive_for(64, Duration::from_secs(60)) {
            let now = queue.now();
            if let Some(deadline) = deadlines.remove(&S::id(&d)) {
                delays.record(now.saturating_sub(deadline).max(1)).ok();
            }
        }
    }
    json!({
        "messages": n, "missing": deadlines.len(), "leased_before_first_deadline": leased_in_time,
        "p50_ns": delays.value_at_quantile(0.5), "p99_ns": delays.value_at_quantile(0.99),
        "max_ns": delays.max(),
    })
}
