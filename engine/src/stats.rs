//! Lease-pressure observability: counters and latency distributions.
//!
//! Invariant: hot-path recording touches only the recording shard's own
//! cache-padded counters (no shared line between shards), and a shard's owner
//! thread (the first to record there) updates its own copy with a plain load
//! and store, every other thread a second copy with `fetch_add`, so each copy
//! has either a single writer or only atomic read-modify-writes. `QueueStats`
//! sums copies and shards on read without stopping anyone. A gauge read
//! concurrently with operations may be momentarily behind, but the read order
//! (outflows before inflows, each Acquire against Release increments) keeps
//! every derived value between zero and what actually happened.

use std::fmt;
use std::time::Duration;

use crossbeam_utils::CachePadded;
use hdrhistogram::Histogram;

use crate::sync::{AtomicU64, OnceLock, Ordering, SampleCount, StatCountUsize, thread_number};

/// The monotonic counters each shard keeps.
///
/// The hot transitions each touch one counter, not an event counter plus a
/// gauge flow: a send straight to ready is `SentReady` (the event *and* the
/// ready inflow), a receive is `Received` (the ready outflow *and* the
/// in-flight inflow), an ack of a lease still in flight is `AckedInFlight`
/// (the event *and* the in-flight outflow). The flow counters below count
/// only the other, rarer ways in and out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub(crate) enum Counter {
    /// Messages accepted (send, dead-letter move, redrive) straight into ready.
    SentReady,
    /// Messages accepted with a delay.
    SentDelayed,
    /// Deliveries (every successful receive of one message).
    Received,
    /// Deliveries with a delivery count above one.
    Redelivered,
    /// Acks of an attempt still in flight (on time, or late before its expiry
    /// was applied).
    AckedInFlight,
    /// Acks of an attempt whose expiry was already applied (`LateAck::Accept`).
    AckedAfterExpiry,
    /// Acks accepted after the lease's deadline (of either kind above).
    LateAcks,
    /// Acks refused as stale.
    StaleAcks,
    /// Acks refused as expired (`LateAck::Reject`).
    ExpiredAcks,
    /// Leases that ran out.
    Expired,
    /// Successful extensions.
    Extensions,
    /// Extensions refused (stale, expired or past the cap).
    ExtensionsRefused,
    /// Releases (nacks).
    Released,
    /// Messages moved from this queue to its dead-letter queue.
    DeadLettered,
    /// Messages removed by purge.
    Purged,
    /// Messages moved from this queue to another by redrive.
    RedrivenOut,
    /// Messages that became ready other than by a send (maturity, expiry,
    /// release).
    ReadyIn,
    /// Messages that stopped being ready other than by a receive (purge, ack
    /// after expiry, redrive out).
    ReadyOut,
    /// Messages that became delayed other than by a send (backoff).
    DelayedIn,
    /// Messages that stopped being delayed.
    DelayedOut,
    /// Attempts that ended other than by an ack in flight (expiry, release,
    /// dead-letter, purge).
    InFlightOut,
    /// Expired or released messages kept on this queue because the dead-letter
    /// queue was full.
    DeadLetterOverflow,
    /// Ready messages a redrive left on this queue because they were above
    /// the target queue's `max_payload`.
    RedriveTooLarge,
    /// Messages dropped because they outlived the queue's retention.
    RetentionDropped,
    /// Messages restored in flight (a replicated engine's failover with
    /// leases in force, `restore_leased`): sent and in flight at once.
    RestoredInFlight,
}

const COUNTERS: usize = Counter::RestoredInFlight as usize + 1;

/// The distributions each shard keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub(crate) enum Distribution {
    /// Receive to ack, nanoseconds.
    Processing,
    /// Send to first receive, nanoseconds.
    TimeInQueue,
    /// Lease time left at ack, nanoseconds.
    LeaseLeftAtAck,
}

const DISTRIBUTIONS: usize = 3;

