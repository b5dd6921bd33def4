//! What a scenario runs against: the engine or the baseline, behind one trait.
//!
//! Invariant: the adapters add nothing but a call through to the queue's own
//! API (no conversion of deliveries), so a ratio measures the queues, not the
//! adapters.

use std::time::Duration;

use bytes::Bytes;
use leaseq::{Delivery, Engine, ManualClock, QueueConfig, Receipt, ReceiveOptions, SystemClock};

use crate::baseline::{BaselineDelivery, BaselineQueue, BaselineReceipt};
use crate::lean_baseline::{LeanDelivery, LeanQueue, LeanReceipt};

/// How to build a queue for one scenario.
#[derive(Debug, Clone)]
pub struct Setup {
    /// Shards of the engine's queue (the baseline has one lock regardless).
    pub shards: usize,
    /// Capacity in messages.
    pub capacity: usize,
    /// Default lease.
    pub visibility: Duration,
    /// The engine queue's `max_lease` (and so its longest visibility); the
    /// baseline takes any lease.
    pub max_lease: Duration,
    /// A manual clock, or `None` for the system clock (and the engine's
    /// driver thread).
    pub clock: Option<ManualClock>,
    /// With the system clock, the baseline reads `std::time::Instant`, as a
    /// hand-written queue would; `true` gives it the engine's own
    /// `SystemClock` instead (the time-stamp counter where the engine uses
    /// it), to separate the clock's share of a ratio from the queue's.
    pub baseline_on_engine_clock: bool,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            shards: 1,
            capacity: 1 << 20,
            visibility: Duration::from_secs(30),
            max_lease: Duration::from_secs(12 * 3600),
            clock: None,
            baseline_on_engine_clock: false,
        }
    }
}

/// A lease queue under test.
pub trait Subject: Send + Sync + 'static {
    /// What a receive hands out.
    type Delivery: Send;
    /// What ack, extend and release take.
    type Receipt: Clone + Send + Sync;

    /// `engine` or `baseline`.
    const NAME: &'static str;

    /// Builds one.
    fn build(setup: &Setup) -> Self;
    /// Sends one message; false when the queue is full.
    fn send(&self, payload: Bytes) -> bool;
    /// Sends several; how many were accepted.
    fn send_batch(&self, payloads: Vec<Bytes>) -> usize;
    /// Receives up to `max` with the default lease.
    fn receive(&self, max: usize) -> Vec<Self::Delivery>;
    /// Appends up to `max` to a reused buffer, with the default lease;
    /// returns how many.
    fn receive_into(&self, max: usize, out: &mut Vec<Self::Delivery>) -> usize;
    /// Receives up to `max` with a lease of `visibility`.
    fn receive_for(&self, max: usize, visibility: Duration) -> Vec<Self::Delivery>;
    /// The receipt of a delivery.
    fn receipt(delivery: &Self::Delivery) -> &Self::Receipt;
    /// The payload of a delivery.
    fn payload(delivery: &Self::Delivery) -> &Bytes;
    /// The lease deadline of a delivery (clock nanoseconds).
    fn deadline(delivery: &Self::Delivery) -> u64;
    /// The message id of a delivery.
    fn id(delivery: &Self::Delivery) -> u64;
    /// Acks; true when accepted.
    fn ack(&self, receipt: &Self::Receipt) -> bool;
    /// Acks several; how many were accepted.
    fn ack_batch(&self, receipts: &[Self::Receipt]) -> usize;
    /// Extends to now + `visibility`; true when accepted.
    fn extend(&self, receipt: &Self::Receipt, visibility: Duration) -> bool;
    /// Releases at once; true when accepted.
    fn release(&self, receipt: &Self::Receipt) -> bool;
    /// The queue's clock, nanoseconds.
    fn now(&self) -> u64;
}

/// The engine: one engine with one queue.
#[derive(Debug)]
pub struct EngineSubject {
    /// The queue under test.
    pub queue: leaseq::Queue,
    /// Keeps the engine alive.
    pub engine: Engine,
}

impl Subject for EngineSubject {
    type Delivery = Delivery;
    type Receipt = Receipt;
    const NAME: &'static str = "engine";

