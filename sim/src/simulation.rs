//! The discrete-event loop: virtual time, workers, the real engine.
//!
//! Invariants: virtual time only moves forward, to the next scheduled event,
//! through the engine's `ManualClock`, so the engine applies every expiry at
//! exactly its deadline; every message the simulator sends is, at the end,
//! exactly one of completed, dead-lettered or still in the queue (the engine's
//! own stats are compared to the simulator's counts in the tests).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use leaseq::consumer::{Decision, LeaseState};
use leaseq::{Delivery, Engine, LeaseError, ManualClock, MessageId, Nanos, Queue, QueueConfig, Receipt};

use crate::report::{Report, Summary};
use crate::rng::Rng;
use crate::scenario::{Policy, Scenario};

const NANOS_PER_SEC: f64 = 1e9;

fn to_nanos(secs: f64) -> u64 {
    (secs * NANOS_PER_SEC).round().max(0.0) as u64
}

fn secs_between(from: u64, to: u64) -> f64 {
    to.saturating_sub(from) as f64 / NANOS_PER_SEC
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Arrival,
    /// The attempt's work is done.
    Finish(u64),
    /// The attempt's worker dies.
    Crash(u64),
    /// The keeper looks at the attempt's lease.
    Renew(u64),
    /// A crashed worker is back.
    Restart(usize),
    /// Something may have become receivable (a deadline, a backoff's end).
    Wake,
}

#[derive(Debug)]
struct Message {
    sent_at: u64,
    duration: f64,
    poison: bool,
    running: u32,
    committed: bool,
    /// Acked: forgotten as soon as no attempt of it runs any more.
    acked: bool,
    /// When the last crash happened and when that attempt's lease made the
    /// message eligible again, until its next delivery.
    crashed: Option<(u64, u64)>,
}

#[derive(Debug)]
struct Attempt {
    worker: usize,
    id: MessageId,
    receipt: Receipt,
    delivery_count: u32,
    started: u64,
    /// The current deadline (moved by renewals).
    deadline: u64,
    lease: Option<LeaseState>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Worker {
    Idle,
    Busy,
    Down,
}

struct Run<'a> {
    scenario: &'a Scenario,
    clock: ManualClock,
    queue: Queue,
    dead_letters: Queue,
    rng: Rng,
    now: u64,
    seq: u64,
    events: BinaryHeap<Reverse<(u64, u64, Event)>>,
    messages: HashMap<MessageId, Message>,
    /// Running attempts by number; finished ones are removed, and events
    /// naming a removed attempt are ignored.
    attempts: HashMap<u64, Attempt>,
    next_attempt: u64,
    workers: Vec<Worker>,
    idle: Vec<usize>,
    arrivals_end: u64,
    report: Report,
    recovery: Histogram<u64>,
    redelivery_wait: Histogram<u64>,
    end_to_end: Histogram<u64>,
}

/// Runs `scenario` on a fresh engine and reports what happened.
pub fn simulate(scenario: &Scenario) -> Result<Report, String> {
    scenario.validate()?;
    let started = Instant::now();
    let clock = ManualClock::new();
    let engine = Engine::builder().clock(clock.clone()).build();
    let dead_letters = engine.create_queue("sim-dlq", QueueConfig::default()).map_err(|e| e.to_string())?;
    let queue = engine
        .create_queue(
            "sim",
            QueueConfig::default()
                .visibility_timeout(scenario.policy.timeout())
                .max_receives(scenario.max_receives)
                .dead_letter_queue("sim-dlq")
                .backoff(scenario.backoff)
                .max_messages(1 << 22)
                .shards(1),
        )
        .map_err(|e| e.to_string())?;
    let histogram = || Histogram::<u64>::new(3).expect("3 significant figures is valid");
    let mut run = Run {
        scenario,
        clock,
        queue,
        dead_letters,
        rng: Rng::new(scenario.seed),
        now: 0,
        seq: 0,
        events: BinaryHeap::new(),
        messages: HashMap::new(),
        attempts: HashMap::new(),
        next_attempt: 0,
        workers: vec![Worker::Idle; scenario.workers],
        idle: (0..scenario.workers).rev().collect(),
        arrivals_end: to_nanos(scenario.arrivals_for.as_secs_f64()),
        report: Report::default(),
        recovery: histogram(),
        redelivery_wait: histogram(),
        end_to_end: histogram(),
    };
    let first = to_nanos(run.rng.exponential(1.0 / scenario.arrival_rate));
    run.schedule(first, Event::Arrival);
    let end = run.arrivals_end.saturating_add(to_nanos(scenario.drain_for.as_secs_f64()));
    while let Some(Reverse((at, _, event))) = run.events.pop() {
        if at > end {
            break;
        }
        run.now = at;
        run.clock.advance_to(Nanos(at));
        run.handle(event)?;
    }
    run.finish(started.elapsed(), end)
}