/// A lock-free log-linear histogram: 32 sub-buckets per power of two (a
/// bucket's midpoint is within 1.6% of any value in it), converted into an
/// HdrHistogram on read.
pub(crate) struct AtomicHistogram {
    buckets: Box<[SampleCount]>,
}

const SUB_BITS: u32 = 5;
const SUB_BUCKETS: usize = 1 << SUB_BITS;
const BUCKETS: usize = (64 - SUB_BITS as usize + 1) * SUB_BUCKETS;

impl fmt::Debug for AtomicHistogram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AtomicHistogram(..)")
    }
}

impl AtomicHistogram {
    pub(crate) fn new() -> Self {
        AtomicHistogram { buckets: (0..BUCKETS).map(|_| SampleCount::new(0)).collect() }
    }

    fn bucket_of(value: u64) -> usize {
        if value < SUB_BUCKETS as u64 {
            return value as usize;
        }
        let magnitude = 63 - value.leading_zeros(); // >= SUB_BITS
        let shift = magnitude - SUB_BITS;
        let sub = (value >> shift) as usize & (SUB_BUCKETS - 1);
        (shift as usize + 1) * SUB_BUCKETS + sub
    }

    /// The middle of a bucket, the value reported for its samples.
    fn representative(bucket: usize) -> u64 {
        if bucket < SUB_BUCKETS {
            return bucket as u64;
        }
        let shift = (bucket / SUB_BUCKETS - 1) as u32;
        let sub = (bucket % SUB_BUCKETS) as u64;
        let low = (SUB_BUCKETS as u64 + sub) << shift;
        low + ((1u64 << shift) >> 1)
    }

