//! A durable engine's restart, as the contract in `docs/durability.md` says
//! it maps the state (a clean close, then an open of the same data dir).
//!
//! Invariant: what a restart keeps is exactly what the log holds: queues,
//! and per message its id, payload, delivery count, fencing token,
//! dead-letter record and the delay its send asked for. Leases, release and
//! backoff delays, attempt histories and statistics are not logged, so they
//! end: every message not delayed by its send is ready, and counters and
//! histograms start from zero with the restored messages counted as sent.
//! Arrival times are logged: a message keeps its age (and its retention
//! deadline), and one past its retention by the open is not restored.

use std::collections::BTreeMap;
use std::sync::Arc;

use leaseq::{AttemptOutcome, AttemptRecord, DeadLetterReason, DeadLetterRecord, Nanos};

use super::{Model, QueueRef};
use crate::message::{Message, State};
use crate::stats::Counters;

impl Model {
    /// Closes and reopens the engine. Returns how many messages moved to a
    /// dead-letter queue at open (`RecoveryReport::dead_lettered`).
    ///
    /// Order, as recovery places them: first every message that stays on its
    /// queue, in log order (the order they arrived on their queues; one
    /// operation's arrivals form one group, in an order left open). Then, in
    /// log order, every message whose delivery count reached its queue's
    /// ceiling on a queue with a dead-letter queue: its last attempt ended
    /// with the process, so it moves to the dead-letter queue if that has
    /// room beyond the messages it holds and those still to be decided
    /// there, or else stays, behind the others.
    pub fn restart(&mut self) -> u64 {
        self.begin();
        let mut all: Vec<(u64, QueueRef, Message)> = Vec::new();
        for (index, q) in self.queues.iter_mut().enumerate() {
            q.ready.clear();
            q.counters = Counters::default();
            q.processing.clear();
            q.time_in_queue.clear();
            q.lease_left_at_ack.clear();
            all.extend(std::mem::take(&mut q.messages).into_iter().map(|(stay, m)| (stay, QueueRef(index), m)));
        }
        // What outlived its retention by the open is gone: not restored, not
        // counted (the engine may not have met it before the restart, so
        // `RecoveryReport::retention_dropped` is not this model's to predict).
        all.retain(|(_, queue, m)| !self.past_retention(self.q(*queue).config.retention, m));
        // Log order: by arrival; stays were handed out in arrival order.
        all.sort_by_key(|(stay, _, _)| *stay);
        // Ready groups: one per arrival operation, in log order, above every
        // group handed out before; the second pass's above the first's.
        let ranks: BTreeMap<u64, u64> = {
            let mut groups: Vec<u64> = all.iter().map(|(_, _, m)| m.arrival_group).collect();
            groups.sort_unstable();
            groups.dedup();
            groups.into_iter().zip(0..).collect()
        };
        let first_pass = self.group + 1;
        let second_pass = first_pass + ranks.len() as u64;
        let mut held: BTreeMap<usize, usize> = BTreeMap::new();
        let mut undecided: BTreeMap<usize, usize> = BTreeMap::new();
        let mut at_ceiling = Vec::new();
        for (stay, queue, message) in all {
            let q = self.q(queue);
            let ceiling = q.config.max_receives.is_some_and(|c| message.delivery_count >= c);
            if ceiling && q.dead_letter.is_some() {
                *undecided.entry(queue.0).or_default() += 1;
                at_ceiling.push((stay, queue, message));
                continue;
            }
            let group = first_pass + ranks[&message.arrival_group];
            self.place(queue, stay, message, group);
            *held.entry(queue.0).or_default() += 1;
        }
        let mut moved = 0;
        // (dead-letter queue, arrival group) of the moves made so far, to
        // notice when the room ran out inside one group whose order is open.
        let mut moves_of_group: Vec<(usize, u64)> = Vec::new();
        for (stay, queue, message) in at_ceiling {
            *undecided.get_mut(&queue.0).expect("counted above") -= 1;
            let dlq = self.q(queue).dead_letter.expect("filtered above");
            let taken = held.get(&dlq.0).copied().unwrap_or(0) + undecided.get(&dlq.0).copied().unwrap_or(0);
            let group = second_pass + ranks[&message.arrival_group];
            if taken < self.q(dlq).config.max_messages {
                moves_of_group.push((dlq.0, message.arrival_group));
                self.move_at_open(queue, dlq, message, group);
                *held.entry(dlq.0).or_default() += 1;
                moved += 1;
                continue;
            }
            if moves_of_group.contains(&(dlq.0, message.arrival_group)) && self.ambiguity.is_none() {
                self.ambiguity = Some(format!(
                    "messages of one operation compete for the last room on '{}' at a restart",
                    self.q(dlq).name
                ));
            }
            self.place(queue, stay, message, group);
            *held.entry(queue.0).or_default() += 1;
        }
        // Later operations make groups above all of these.
        self.group = second_pass + ranks.len() as u64;
        moved
    }

    /// Puts a restored message back on its queue, as recovery does.
    fn place(&mut self, queue: QueueRef, stay: u64, mut message: Message, group: u64) {
        let now = self.now;
        message.state =
            if message.logged_until > now { State::Delayed { until: message.logged_until } } else { State::Ready };
        // The log keeps when it arrived (its retention counts from then).
        message.received_at = 0;
        message.deadline = 0;
        message.expired_attempt = None;
        message.failures.clear();
        let ready = message.state == State::Ready;
        let q = self.qm(queue);
        q.messages.insert(stay, message);
        if ready {
            q.make_ready(stay, group);
        }
        q.counters.sent += 1;
    }

    /// Moves a message at its queue's ceiling to the dead-letter queue at
    /// open, with the record recovery writes: its last attempt expired at
    /// the open.
    fn move_at_open(&mut self, queue: QueueRef, dlq: QueueRef, message: Message, group: u64) {
        let now = self.now;
        let record = DeadLetterRecord {
            source_queue: self.q(queue).name.clone(),
            reason: DeadLetterReason::Expired,
            delivery_count: message.delivery_count,
            attempts: vec![AttemptRecord {
                delivery: message.delivery_count,
                received_at: Nanos(now),
                ended_at: Nanos(now),
                outcome: AttemptOutcome::Expired,
            }],
            dead_lettered_at: Nanos(now),
        };
        let mut arrival = Message::arrive(message.id, message.payload, now, message.lifetime_deliveries, 0);
        arrival.dead_letter = Some(Arc::new(record));
        // Logged at the open: after everything that arrived before.
        arrival.arrival_group = self.group;
        let stay = self.next_stay;
        self.next_stay += 1;
        let q = self.qm(dlq);
        q.messages.insert(stay, arrival);
        q.make_ready(stay, group);
        q.counters.sent += 1;
    }
}