    fn build(setup: &Setup) -> Self {
        let builder = Engine::builder().default_shards(setup.shards);
        let engine = match &setup.clock {
            Some(clock) => builder.clock(clock.clone()).build(),
            None => builder.build(),
        };
        let config = QueueConfig::default()
            .visibility_timeout(setup.visibility)
            .max_visibility(setup.max_lease)
            .max_lease(setup.max_lease)
            .max_messages(setup.capacity)
            .shards(setup.shards);
        let queue = engine.create_queue("bench", config).expect("the bench queue config is valid");
        EngineSubject { queue, engine }
    }

    #[inline]
    fn send(&self, payload: Bytes) -> bool {
        self.queue.send(payload).is_ok()
    }

    fn send_batch(&self, payloads: Vec<Bytes>) -> usize {
        self.queue.send_batch(payloads).iter().filter(|r| r.is_ok()).count()
    }

    #[inline]
    fn receive(&self, max: usize) -> Vec<Delivery> {
        self.queue.receive(max).unwrap_or_default()
    }

    #[inline]
    fn receive_into(&self, max: usize, out: &mut Vec<Delivery>) -> usize {
        self.queue.receive_into(max, ReceiveOptions::default(), out).unwrap_or(0)
    }

    fn receive_for(&self, max: usize, visibility: Duration) -> Vec<Delivery> {
        self.queue.receive_with(max, ReceiveOptions::new().visibility(visibility)).unwrap_or_default()
    }

    #[inline]
    fn receipt(delivery: &Delivery) -> &Receipt {
        &delivery.receipt
    }

    fn payload(delivery: &Delivery) -> &Bytes {
        &delivery.payload
    }

    fn deadline(delivery: &Delivery) -> u64 {
        delivery.deadline.as_nanos()
    }

    fn id(delivery: &Delivery) -> u64 {
        delivery.id.as_u64()
    }

    #[inline]
    fn ack(&self, receipt: &Receipt) -> bool {
        self.queue.ack(receipt).is_ok()
    }

    fn ack_batch(&self, receipts: &[Receipt]) -> usize {
        self.queue.ack_batch(receipts).iter().filter(|r| r.is_ok()).count()
    }

    fn extend(&self, receipt: &Receipt, visibility: Duration) -> bool {
        self.queue.extend(receipt, visibility).is_ok()
    }

    fn release(&self, receipt: &Receipt) -> bool {
        self.queue.release(receipt, Duration::ZERO).is_ok()
    }

    fn now(&self) -> u64 {
        self.queue.now().as_nanos()
    }
}

impl Subject for BaselineQueue {
    type Delivery = BaselineDelivery;
    type Receipt = BaselineReceipt;
    const NAME: &'static str = "baseline";

    fn build(setup: &Setup) -> Self {
        match &setup.clock {
            Some(clock) => BaselineQueue::new(clock.clone(), setup.capacity, setup.visibility),
            None if setup.baseline_on_engine_clock => {
                BaselineQueue::new(SystemClock::new(), setup.capacity, setup.visibility)
            }
            None => BaselineQueue::new(SystemClock::std(), setup.capacity, setup.visibility),
        }
    }

    #[inline]
    fn send(&self, payload: Bytes) -> bool {
        BaselineQueue::send(self, payload).is_ok()
    }

    fn send_batch(&self, payloads: Vec<Bytes>) -> usize {
        BaselineQueue::send_batch(self, payloads).iter().filter(|r| r.is_ok()).count()
    }

    #[inline]
    fn receive(&self, max: usize) -> Vec<BaselineDelivery> {
        BaselineQueue::receive(self, max)
    }

    #[inline]
    fn receive_into(&self, max: usize, out: &mut Vec<BaselineDelivery>) -> usize {
        BaselineQueue::receive_into(self, max, self.default_visibility(), out)
    }

    fn receive_for(&self, max: usize, visibility: Duration) -> Vec<BaselineDelivery> {
        self.receive_with_visibility(max, u64::try_from(visibility.as_nanos()).unwrap_or(u64::MAX))
    }

    #[inline]
    fn receipt(delivery: &BaselineDelivery) -> &BaselineReceipt {
        &delivery.receipt
    }

    fn payload(delivery: &BaselineDelivery) -> &Bytes {
        &delivery.payload
    }