    /// Counts a sample; for any thread (an atomic read-modify-write).
    fn record(&self, value: u64) {
        // Relaxed: a sample is a count, ordered with nothing else.
        self.buckets[Self::bucket_of(value)].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a sample; only for this histogram's single writer (a plain
    /// load and store, no locked instruction).
    fn record_single_writer(&self, value: u64) {
        let bucket = &self.buckets[Self::bucket_of(value)];
        // Relaxed: as above; the load sees our own last store.
        bucket.store(bucket.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    fn add_to(&self, into: &mut Histogram<u64>) {
        for (bucket, count) in self.buckets.iter().enumerate() {
            let n = count.load(Ordering::Relaxed);
            if n > 0 {
                // Saturating record never fails for u64 histograms that auto-resize.
                let _ = into.record_n(Self::representative(bucket).max(1), n);
            }
        }
    }
}

/// One copy of a shard's counters and distributions.
#[derive(Debug)]
struct Cells {
    counters: [AtomicU64; COUNTERS],
    distributions: [AtomicHistogram; DISTRIBUTIONS],
}

impl Cells {
    fn new() -> Self {
        Cells { counters: std::array::from_fn(|_| AtomicU64::new(0)), distributions: empty_histograms() }
    }
}

/// One shard's counters and distributions, on their own cache lines.
///
/// The thread that records first becomes the shard's owner for good (thread
/// numbers are never reused, so no other thread can ever match it) and writes
/// `owned` without locked instructions; in the usual layout, one thread per
/// home shard, that is nearly every update. Every other thread (a stealing
/// receiver, an ack from another thread, the driver's expiries) adds to
/// `shared` atomically; its histograms are allocated when first needed.
#[derive(Debug)]
pub(crate) struct ShardStats {
    /// `thread_number() + 1` of the owner, 0 before anyone recorded. Only its
    /// atomicity matters (it picks a copy, it orders nothing): a std atomic
    /// under loom too. Read on every update by every thread, so it gets a
    /// cache line of its own, as the shared counters do: neither may share a
    /// line with the counters the owner writes.
    owner: CachePadded<StatCountUsize>,
    owned: Cells,
    shared_counters: CachePadded<[AtomicU64; COUNTERS]>,
    shared_distributions: OnceLock<Box<[AtomicHistogram; DISTRIBUTIONS]>>,
}

impl ShardStats {
    pub(crate) fn new() -> Self {
        ShardStats {
            owner: CachePadded::new(StatCountUsize::new(0)),
            owned: Cells::new(),
            shared_counters: CachePadded::new(std::array::from_fn(|_| AtomicU64::new(0))),
            shared_distributions: OnceLock::new(),
        }
    }

    /// Whether the calling thread owns this shard's `owned` copy, claiming it
    /// if nobody has yet.
    #[inline]
    fn is_owner(&self) -> bool {
        let me = thread_number() + 1;
        let owner = self.owner.load(Ordering::Relaxed);
        owner == me || (owner == 0 && self.owner.compare_exchange(0, me, Ordering::Relaxed, Ordering::Relaxed).is_ok())
    }

    /// Adds `n` to a counter. Release, so that a reader who Acquire-loads this
    /// counter also sees the inflow increments that happened before it (see
    /// the module invariant).
    #[inline]
    pub(crate) fn add(&self, counter: Counter, n: u64) {
        if self.is_owner() {
            let cell = &self.owned.counters[counter as usize];
            // The owner is this copy's only writer: its Relaxed load sees its
            // own last store, and the store publishes like a `fetch_add`.
            cell.store(cell.load(Ordering::Relaxed) + n, COUNTER_WRITE);
        } else {
            self.shared_counters[counter as usize].fetch_add(n, COUNTER_WRITE);
        }
    }

    #[inline]
    pub(crate) fn record(&self, distribution: Distribution, nanos: u64) {
        if self.is_owner() {
            self.owned.distributions[distribution as usize].record_single_writer(nanos);
        } else {
            let shared = self.shared_distributions.get_or_init(|| Box::new(empty_histograms()));
            shared[distribution as usize].record(nanos);
        }
    }

    pub(crate) fn get(&self, counter: Counter) -> u64 {
        self.get_at(counter as usize)
    }

    fn get_at(&self, index: usize) -> u64 {
        self.owned.counters[index].load(COUNTER_READ) + self.shared_counters[index].load(COUNTER_READ)
    }

    fn add_distribution_to(&self, distribution: Distribution, into: &mut Histogram<u64>) {
        self.owned.distributions[distribution as usize].add_to(into);
        if let Some(shared) = self.shared_distributions.get() {
            shared[distribution as usize].add_to(into);
        }
    }
}

fn empty_histograms() -> [AtomicHistogram; DISTRIBUTIONS] {
    std::array::from_fn(|_| AtomicHistogram::new())
}

/// Counter increments: Release (see `ShardStats::add`).
#[cfg(not(leaseq_mutant = "relaxed_stats"))]
const COUNTER_WRITE: Ordering = Ordering::Release;
/// Counter reads: Acquire (see `CounterSums::read`).
#[cfg(not(leaseq_mutant = "relaxed_stats"))]
const COUNTER_READ: Ordering = Ordering::Acquire;
// Mutant (loom-tests only): counters ordered with nothing, so a reader can see
// an outflow without the inflow that preceded it.
#[cfg(leaseq_mutant = "relaxed_stats")]
const COUNTER_WRITE: Ordering = Ordering::Relaxed;
#[cfg(leaseq_mutant = "relaxed_stats")]
const COUNTER_READ: Ordering = Ordering::Relaxed;

/// Sums counters across shards in the order the gauges need.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct CounterSums([u64; COUNTERS]);

impl CounterSums {
    /// Reads in three tiers: in-flight and delayed outflows, then ready
    /// outflows (one of which, `Received`, is also the in-flight inflow), then
    /// everything else. Any outflow seen was preceded (in happens-before) by
    /// its inflow, which the later tiers therefore see too, so no gauge goes
    /// negative.
    pub(crate) fn read<'a>(shards: impl Iterator<Item = &'a ShardStats> + Clone) -> Self {
        const TIERS: [&[Counter]; 2] = [
            &[Counter::AckedInFlight, Counter::InFlightOut, Counter::DelayedOut],
            &[Counter::Received, Counter::ReadyOut],
        ];
        let mut sums = [0u64; COUNTERS];
        let mut read = [false; COUNTERS];
        for tier in TIERS {
            for &c in tier {
                sums[c as usize] = shards.clone().map(|s| s.get(c)).sum();
                read[c as usize] = true;
            }
        }
        for (index, sum) in sums.iter_mut().enumerate() {
            if !read[index] {
                *sum = shards.clone().map(|s| s.get_at(index)).sum();
            }
        }
        CounterSums(sums)
    }

    pub(crate) fn get(&self, counter: Counter) -> u64 {
        self.0[counter as usize]
    }

    fn sum(&self, counters: &[Counter]) -> u64 {
        counters.iter().map(|c| self.get(*c)).sum()
    }

    fn gauge(&self, inflows: &[Counter], outflows: &[Counter]) -> u64 {
        let (inflow, outflow) = (self.sum(inflows), self.sum(outflows));
        // The read order in `read` makes a negative gauge impossible; checked
        // where it costs nothing that matters (debug builds, the loom models,
        // whose stats model relies on this assertion).
        #[cfg(any(debug_assertions, loom))]
        assert!(outflow <= inflow, "a gauge read negative: {outflow} out, {inflow} in");
        inflow.saturating_sub(outflow)
    }
}

/// A snapshot of one queue's lease pressure.
#[derive(Clone)]
#[non_exhaustive]
pub struct QueueStats {
    /// Messages eligible for receive now.
    pub ready: u64,
    /// Messages waiting for a send delay or retry backoff to pass.
    pub delayed: u64,
    /// Messages leased to consumers.
    pub in_flight: u64,
    /// Messages waiting on this queue's dead-letter queue (0 if it has none).
    pub dead_letter_depth: u64,
    /// Age of the oldest ready message (since it was sent), if any is ready.
    pub oldest_ready_age: Option<Duration>,
    /// Messages accepted by send or moved in by redrive.
    pub sent: u64,
    /// Deliveries.
    pub received: u64,
    /// Deliveries of a message that had been delivered before.
    pub redelivered: u64,
    /// Acks accepted, on time or late.
    pub acked: u64,
    /// Acks accepted after the lease's deadline (nobody else held it yet).
    pub late_acks: u64,
    /// Acks refused because the receipt was stale.
    pub stale_acks: u64,
    /// Acks refused as expired (`LateAck::Reject`).
    pub expired_acks: u64,
    /// Leases that ran out.
    pub expired: u64,
    /// Successful lease extensions.
    pub extensions: u64,
    /// Extensions refused (stale, expired, past the cap).
    pub extensions_refused: u64,
    /// Releases (nacks).
    pub released: u64,
    /// Messages moved to the dead-letter queue.
    pub dead_lettered: u64,
    /// Messages removed by purge.
    pub purged: u64,
    /// Failed attempts kept on this queue because the dead-letter queue was
    /// full (or, for queues restored from an old log, could not take the
    /// payload).
    pub dead_letter_overflow: u64,
    /// Messages moved from this queue to another by redrive.
    pub redriven_out: u64,
    /// Ready messages a redrive left on this queue because they were above
    /// the target's `max_payload` (each refusal counts; the message stays).
    pub redrive_too_large: u64,
    /// Messages dropped because they outlived the queue's retention
    /// (`QueueConfig::retention`).
    pub retention_dropped: u64,
    /// The queue's configured default visibility timeout.
    pub visibility_timeout: Duration,
    /// Receive to ack, nanoseconds.
    pub processing_time: Histogram<u64>,
    /// Send to first receive, nanoseconds.
    pub time_in_queue: Histogram<u64>,
    /// Lease time left when the ack arrived, nanoseconds (0 for late acks).
    pub lease_left_at_ack: Histogram<u64>,
}

/// Every field. The destructuring names them all, so a field added to
/// `QueueStats` fails to compile here until it is printed too.
impl fmt::Debug for QueueStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let QueueStats {
            ready,
            delayed,
            in_flight,
            dead_letter_depth,
            oldest_ready_age,
            sent,
            received,
            redelivered,
            acked,
            late_acks,
            stale_acks,
            expired_acks,
            expired,
            extensions,
            extensions_refused,
            released,
            dead_lettered,
            purged,
            dead_letter_overflow,
            redriven_out,
            redrive_too_large,
            retention_dropped,
            visibility_timeout,
            processing_time,
            time_in_queue,
            lease_left_at_ack,
        } = self;
        f.debug_struct("QueueStats")
            .field("ready", ready)
            .field("delayed", delayed)
            .field("in_flight", in_flight)
            .field("dead_letter_depth", dead_letter_depth)
            .field("oldest_ready_age", oldest_ready_age)
            .field("sent", sent)
            .field("received", received)
            .field("redelivered", redelivered)
            .field("acked", acked)
            .field("late_acks", late_acks)
            .field("stale_acks", stale_acks)
            .field("expired_acks", expired_acks)
            .field("expired", expired)
            .field("extensions", extensions)
            .field("extensions_refused", extensions_refused)
            .field("released", released)
            .field("dead_lettered", dead_lettered)
            .field("purged", purged)
            .field("dead_letter_overflow", dead_letter_overflow)
            .field("redriven_out", redriven_out)
            .field("redrive_too_large", redrive_too_large)
            .field("retention_dropped", retention_dropped)
            .field("visibility_timeout", visibility_timeout)
            .field("processing_time", &Summary(processing_time))
            .field("time_in_queue", &Summary(time_in_queue))
            .field("lease_left_at_ack", &Summary(lease_left_at_ack))
            .finish()
    }
}