impl Run<'_> {
    fn schedule(&mut self, at: u64, event: Event) {
        self.seq += 1;
        self.events.push(Reverse((at.max(self.now), self.seq, event)));
    }

    fn handle(&mut self, event: Event) -> Result<(), String> {
        match event {
            Event::Arrival => self.arrive()?,
            Event::Finish(a) => self.finish_attempt(a)?,
            Event::Crash(a) => self.crash(a),
            Event::Renew(a) => self.renew(a),
            Event::Restart(w) => {
                self.workers[w] = Worker::Idle;
                self.idle.push(w);
            }
            Event::Wake => {}
        }
        self.dispatch()
    }

    fn arrive(&mut self) -> Result<(), String> {
        let duration = self.scenario.durations.sample(&mut self.rng);
        let poison = self.rng.chance(self.scenario.poison_fraction);
        match self.queue.send(&b"job"[..]) {
            Ok(id) => {
                self.report.sent += 1;
                let message = Message {
                    sent_at: self.now,
                    duration,
                    poison,
                    running: 0,
                    committed: false,
                    acked: false,
                    crashed: None,
                };
                self.messages.insert(id, message);
            }
            Err(e) if e.is_queue_full() => self.report.refused += 1,
            Err(e) => return Err(e.to_string()),
        }
        let next = self.now + to_nanos(self.rng.exponential(1.0 / self.scenario.arrival_rate));
        if next <= self.arrivals_end {
            self.schedule(next, Event::Arrival);
        }
        Ok(())
    }

    /// Hands ready messages to idle workers.
    fn dispatch(&mut self) -> Result<(), String> {
        while let Some(&worker) = self.idle.last() {
            let Some(delivery) = self.queue.receive(1).map_err(|e| e.to_string())?.pop() else { break };
            self.idle.pop();
            self.start(worker, delivery);
        }
        Ok(())
    }

    fn start(&mut self, worker: usize, delivery: Delivery) {
        let index = self.next_attempt;
        self.next_attempt += 1;
        let now = self.now;
        self.report.attempts += 1;
        if delivery.delivery_count > 1 {
            self.report.redeliveries += 1;
        }
        let message = self.messages.get_mut(&delivery.id).expect("every delivered message was sent by the simulator");
        message.running += 1;
        if message.running > 1 {
            self.report.duplicate_executions += 1;
        }
        if let Some((crashed_at, eligible_at)) = message.crashed.take() {
            let _ = self.recovery.record((eligible_at.saturating_sub(crashed_at) / 1_000_000).max(1));
            let _ = self.redelivery_wait.record((now.saturating_sub(crashed_at) / 1_000_000).max(1));
        }
        let duration = message.duration;
        self.workers[worker] = Worker::Busy;
        let crashes = self.rng.chance(self.scenario.crash_probability);
        let lease = match &self.scenario.policy {
            Policy::Fixed { .. } => None,
            Policy::Renewing { keeper, .. } => {
                let config = self.queue.config();
                let state = LeaseState::from_delivery(&delivery, config.max_visibility, config.max_lease);
                self.schedule(keeper.renewal_due(&state).0, Event::Renew(index));
                Some(state)
            }
        };
        // A fixed lease shorter than the job runs out while the worker still
        // works: look for work again then. (Crashes and renewals that stop
        // schedule their own look; a lease that outlives its job needs none.)
        if lease.is_none() && to_nanos(duration) >= delivery.deadline.0.saturating_sub(now) {
            self.wake_at_expiry(delivery.deadline.0, delivery.id, delivery.delivery_count);
        }
        if crashes {
            let at = now + to_nanos(duration * self.rng.unit());
            self.schedule(at, Event::Crash(index));
        } else {
            self.schedule(now + to_nanos(duration), Event::Finish(index));
        }
        let attempt = Attempt {
            worker,
            id: delivery.id,
            receipt: delivery.receipt,
            delivery_count: delivery.delivery_count,
            started: now,
            deadline: delivery.deadline.0,
            lease,
        };
        self.attempts.insert(index, attempt);
    }

    /// Schedules looks for work when a lease ending at `deadline` makes its
    /// message eligible again (at once, or after the retry backoff).
    fn wake_at_expiry(&mut self, deadline: u64, id: MessageId, delivery_count: u32) {
        self.schedule(deadline, Event::Wake);
        let backoff = self.scenario.backoff.delay(id, delivery_count);
        if !backoff.is_zero() {
            self.schedule(deadline + to_nanos(backoff.as_secs_f64()), Event::Wake);
        }
    }

    /// Ends a running attempt; `None` if it had ended already.
    fn end_attempt(&mut self, index: u64) -> Option<Attempt> {
        let attempt = self.attempts.remove(&index)?;
        self.report.busy_worker_secs += secs_between(attempt.started, self.now);
        if let Some(message) = self.messages.get_mut(&attempt.id) {
            message.running -= 1;
        }
        Some(attempt)
    }

    /// Forgets an acked message once none of its attempts runs, so a long run
    /// keeps only the messages still in play.
    fn forget_if_done(&mut self, id: MessageId) {
        if self.messages.get(&id).is_some_and(|m| m.acked && m.running == 0) {
            self.messages.remove(&id);
        }
    }

    fn finish_attempt(&mut self, index: u64) -> Result<(), String> {
        let Some(attempt) = self.end_attempt(index) else { return Ok(()) };
        let worked = secs_between(attempt.started, self.now);
        let (worker, id, receipt, delivery_count) =
            (attempt.worker, attempt.id, attempt.receipt, attempt.delivery_count);
        let message = self.messages.get_mut(&id).expect("attempted messages exist");
        if message.poison {
            // The handler fails; the consumer releases with the queue's backoff.
            self.report.wasted_worker_secs += worked;
            let released = self.queue.release_with_backoff(&receipt);
            if released.is_ok() {
                let backoff = self.scenario.backoff.delay(id, delivery_count);
                self.schedule(self.now + to_nanos(backoff.as_secs_f64()), Event::Wake);
            }
        } else {
            // The effect: with an idempotency key a second commit is refused.
            if message.committed {
                self.report.duplicate_effects += 1;
                self.report.wasted_worker_secs += worked;
                if !self.scenario.idempotent {
                    self.report.effects += 1;
                }
            } else {
                message.committed = true;
                self.report.effects += 1;
                self.report.completed += 1;
                let _ = self.end_to_end.record(((self.now - message.sent_at) / 1_000_000).max(1));
            }
            match self.queue.ack(&receipt) {
                Ok(()) => {
                    self.report.acks += 1;
                    message.acked = true;
                }
                Err(LeaseError::Stale) => self.report.stale_acks += 1,
                Err(LeaseError::Expired) => {}
                Err(e) => return Err(format!("ack failed: {e}")),
            }
        }
        self.forget_if_done(id);
        self.workers[worker] = Worker::Idle;
        self.idle.push(worker);
        Ok(())
    }

    fn crash(&mut self, index: u64) {
        let Some(attempt) = self.end_attempt(index) else { return };
        let worker = attempt.worker;
        self.report.crashes += 1;
        self.report.wasted_worker_secs += secs_between(attempt.started, self.now);
        if let Some(message) = self.messages.get_mut(&attempt.id) {
            if !message.committed {
                // A dead process renews nothing: the message is eligible again
                // when the lease it held runs out.
                message.crashed = Some((self.now, attempt.deadline.max(self.now)));
            }
        }
        self.wake_at_expiry(attempt.deadline, attempt.id, attempt.delivery_count);
        self.forget_if_done(attempt.id);
        self.workers[worker] = Worker::Down;
        self.schedule(self.now + to_nanos(self.scenario.restart_delay.as_secs_f64()), Event::Restart(worker));
    }

    /// The keeper's turn for one lease: the consumer module's policy decides.
    fn renew(&mut self, index: u64) {
        let Policy::Renewing { keeper, .. } = &self.scenario.policy else { return };
        // A finished or crashed attempt is gone: a dead process renews nothing.
        let Some(attempt) = self.attempts.get(&index) else { return };
        let Some(lease) = attempt.lease.clone() else { return };
        match keeper.decide(&lease, Nanos(self.now)) {
            Decision::Wait { until } => self.schedule(until.0, Event::Renew(index)),
            Decision::Renew { visibility } => match self.queue.extend(&attempt.receipt, visibility) {
                Ok(deadline) => {
                    self.report.renewals += 1;
                    let mut lease = lease;
                    lease.renewed(deadline, visibility);
                    let due = keeper.renewal_due(&lease);
                    if let Some(attempt) = self.attempts.get_mut(&index) {
                        attempt.lease = Some(lease);
                        attempt.deadline = deadline.0;
                    }
                    self.schedule(due.0, Event::Renew(index));
                }
                Err(_) => self.stop_renewing(index),
            },
            // Stop, Lost, and any decision added later: renew no more.
            _ => self.stop_renewing(index),
        }
    }

    /// The keeper gives up on a lease (a bound, or a refused renewal): it
    /// runs out at its deadline unless the worker finishes first.
    fn stop_renewing(&mut self, index: u64) {
        if let Some(attempt) = self.attempts.get_mut(&index) {
            attempt.lease = None;
            let (deadline, id, count) = (attempt.deadline, attempt.id, attempt.delivery_count);
            self.wake_at_expiry(deadline, id, count);
        }
    }

    fn finish(mut self, wall: Duration, end: u64) -> Result<Report, String> {
        let simulated_end = self.now.min(end);
        let stats = self.queue.stats();
        let dead_lettered = self.drain_dead_letters()?;
        // Account for every message: let every lease and backoff run out with
        // no workers left, then collect what the queue still holds. A message
        // that is neither committed, dead-lettered nor still queued was lost.
        self.clock.advance(Duration::from_secs(13 * 3600));
        let mut remaining = std::collections::HashSet::new();
        loop {
            let batch = self.queue.receive(leaseq::MAX_BATCH).map_err(|e| e.to_string())?;
            if batch.is_empty() {
                break;
            }
            remaining.extend(batch.into_iter().map(|d| d.id));
        }
        let late_dead_letters = self.drain_dead_letters()?;
        self.report.lost = self
            .messages
            .iter()
            .filter(|(id, m)| {
                !m.committed
                    && !dead_lettered.contains(*id)
                    && !late_dead_letters.contains(*id)
                    && !remaining.contains(*id)
            })
            .count() as u64;
        let scenario = self.scenario;
        let report = &mut self.report;
        report.scenario = scenario.name.clone();
        report.policy = scenario.policy.to_string();
        report.policy_kind = scenario.policy.kind().to_string();
        report.timeout_secs = scenario.policy.timeout().as_secs_f64();
        report.simulated = Duration::from_nanos(simulated_end);
        report.wall = wall;
        report.unfinished = stats.ready + stats.delayed + stats.in_flight;
        report.recovery = Summary::of_millis(&self.recovery);
        report.redelivery_wait = Summary::of_millis(&self.redelivery_wait);
        report.end_to_end = Summary::of_millis(&self.end_to_end);
        report.throughput = report.completed as f64 / (simulated_end as f64 / NANOS_PER_SEC).max(1e-9);
        report.engine_acked = stats.acked;
        report.engine_late_acks = stats.late_acks;
        report.engine_stale_acks = stats.stale_acks;
        report.engine_expired = stats.expired;
        report.engine_extensions = stats.extensions;
        report.engine_redelivered = stats.redelivered;
        report.engine_dead_lettered = stats.dead_lettered;
        report.engine_depth = report.unfinished;
        report.engine_suggested_visibility = stats.suggested_visibility();
        report.diagnosis = self.queue.diagnose().summary();
        Ok(self.report)
    }

    /// Takes everything out of the dead-letter queue and classifies it.
    fn drain_dead_letters(&mut self) -> Result<std::collections::HashSet<MessageId>, String> {
        let mut ids = std::collections::HashSet::new();
        loop {
            let batch = self.dead_letters.receive(leaseq::MAX_BATCH).map_err(|e| e.to_string())?;
            if batch.is_empty() {
                return Ok(ids);
            }
            for d in batch {
                match self.messages.get(&d.id) {
                    Some(m) if m.poison => self.report.dead_lettered_poison += 1,
                    Some(m) if m.committed => self.report.dead_lettered_after_commit += 1,
                    _ => self.report.dead_lettered_healthy += 1,
                }
                ids.insert(d.id);
                // Remove it, so a later drain does not count it again.
                self.dead_letters.ack(&d.receipt).map_err(|e| e.to_string())?;
            }
        }
    }
}
