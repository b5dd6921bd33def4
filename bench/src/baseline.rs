//! The baseline: the lease queue a competent engineer writes by hand with one
//! `Mutex`, measured beside the engine in every scenario.
//!
//! Invariant: it keeps the engine's semantics for every operation the
//! benchmarks use, so a ratio compares implementations, not contracts:
//!
//! * a slab of slots with generations; a generation bumps when an attempt
//!   starts (receive) and when it ends (ack, release, expiry), so a receipt of
//!   an older attempt is `Stale` and can never complete a newer one;
//! * a `VecDeque` of `(slot, generation)` ready entries, FIFO, stale entries
//!   dropped when popped;
//! * a `BinaryHeap` of `(deadline, slot, generation)` for leases and delays,
//!   with lazy deletion (entries of finished attempts are dropped when they
//!   surface) and lazy rescheduling (an extended lease's entry is pushed again
//!   when its old deadline surfaces);
//! * late acks: an expired attempt may still ack while nobody received the
//!   message again; `extend` is judged against the clock and capped by
//!   `max_lease` from receive; receipts carry the same keyed integrity tag;
//! * the same counters and three latency distributions, as plain integers
//!   under the same mutex.
//!
//! Due timers are applied by every receive (one heap peek when nothing is
//! due), as the engine's receive does. What it leaves out, because no
//! benchmark uses it: dead-letter queues, long polling, redrive and purge.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use leaseq::{Clock, LeaseError, ReceiptError};

/// Where a slot is in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Free,
    Ready,
    Delayed,
    InFlight,
}

#[derive(Debug)]
struct Slot {
    generation: u64,
    phase: Phase,
    /// Entered `Ready`/`Delayed` because the previous attempt's lease ran out.
    expired: bool,
    payload: Bytes,
    id: u64,
    sent_at: u64,
    received_at: u64,
    deadline: u64,
    delivery_count: u32,
}

impl Slot {
    fn new() -> Self {
        Slot {
            generation: 0,
            phase: Phase::Free,
            expired: false,
            payload: Bytes::new(),
            id: 0,
            sent_at: 0,
            received_at: 0,
            deadline: 0,
            delivery_count: 0,
        }
    }
}

/// The counters the engine keeps per shard, kept here once.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct BaselineCounters {
    /// Messages accepted.
    pub sent: u64,
    /// Deliveries.
    pub received: u64,
    /// Deliveries of a message delivered before.
    pub redelivered: u64,
    /// Acks accepted.
    pub acked: u64,
    /// Acks accepted after the deadline.
    pub late_acks: u64,
    /// Acks refused as stale.
    pub stale_acks: u64,
    /// Leases that ran out.
    pub expired: u64,
    /// Successful extensions.
    pub extensions: u64,
    /// Refused extensions.
    pub extensions_refused: u64,
    /// Releases.
    pub released: u64,
    /// Messages ready now.
    pub ready: u64,
    /// Messages delayed now.
    pub delayed: u64,
    /// Messages in flight now.
    pub in_flight: u64,
}

/// A log-linear histogram of plain counts (16 sub-buckets per power of two,
/// the engine's resolution).
#[derive(Debug)]
struct PlainHistogram {
    buckets: Box<[u64]>,
}

impl PlainHistogram {
    fn new() -> Self {
        PlainHistogram { buckets: vec![0; 61 * 16].into_boxed_slice() }
    }

    fn record(&mut self, value: u64) {
        let bucket = if value < 16 {
            value as usize
        } else {
            let magnitude = 63 - value.leading_zeros();
            let shift = magnitude - 4;
            (shift as usize + 1) * 16 + ((value >> shift) as usize & 15)
        };
        self.buckets[bucket] += 1;
    }

    fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }
}

#[derive(Debug)]
struct Inner {
    slots: Vec<Slot>,
    free: Vec<u32>,
    ready: VecDeque<(u32, u64)>,
    timers: BinaryHeap<Reverse<(u64, u32, u64)>>,
    next_id: u64,
    counters: BaselineCounters,
    processing: PlainHistogram,
    time_in_queue: PlainHistogram,
    lease_left_at_ack: PlainHistogram,
}

/// Proof of one delivery attempt of the baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BaselineReceipt {
    slot: u32,
    generation: u64,
    tag: u64,
}