/// A histogram of nanoseconds as a person reads it: sample count, p50, p99,
/// p99.9 and max.
struct Summary<'h>(&'h Histogram<u64>);

impl fmt::Debug for Summary<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Summary<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let h = self.0;
        if h.is_empty() {
            return write!(f, "no samples");
        }
        let at = |p: f64| Duration::from_nanos(h.value_at_percentile(p));
        write!(
            f,
            "{} samples, p50 {:?}, p99 {:?}, p99.9 {:?}, max {:?}",
            h.len(),
            at(50.0),
            at(99.0),
            at(99.9),
            Duration::from_nanos(h.max())
        )
    }
}

/// A summary to read at a glance: the gauges, then the counters grouped by
/// what they say about the lease, then the three distributions.
impl fmt::Display for QueueStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ready {}, delayed {}, in flight {}, on the dead-letter queue {}",
            self.ready, self.delayed, self.in_flight, self.dead_letter_depth
        )?;
        match self.oldest_ready_age {
            Some(age) => writeln!(f, ", oldest ready {age:?}")?,
            None => writeln!(f)?,
        }
        writeln!(
            f,
            "sent {}, received {} ({} redelivered), acked {} ({} late), refused acks: {} stale, {} expired",
            self.sent, self.received, self.redelivered, self.acked, self.late_acks, self.stale_acks, self.expired_acks
        )?;
        write!(
            f,
            "leases: {} expired, {} released, {} extended ({} refused); visibility timeout {:?}",
            self.expired, self.released, self.extensions, self.extensions_refused, self.visibility_timeout
        )?;
        match self.suggested_visibility() {
            Some(suggested) => writeln!(f, ", suggested {suggested:?}")?,
            None => writeln!(f)?,
        }
        writeln!(
            f,
            "dead-lettered {} ({} kept here: dead-letter queue full), purged {}, redriven out {} ({} too large), \
             past retention {}",
            self.dead_lettered,
            self.dead_letter_overflow,
            self.purged,
            self.redriven_out,
            self.redrive_too_large,
            self.retention_dropped
        )?;
        writeln!(f, "processing time (receive to ack): {}", Summary(&self.processing_time))?;
        writeln!(f, "time in queue (send to first receive): {}", Summary(&self.time_in_queue))?;
        write!(f, "lease left at ack: {}", Summary(&self.lease_left_at_ack))
    }
}