    fn deadline(delivery: &BaselineDelivery) -> u64 {
        delivery.deadline
    }

    fn id(delivery: &BaselineDelivery) -> u64 {
        delivery.id
    }

    #[inline]
    fn ack(&self, receipt: &BaselineReceipt) -> bool {
        BaselineQueue::ack(self, receipt).is_ok()
    }

    fn ack_batch(&self, receipts: &[BaselineReceipt]) -> usize {
        BaselineQueue::ack_batch(self, receipts).iter().filter(|r| r.is_ok()).count()
    }

    fn extend(&self, receipt: &BaselineReceipt, visibility: Duration) -> bool {
        BaselineQueue::extend(self, receipt, visibility).is_ok()
    }

    fn release(&self, receipt: &BaselineReceipt) -> bool {
        BaselineQueue::release(self, receipt, Duration::ZERO).is_ok()
    }

    fn now(&self) -> u64 {
        BaselineQueue::now(self)
    }
}

/// What the independent-cycles workload needs of a queue: send, receive into
/// a reused buffer with the default lease, ack. The engine and the
/// full-contract baseline provide it through [`Subject`]; the lean baseline,
/// which has nothing else, provides only this.
pub trait CycleQueue: Send + Sync + 'static {
    /// What a receive hands out.
    type Delivery: Send;
    /// What ack takes.
    type Receipt;

    /// `engine`, `baseline` or `lean`.
    const NAME: &'static str;

    /// Builds one.
    fn build(setup: &Setup) -> Self;
    /// Sends one message; false when the queue is full.
    fn send(&self, payload: Bytes) -> bool;
    /// Appends up to `max` to `out` with the default lease; how many.
    fn receive_into(&self, max: usize, out: &mut Vec<Self::Delivery>) -> usize;
    /// The receipt of a delivery.
    fn receipt(delivery: &Self::Delivery) -> &Self::Receipt;
    /// Acks; true when accepted.
    fn ack(&self, receipt: &Self::Receipt) -> bool;
}

impl<S: Subject> CycleQueue for S {
    type Delivery = S::Delivery;
    type Receipt = S::Receipt;
    const NAME: &'static str = S::NAME;

    fn build(setup: &Setup) -> Self {
        S::build(setup)
    }

    #[inline]
    fn send(&self, payload: Bytes) -> bool {
        Subject::send(self, payload)
    }

    #[inline]
    fn receive_into(&self, max: usize, out: &mut Vec<Self::Delivery>) -> usize {
        Subject::receive_into(self, max, out)
    }

    #[inline]
    fn receipt(delivery: &Self::Delivery) -> &Self::Receipt {
        S::receipt(delivery)
    }

    #[inline]
    fn ack(&self, receipt: &Self::Receipt) -> bool {
        Subject::ack(self, receipt)
    }
}

/// The lean baseline on the system clock: `Instant`, as a hand-written queue
/// would read it, or with `baseline_on_engine_clock` the engine's own
/// `SystemClock` (the time-stamp counter where the engine uses it). The
/// workload runs on real time only, so a manual clock in `Setup` is refused.
impl CycleQueue for LeanQueue<SystemClock> {
    type Delivery = LeanDelivery;
    type Receipt = LeanReceipt;
    const NAME: &'static str = "lean";

    fn build(setup: &Setup) -> Self {
        assert!(setup.clock.is_none(), "the lean baseline's cycles run on the system clock");
        let clock = if setup.baseline_on_engine_clock { SystemClock::new() } else { SystemClock::std() };
        LeanQueue::new(clock, setup.capacity, setup.visibility)
    }

    #[inline]
    fn send(&self, payload: Bytes) -> bool {
        LeanQueue::send(self, payload).is_ok()
    }

    #[inline]
    fn receive_into(&self, max: usize, out: &mut Vec<LeanDelivery>) -> usize {
        LeanQueue::receive_into(self, max, out)
    }

    #[inline]
    fn receipt(delivery: &LeanDelivery) -> &LeanReceipt {
        &delivery.receipt
    }

    #[inline]
    fn ack(&self, receipt: &LeanReceipt) -> bool {
        LeanQueue::ack(self, receipt)
    }
}