/// One delivery attempt of the baseline.
#[derive(Debug, Clone)]
pub struct BaselineDelivery {
    /// The message's stable id.
    pub id: u64,
    /// This attempt's receipt.
    pub receipt: BaselineReceipt,
    /// The payload.
    pub payload: Bytes,
    /// Deliveries including this one.
    pub delivery_count: u32,
    /// When the lease runs out (clock nanoseconds).
    pub deadline: u64,
    /// When the attempt began.
    pub received_at: u64,
}

/// The Mutex-based lease queue.
#[derive(Debug)]
pub struct BaselineQueue {
    inner: Mutex<Inner>,
    clock: Box<dyn Clock>,
    key: (u64, u64),
    id: u64,
    capacity: usize,
    visibility: u64,
    max_lease: u64,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The same keyed 64-bit mix the engine's receipts carry.
fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl BaselineQueue {
    /// A queue of at most `capacity` messages with a default lease of
    /// `visibility`, on `clock`.
    pub fn new(clock: impl Clock, capacity: usize, visibility: Duration) -> Self {
        let seed = std::collections::hash_map::RandomState::new();
        let k0 = std::hash::BuildHasher::hash_one(&seed, 1u64);
        let k1 = std::hash::BuildHasher::hash_one(&seed, 2u64);
        BaselineQueue {
            inner: Mutex::new(Inner {
                slots: Vec::new(),
                free: Vec::new(),
                ready: VecDeque::new(),
                timers: BinaryHeap::new(),
                next_id: 0,
                counters: BaselineCounters::default(),
                processing: PlainHistogram::new(),
                time_in_queue: PlainHistogram::new(),
                lease_left_at_ack: PlainHistogram::new(),
            }),
            clock: Box::new(clock),
            key: (k0, k1),
            id: std::hash::BuildHasher::hash_one(&seed, 3u64),
            capacity,
            visibility: nanos(visibility),
            max_lease: nanos(Duration::from_secs(12 * 3600)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The clock's time in nanoseconds, read as the engine stamps its
    /// operations (`now_relaxed`; the same as `now` for `Instant`).
    pub fn now(&self) -> u64 {
        self.clock.now_relaxed().0
    }

    /// The engine's tag computation (four mixing rounds), so both queues pay
    /// the same for receipt integrity.
    fn tag(&self, slot: u32, generation: u64) -> u64 {
        let (k0, k1) = self.key;
        let a = mix(self.id ^ k0);
        let b = mix(a ^ u64::from(slot) ^ k1);
        let c = mix(b ^ generation.rotate_left(17));
        mix(c ^ k0.rotate_left(29))
    }

    /// Sends one message, receivable after `delay`; hands the payload back
    /// when the queue is full.
    pub fn send_with(&self, payload: Bytes, delay: Duration) -> Result<u64, Bytes> {
        let now = self.now();
        let mut inner = self.lock();
        Self::place(&mut inner, self.capacity, payload, nanos(delay), now)
    }

    /// Sends one message, receivable at once.
    pub fn send(&self, payload: Bytes) -> Result<u64, Bytes> {
        self.send_with(payload, Duration::ZERO)
    }

    /// Sends several messages under one lock.
    pub fn send_batch(&self, payloads: impl IntoIterator<Item = Bytes>) -> Vec<Result<u64, Bytes>> {
        let now = self.now();
        let mut inner = self.lock();
        payloads.into_iter().map(|p| Self::place(&mut inner, self.capacity, p, 0, now)).collect()
    }

    fn place(inner: &mut Inner, capacity: usize, payload: Bytes, delay: u64, now: u64) -> Result<u64, Bytes> {
        let index = match inner.free.pop() {
            Some(index) => index,
            None if inner.slots.len() < capacity => {
                inner.slots.push(Slot::new());
                (inner.slots.len() - 1) as u32
            }
            None => return Err(payload),
        };
        let id = inner.next_id;
        inner.next_id += 1;
        let slot = &mut inner.slots[index as usize];
        slot.payload = payload;
        slot.id = id;
        slot.sent_at = now;
        slot.delivery_count = 0;
        slot.expired = false;
        let generation = slot.generation;
        if delay > 0 {
            slot.phase = Phase::Delayed;
            inner.timers.push(Reverse((now.saturating_add(delay), index, generation)));
            inner.counters.delayed += 1;
        } else {
            slot.phase = Phase::Ready;
            inner.ready.push_back((index, generation));
            inner.counters.ready += 1;
        }
        inner.counters.sent += 1;
        Ok(id)
    }

    /// Receives up to `max` ready messages with the default lease.
    pub fn receive(&self, max: usize) -> Vec<BaselineDelivery> {
        self.receive_with_visibility(max, self.visibility)
    }

    /// The default lease, nanoseconds.
    pub fn default_visibility(&self) -> u64 {
        self.visibility
    }

    /// Receives up to `max` ready messages with a lease of `visibility` ns,
    /// applying due timers first.
    pub fn receive_with_visibility(&self, max: usize, visibility: u64) -> Vec<BaselineDelivery> {
        let mut out = Vec::new();
        self.receive_into(max, visibility, &mut out);
        out
    }

    /// Appends up to `max` ready messages to `out` (a reused buffer), with a
    /// lease of `visibility` ns; returns how many.
    pub fn receive_into(&self, max: usize, visibility: u64, out: &mut Vec<BaselineDelivery>) -> usize {
        let start = out.len();
        let max = start + max;
        let now = self.now();
        let mut inner = self.lock();
        Self::run_timers(&mut inner, now);
        let deadline = now.saturating_add(visibility);
        while out.len() < max {
            let Some((index, generation)) = inner.ready.pop_front() else {
                break;
            };
            let inner = &mut *inner;
            let slot = &mut inner.slots[index as usize];
            if slot.phase != Phase::Ready || slot.generation != generation {
                continue;
            }
            slot.generation += 1;
            slot.phase = Phase::InFlight;
            slot.expired = false;
            slot.delivery_count += 1;
            slot.received_at = now;
            slot.deadline = deadline;
            let (count, sent_at, id, payload) = (slot.delivery_count, slot.sent_at, slot.id, slot.payload.clone());
            let generation = slot.generation;
            inner.timers.push(Reverse((deadline, index, generation)));
            let counters = &mut inner.counters;
            counters.ready -= 1;
            counters.in_flight += 1;
            counters.received += 1;
            if count == 1 {
                inner.time_in_queue.record(now.saturating_sub(sent_at));
            } else {
                counters.redelivered += 1;
            }
            out.push(BaselineDelivery {
                id,
                receipt: BaselineReceipt { slot: index, generation, tag: self.tag(index, generation) },
                payload,
                delivery_count: count,
                deadline,
                received_at: now,
            });
        }
        out.len() - start
    }

    /// Applies every expiry and delay due at `now`.
    fn run_timers(inner: &mut Inner, now: u64) {
        while let Some(&Reverse((deadline, index, generation))) = inner.timers.peek() {
            if deadline > now {
                return;
            }
            inner.timers.pop();
            let slot = &mut inner.slots[index as usize];
            if slot.generation != generation {
                continue;
            }
            match slot.phase {
                Phase::InFlight if slot.deadline > now => {
                    // Extended since this entry was pushed: lazy rescheduling.
                    let later = slot.deadline;
                    inner.timers.push(Reverse((later, index, generation)));
                }
                Phase::InFlight => {
                    slot.generation += 1;
                    slot.phase = Phase::Ready;
                    slot.expired = true;
                    inner.ready.push_back((index, slot.generation));
                    inner.counters.expired += 1;
                    inner.counters.in_flight -= 1;
                    inner.counters.ready += 1;
                }
                Phase::Delayed => {
                    slot.phase = Phase::Ready;
                    inner.ready.push_back((index, generation));
                    inner.counters.delayed -= 1;
                    inner.counters.ready += 1;
                }
                Phase::Free | Phase::Ready => {}
            }
        }
    }

    fn check(&self, receipt: &BaselineReceipt) -> Result<(), LeaseError> {
        if self.tag(receipt.slot, receipt.generation) != receipt.tag {
            return Err(LeaseError::InvalidReceipt(ReceiptError::Forged));
        }
        Ok(())
    }

    /// Acks one attempt (late acks accepted while nobody received it again).
    pub fn ack(&self, receipt: &BaselineReceipt) -> Result<(), LeaseError> {
        self.check(receipt)?;
        let now = self.now();
        let mut inner = self.lock();
        Self::ack_locked(&mut inner, receipt, now)
    }

    /// Acks several attempts under one lock.
    pub fn ack_batch(&self, receipts: &[BaselineReceipt]) -> Vec<Result<(), LeaseError>> {
        let now = self.now();
        let mut inner = self.lock();
        receipts
            .iter()
            .map(|r| {
                self.check(r)?;
                Self::ack_locked(&mut inner, r, now)
            })
            .collect()
    }

    fn ack_locked(inner: &mut Inner, receipt: &BaselineReceipt, now: u64) -> Result<(), LeaseError> {
        let Some(slot) = inner.slots.get_mut(receipt.slot as usize) else {
            return Err(LeaseError::InvalidReceipt(ReceiptError::Forged));
        };
        let on_time = slot.phase == Phase::InFlight && slot.generation == receipt.generation;
        let late = matches!(slot.phase, Phase::Ready | Phase::Delayed)
            && slot.expired
            && slot.generation == receipt.generation + 1;
        if !on_time && !late {
            inner.counters.stale_acks += 1;
            return Err(LeaseError::Stale);
        }
        let was = slot.phase;
        let processing = now.saturating_sub(slot.received_at);
        let left = slot.deadline.saturating_sub(now);
        let is_late = late || now >= slot.deadline;
        slot.generation += 1;
        slot.phase = Phase::Free;
        let payload = std::mem::take(&mut slot.payload);
        inner.free.push(receipt.slot);
        let counters = &mut inner.counters;
        counters.acked += 1;
        match was {
            Phase::InFlight => counters.in_flight -= 1,
            Phase::Ready => counters.ready -= 1,
            _ => counters.delayed -= 1,
        }
        if is_late {
            counters.late_acks += 1;
        }
        inner.processing.record(processing);
        inner.lease_left_at_ack.record(left);
        drop(payload);
        Ok(())
    }

    /// Extends a held lease to now + `visibility`.
    pub fn extend(&self, receipt: &BaselineReceipt, visibility: Duration) -> Result<u64, LeaseError> {
        self.check(receipt)?;
        let now = self.now();
        let mut inner = self.lock();
        let inner = &mut *inner;
        let Some(slot) = inner.slots.get_mut(receipt.slot as usize) else {
            return Err(LeaseError::InvalidReceipt(ReceiptError::Forged));
        };
        let refused = if slot.phase != Phase::InFlight || slot.generation != receipt.generation {
            Some(Self::why_not_held(slot, receipt.generation))
        } else if now >= slot.deadline {
            Some(LeaseError::Expired)
        } else {
            None
        };
        if let Some(error) = refused {
            inner.counters.extensions_refused += 1;
            return Err(error);
        }
        let extended = now.saturating_add(nanos(visibility));
        if extended.saturating_sub(slot.received_at) > self.max_lease {
            inner.counters.extensions_refused += 1;
            return Err(LeaseError::CapExceeded { max_lease: Duration::from_nanos(self.max_lease) });
        }
        let earlier = extended < slot.deadline;
        slot.deadline = extended;
        if earlier {
            inner.timers.push(Reverse((extended, receipt.slot, receipt.generation)));
        }
        inner.counters.extensions += 1;
        Ok(extended)
    }

    fn why_not_held(slot: &Slot, generation: u64) -> LeaseError {
        if matches!(slot.phase, Phase::Ready | Phase::Delayed) && slot.expired && slot.generation == generation + 1 {
            LeaseError::Expired
        } else {
            LeaseError::Stale
        }
    }

    /// Ends a held attempt; the message is receivable again after `delay`.
    pub fn release(&self, receipt: &BaselineReceipt, delay: Duration) -> Result<(), LeaseError> {
        self.check(receipt)?;
        let now = self.now();
        let mut inner = self.lock();
        let inner = &mut *inner;
        let Some(slot) = inner.slots.get_mut(receipt.slot as usize) else {
            return Err(LeaseError::InvalidReceipt(ReceiptError::Forged));
        };
        if slot.phase != Phase::InFlight || slot.generation != receipt.generation {
            return Err(Self::why_not_held(slot, receipt.generation));
        }
        if now >= slot.deadline {
            return Err(LeaseError::Expired);
        }
        slot.generation += 1;
        slot.expired = false;
        let generation = slot.generation;
        let delay = nanos(delay);
        inner.counters.released += 1;
        inner.counters.in_flight -= 1;
        if delay > 0 {
            slot.phase = Phase::Delayed;
            inner.timers.push(Reverse((now.saturating_add(delay), receipt.slot, generation)));
            inner.counters.delayed += 1;
        } else {
            slot.phase = Phase::Ready;
            inner.ready.push_back((receipt.slot, generation));
            inner.counters.ready += 1;
        }
        Ok(())
    }

    /// The counters (a snapshot under the lock).
    pub fn counters(&self) -> BaselineCounters {
        self.lock().counters
    }

    /// Samples in the three distributions: (processing, time in queue,
    /// lease left at ack).
    pub fn samples(&self) -> (u64, u64, u64) {
        let inner = self.lock();
        (inner.processing.count(), inner.time_in_queue.count(), inner.lease_left_at_ack.count())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leaseq::ManualClock;

    fn queue() -> (ManualClock, BaselineQueue) {
        let clock = ManualClock::new();
        (clock.clone(), BaselineQueue::new(clock, 8, Duration::from_secs(30)))
    }

    #[test]
    fn a_lapsed_attempt_is_stale_once_redelivered() {
        let (clock, q) = queue();
        q.send(Bytes::from_static(b"x")).unwrap();
        let a = q.receive(1).remove(0);
        clock.advance(Duration::from_secs(31));
        let b = q.receive(1).remove(0);
        assert_eq!((a.id, b.delivery_count), (b.id, 2));
        assert_eq!(q.ack(&a.receipt), Err(LeaseError::Stale));
        q.ack(&b.receipt).unwrap();
        assert_eq!(q.ack(&b.receipt), Err(LeaseError::Stale), "a second ack is stale");
        let c = q.counters();
        assert_eq!((c.expired, c.acked, c.stale_acks, c.in_flight, c.ready), (1, 1, 2, 0, 0));
    }

    #[test]
    fn late_ack_is_accepted_until_redelivery() {
        let (clock, q) = queue();
        q.send(Bytes::from_static(b"y")).unwrap();
        let a = q.receive(1).remove(0);
        clock.advance(Duration::from_secs(31));
        // z is queued before the expiry is applied, so the next receive
        // applies the expiry (y goes behind z) and takes z only.
        q.send(Bytes::from_static(b"z")).unwrap();
        let z = q.receive(1).remove(0);
        assert_eq!(z.payload, Bytes::from_static(b"z"));
        assert_eq!(q.extend(&a.receipt, Duration::from_secs(1)), Err(LeaseError::Expired));
        q.ack(&a.receipt).unwrap();
        assert_eq!(q.counters().late_acks, 1);
        assert!(q.receive(1).is_empty(), "the late-acked message is gone");
        assert_eq!(q.samples().0, 1);
    }

    #[test]
    fn extension_moves_the_deadline_and_forged_receipts_are_refused() {
        let (clock, q) = queue();
        q.send(Bytes::from_static(b"x")).unwrap();
        let a = q.receive(1).remove(0);
        clock.advance(Duration::from_secs(20));
        q.extend(&a.receipt, Duration::from_secs(30)).unwrap();
        clock.advance(Duration::from_secs(20));
        assert!(q.receive(1).is_empty(), "the extended lease still holds at 40 s");
        clock.advance(Duration::from_secs(11));
        assert_eq!(q.receive(1).len(), 1, "and runs out at 50 s");
        let mut forged = a.receipt;
        forged.generation += 2;
        assert!(matches!(q.ack(&forged), Err(LeaseError::InvalidReceipt(_))));
    }

    #[test]
    fn release_with_delay_and_capacity() {
        let (clock, q) = queue();
        for _ in 0..8 {
            q.send(Bytes::new()).unwrap();
        }
        assert!(q.send(Bytes::from_static(b"over")).is_err(), "capacity is a hard limit");
        let d = q.receive(1).remove(0);
        q.release(&d.receipt, Duration::from_secs(5)).unwrap();
        assert_eq!(q.receive(8).len(), 7);
        clock.advance(Duration::from_secs(5));
        let again = q.receive(1).remove(0);
        assert_eq!((again.id, again.delivery_count), (d.id, 2));
    }
}