/// Margin `suggested_visibility` puts on the measured p99 processing time.
pub const SUGGESTION_MARGIN: f64 = 1.5;
/// Fewest processing-time samples `suggested_visibility` needs to answer.
pub const SUGGESTION_MIN_SAMPLES: u64 = 20;

impl QueueStats {
    pub(crate) fn assemble<'a>(
        shards: impl Iterator<Item = &'a ShardStats> + Clone,
        dead_letter_depth: u64,
        oldest_ready_age: Option<Duration>,
        visibility_timeout: Duration,
    ) -> Self {
        let sums = CounterSums::read(shards.clone());
        let histogram = |d: Distribution| {
            let mut h = Histogram::<u64>::new(3).expect("3 significant figures is a valid precision");
            for shard in shards.clone() {
                shard.add_distribution_to(d, &mut h);
            }
            h
        };
        use Counter::*;
        let ready = sums.gauge(&[SentReady, ReadyIn], &[Received, ReadyOut]);
        QueueStats {
            ready,
            delayed: sums.gauge(&[SentDelayed, DelayedIn], &[DelayedOut]),
            // Every delivery starts an attempt, so `Received` is the inflow
            // (with the leases a failover restored).
            in_flight: sums.gauge(&[Received, RestoredInFlight], &[AckedInFlight, InFlightOut]),
            dead_letter_depth,
            oldest_ready_age: if ready > 0 { oldest_ready_age } else { None },
            sent: sums.sum(&[SentReady, SentDelayed, RestoredInFlight]),
            received: sums.get(Counter::Received),
            redelivered: sums.get(Counter::Redelivered),
            acked: sums.sum(&[AckedInFlight, AckedAfterExpiry]),
            late_acks: sums.get(Counter::LateAcks),
            stale_acks: sums.get(Counter::StaleAcks),
            expired_acks: sums.get(Counter::ExpiredAcks),
            expired: sums.get(Counter::Expired),
            extensions: sums.get(Counter::Extensions),
            extensions_refused: sums.get(Counter::ExtensionsRefused),
            released: sums.get(Counter::Released),
            dead_lettered: sums.get(Counter::DeadLettered),
            purged: sums.get(Counter::Purged),
            dead_letter_overflow: sums.get(Counter::DeadLetterOverflow),
            redriven_out: sums.get(Counter::RedrivenOut),
            redrive_too_large: sums.get(Counter::RedriveTooLarge),
            retention_dropped: sums.get(Counter::RetentionDropped),
            visibility_timeout,
            processing_time: histogram(Distribution::Processing),
            time_in_queue: histogram(Distribution::TimeInQueue),
            lease_left_at_ack: histogram(Distribution::LeaseLeftAtAck),
        }
    }

    /// A processing-time percentile (receive to ack), if any ack was recorded.
    #[must_use]
    pub fn processing_percentile(&self, percentile: f64) -> Option<Duration> {
        (!self.processing_time.is_empty())
            .then(|| Duration::from_nanos(self.processing_time.value_at_percentile(percentile)))
    }

    /// A visibility timeout sized from measurement, the seeds' rule: the p99
    /// processing time times `SUGGESTION_MARGIN` (1.5), rounded up to a whole
    /// millisecond. `None` until `SUGGESTION_MIN_SAMPLES` acks were measured.
    ///
    /// Processing time is only measured for acked attempts, so a timeout that
    /// is already too short hides the slowest jobs; compare `late_acks` and
    /// `expired` too (or use `Queue::diagnose` when available).
    #[must_use]
    pub fn suggested_visibility(&self) -> Option<Duration> {
        if self.processing_time.len() < SUGGESTION_MIN_SAMPLES {
            return None;
        }
        let p99 = self.processing_time.value_at_percentile(99.0) as f64;
        let nanos = (p99 * SUGGESTION_MARGIN).ceil() as u64;
        let millis = nanos.div_ceil(1_000_000).max(1);
        Some(Duration::from_millis(millis))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_close() {
        let mut last = 0;
        for value in (0..20).chain((5..63).flat_map(|s| [1u64 << s, (1u64 << s) + 12345, (3u64 << s) / 2])) {
            let bucket = AtomicHistogram::bucket_of(value);
            assert!(bucket < BUCKETS);
            let rep = AtomicHistogram::representative(bucket);
            let error = (rep as f64 - value as f64).abs() / (value.max(1) as f64);
            assert!(error <= 1.0 / 64.0 + 1e-9, "value {value} rep {rep}");
            if value >= last {
                last = value;
            }
        }
        assert!(AtomicHistogram::bucket_of(u64::MAX) < BUCKETS);
        for v in 1..10_000u64 {
            assert!(AtomicHistogram::bucket_of(v) >= AtomicHistogram::bucket_of(v - 1));
        }
    }

    #[test]
    fn gauges_come_from_flows() {
        let shards = [ShardStats::new(), ShardStats::new()];
        // 6 sent (one delayed), 1 more became ready again after an expiry.
        shards[0].add(Counter::SentReady, 5);
        shards[1].add(Counter::SentDelayed, 1);
        shards[0].add(Counter::ReadyIn, 1);
        // 3 received, one of them acked and one expired; 1 ready purged.
        shards[1].add(Counter::Received, 3);
        shards[0].add(Counter::AckedInFlight, 1);
        shards[0].add(Counter::InFlightOut, 1);
        shards[1].add(Counter::ReadyOut, 1);
        shards[0].record(Distribution::Processing, 1_000_000);
        let s = QueueStats::assemble(shards.iter(), 0, Some(Duration::from_secs(1)), Duration::from_secs(30));
        assert_eq!((s.ready, s.in_flight, s.delayed), (2, 1, 1));
        assert_eq!((s.sent, s.received, s.acked), (6, 3, 1));
        assert_eq!(s.processing_time.len(), 1);
        let p = s.processing_percentile(50.0).unwrap();
        assert!(p >= Duration::from_micros(940) && p <= Duration::from_micros(1070), "{p:?}");
    }

    /// The owner's plain stores and the other threads' `fetch_add`s land in
    /// different copies, so concurrent recording loses nothing.
    #[test]
    fn owner_and_other_threads_record_concurrently_without_loss() {
        let stats = std::sync::Arc::new(ShardStats::new());
        let per_thread = 50_000u64;
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let stats = stats.clone();
                std::thread::spawn(move || {
                    for i in 0..per_thread {
                        stats.add(Counter::Received, 1);
                        stats.record(Distribution::Processing, 1_000 + i % 7);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(stats.get(Counter::Received), 4 * per_thread);
        let mut h = Histogram::<u64>::new(3).unwrap();
        stats.add_distribution_to(Distribution::Processing, &mut h);
        assert_eq!(h.len(), 4 * per_thread);
        assert_ne!(stats.owner.load(Ordering::Relaxed), 0, "one thread became the owner");
    }

    #[test]
    fn suggestion_needs_samples_and_adds_margin() {
        let shard = ShardStats::new();
        let stats = |s: &ShardStats| QueueStats::assemble(std::iter::once(s), 0, None, Duration::from_secs(30));
        assert_eq!(stats(&shard).suggested_visibility(), None);
        for _ in 0..100 {
            shard.record(Distribution::Processing, 2_000_000_000);
        }
        let suggestion = stats(&shard).suggested_visibility().unwrap();
        assert!(
            suggestion >= Duration::from_millis(2_800) && suggestion <= Duration::from_millis(3_200),
            "{suggestion:?}"
        );
    }
}
