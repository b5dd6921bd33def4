//! The reference model: the engine's contract as plain single-threaded code.
//!
//! Invariants:
//! * Time is a number that moves only in `advance`. Between operations no
//!   transition is due: `settle` runs after the clock moves and after any
//!   operation that grants a lease already over (zero visibility), and applies
//!   every expiry and every end of a delay at the current time.
//! * Every message is in exactly one queue's map; a ready message is also
//!   listed once in that queue's ready order.
//! * Ready order is FIFO by the operation that made a message ready (its
//!   *group*). Messages made ready by one operation (one settle) form one
//!   group whose inner order the contract leaves open; on a queue with more
//!   than one shard the contract promises no order at all, so every ready
//!   message is in group 0. Receive may take any messages that respect this.
//! * A refused operation changes nothing but the counters the contract says
//!   count refusals.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use leaseq::{
    AttemptOutcome, AttemptRecord, DeadLetterReason, DeadLetterRecord, Error, LateAck, LeaseError, MAX_ATTEMPT_RECORDS,
    MAX_BATCH, MessageId, Nanos, QueueConfig, ReceiptError,
};

use crate::message::{Message, State};
use crate::stats::{Counters, ModelStats};
use crate::validate::{Broken, as_created, config_rule_broken, name_is_valid};

mod restart;

/// A queue the model created, by creation order (stays valid after delete,
/// like a `Queue` handle).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QueueRef(pub usize);

/// The model's receipt: which queue, which stay of which message, which attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelReceipt {
    /// Issued by a receive of this model.
    Genuine {
        /// The queue that issued it.
        queue: QueueRef,
        /// The message's stay on that queue.
        stay: u64,
        /// The delivery attempt (1-based).
        attempt: u32,
    },
    /// A receipt of `queue` whose integrity tag was altered.
    Tampered {
        /// The queue its fields name.
        queue: QueueRef,
    },
    /// A receipt issued by another engine.
    ForeignEngine,
}

/// What a receive hands out, as the model computes it.
#[derive(Debug, Clone)]
pub struct ModelDelivery {
    /// The message id.
    pub id: MessageId,
    /// This attempt's receipt.
    pub receipt: ModelReceipt,
    /// The payload.
    pub payload: Bytes,
    /// Deliveries on this queue, including this one.
    pub delivery_count: u32,
    /// When this lease runs out.
    pub deadline: Nanos,
    /// When this attempt began.
    pub received_at: Nanos,
    /// Deliveries over the message's life.
    pub fencing_token: u64,
    /// The dead-letter record, if the message was dead-lettered.
    pub dead_letter: Option<Arc<DeadLetterRecord>>,
}

/// A receive that passed its checks: how many messages it must return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceivePlan {
    /// Messages it returns: `min(max, ready)`.
    pub count: usize,
    visibility: u64,
}

#[derive(Debug, Clone)]
struct Queue {
    name: String,
    config: QueueConfig,
    shards: usize,
    deleted: bool,
    dead_letter: Option<QueueRef>,
    messages: BTreeMap<u64, Message>,
    /// (group, stay) of every ready message, oldest group first.
    ready: VecDeque<(u64, u64)>,
    counters: Counters,
    processing: Vec<u64>,
    time_in_queue: Vec<u64>,
    lease_left_at_ack: Vec<u64>,
}

impl Queue {
    fn has_room(&self) -> bool {
        self.messages.len() < self.config.max_messages
    }

    fn make_ready(&mut self, stay: u64, group: u64) {
        let group = if self.shards == 1 { group } else { 0 };
        self.ready.push_back((group, stay));
    }

    fn unlist_ready(&mut self, stay: u64) {
        self.ready.retain(|&(_, s)| s != stay);
    }
}

/// How an attempt failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    Expired,
    Released,
}

/// The reference model of one engine on a manual clock.
#[derive(Debug, Clone)]
pub struct Model {
    now: u64,
    default_shards: usize,
    queues: Vec<Queue>,
    /// Live queues by name.
    names: BTreeMap<String, QueueRef>,
    /// Number of the operation in progress: the ready group it creates.
    group: u64,
    next_stay: u64,
    ambiguity: Option<String>,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Model {
    /// An empty engine at time zero whose queues without a shard count get
    /// `default_shards`.
    pub fn new(default_shards: usize) -> Self {
        Model {
            now: 0,
            default_shards: default_shards.max(1),
            queues: Vec::new(),
            names: BTreeMap::new(),
            group: 0,
            next_stay: 0,
            ambiguity: None,
        }
    }

    /// The clock.
    pub fn now(&self) -> Nanos {
        Nanos(self.now)
    }

    /// Set once an operation had more than one outcome the contract allows and
    /// the model cannot tell which one the engine chose (two dead-letter
    /// arrivals in one instant competing for the last room); results after it
    /// are not comparable.
    pub fn ambiguity(&self) -> Option<&str> {
        self.ambiguity.as_deref()
    }

    fn begin(&mut self) {
        self.group += 1;
    }

    fn q(&self, queue: QueueRef) -> &Queue {
        &self.queues[queue.0]
    }

    fn qm(&mut self, queue: QueueRef) -> &mut Queue {
        &mut self.queues[queue.0]
    }

    /// The queue's name.
    pub fn name(&self, queue: QueueRef) -> &str {
        &self.q(queue).name
    }

    /// The queue's effective shard count.
    pub fn shards(&self, queue: QueueRef) -> usize {
        self.q(queue).shards
    }

    /// The live queue named `name`.
    pub fn queue(&self, name: &str) -> Option<QueueRef> {
        self.names.get(name).copied()
    }

    /// Names of the live queues, sorted.
    pub fn list_queues(&self) -> Vec<String> {
        self.names.keys().cloned().collect()
    }

    // ----- time ----------------------------------------------------------------

    /// Moves the clock forward and applies everything now due.
    pub fn advance(&mut self, by: Duration) {
        self.begin();
        self.now = self.now.saturating_add(nanos(by));
        self.settle();
    }

    /// Applies every lease expiry and every end of a delay due now, at now,
    /// after dropping what outlived its queue's retention.
    fn settle(&mut self) {
        self.drop_past_retention();
        let now = self.now;
        let mut due: Vec<(QueueRef, u64)> = Vec::new();
        for (index, queue) in self.queues.iter().enumerate() {
            for (&stay, message) in &queue.messages {
                let is_due = match message.state {
                    State::InFlight => message.deadline <= now,
                    State::Delayed { until } => until <= now,
                    State::Ready => false,
                };
                if is_due {
                    due.push((QueueRef(index), stay));
                }
            }
        }
        self.note_dead_letter_contention(&due);
        for (queue, stay) in due {
            let message = &self.q(queue).messages[&stay];
            match message.state {
                State::InFlight => {
                    let delay = nanos(self.q(queue).config.backoff.delay(message.id, message.delivery_count));
                    // An expired attempt ended at its deadline, whenever the
                    // clock happened to be moved past it.
                    let ended_at = message.deadline;
                    self.fail_attempt(queue, stay, Failure::Expired, ended_at, delay);
                }
                State::Delayed { .. } => {
                    let group = self.group;
                    let q = self.qm(queue);
                    q.messages.get_mut(&stay).expect("due message exists").state = State::Ready;
                    q.make_ready(stay, group);
                }
                State::Ready => unreachable!("ready messages are never due"),
            }
        }
    }

    /// Whether a message arrived on a queue with retention `retention` has
    /// outlived it now.
    fn past_retention(&self, retention: Option<Duration>, message: &Message) -> bool {
        retention.is_some_and(|r| self.now >= message.sent_at.saturating_add(nanos(r)))
    }

    /// Drops every ready or delayed message that outlived its queue's
    /// retention (an in-flight one keeps its lease: `fail_attempt` drops it
    /// when the attempt fails).
    fn drop_past_retention(&mut self) {
        for index in 0..self.queues.len() {
            let retention = self.queues[index].config.retention;
            let past: Vec<u64> = self.queues[index]
                .messages
                .iter()
                .filter(|(_, m)| m.state != State::InFlight && self.past_retention(retention, m))
                .map(|(&stay, _)| stay)
                .collect();
            let q = &mut self.queues[index];
            for stay in past {
                q.messages.remove(&stay);
                q.unlist_ready(stay);
                q.counters.retention_dropped += 1;
            }
        }
    }

    /// Changes a queue's retention; what the new period leaves past it goes.
    pub fn set_retention(&mut self, queue: QueueRef, retention: Option<Duration>) -> Result<(), Error> {
        self.begin();
        self.check_live(queue)?;
        if retention.is_some_and(|r| r.is_zero() || r > crate::validate::YEAR) {
            return Err(Error::InvalidConfig { field: "retention", reason: String::new() });
        }
        self.qm(queue).config.retention = retention;
        self.drop_past_retention();
        Ok(())
    }

    /// Points a queue's dead-letter link elsewhere (`Queue::set_dead_letter`):
    /// the rules of a config's link at creation, checked in the engine's
    /// order, plus no cycle through links set since.
    pub fn set_dead_letter(
        &mut self,
        queue: QueueRef,
        dead_letter_queue: Option<&str>,
        max_receives: Option<u32>,
    ) -> Result<(), Error> {
        self.begin();
        let mut probe = QueueConfig::default();
        probe.dead_letter_queue = dead_letter_queue.map(str::to_string);
        probe.max_receives = max_receives;
        match config_rule_broken(&probe) {
            Some(Broken::Field(field)) => return Err(Error::InvalidConfig { field, reason: String::new() }),
            Some(Broken::DeadLetterName(dlq)) => {
                return Err(Error::InvalidQueueName { name: dlq.chars().take(100).collect(), reason: "" });
            }
            None => {}
        }
        self.check_live(queue)?;
        let target = match dead_letter_queue {
            None => None,
            Some(name) => {
                let Some(&target) = self.names.get(name) else {
                    return Err(Error::DeadLetterQueueNotFound { name: name.to_string() });
                };
                let mut path = vec![self.q(queue).name.clone()];
                let mut next = Some(target);
                while let Some(at) = next {
                    path.push(self.q(at).name.clone());
                    if at == queue {
                        return Err(Error::DeadLetterCycle { path });
                    }
                    next = self.q(at).dead_letter;
                }
                if self.q(target).config.max_payload < self.q(queue).config.max_payload {
                    return Err(Error::InvalidConfig { field: "dead_letter_queue", reason: String::new() });
                }
                Some(target)
            }
        };
        let q = self.qm(queue);
        q.dead_letter = target;
        q.config.dead_letter_queue = dead_letter_queue.map(str::to_string);
        q.config.max_receives = max_receives;
        Ok(())
    }

    /// Expiries at the retry ceiling in one instant compete for room on their
    /// dead-letter queue; if some but not all fit, which ones do is open.
    fn note_dead_letter_contention(&mut self, due: &[(QueueRef, u64)]) {
        let mut arrivals: BTreeMap<usize, usize> = BTreeMap::new();
        for &(queue, stay) in due {
            let q = self.q(queue);
            let message = &q.messages[&stay];
            let at_ceiling = q.config.max_receives.is_some_and(|c| message.delivery_count >= c);
            if message.state == State::InFlight && at_ceiling {
                if let Some(dlq) = q.dead_letter {
                    *arrivals.entry(dlq.0).or_default() += 1;
                }
            }
        }
        for (dlq, count) in arrivals {
            let q = &self.queues[dlq];
            let room = q.config.max_messages.saturating_sub(q.messages.len());
            if !q.deleted && room > 0 && count > room && self.ambiguity.is_none() {
                self.ambiguity = Some(format!("{count} dead-letter arrivals for {room} free slots on '{}'", q.name));
            }
        }
    }

    // ----- queues ----------------------------------------------------------------

    /// Creates a queue; on error nothing is created.
    pub fn create_queue(&mut self, name: &str, config: QueueConfig) -> Result<QueueRef, Error> {
        self.begin();
        if !name_is_valid(name) {
            return Err(Error::InvalidQueueName { name: name.chars().take(100).collect(), reason: "" });
        }
        let config = as_created(config);
        match config_rule_broken(&config) {
            Some(Broken::Field(field)) => return Err(Error::InvalidConfig { field, reason: String::new() }),
            Some(Broken::DeadLetterName(dlq)) => {
                return Err(Error::InvalidQueueName { name: dlq.chars().take(100).collect(), reason: "" });
            }
            None => {}
        }
        if self.names.contains_key(name) {
            return Err(Error::QueueAlreadyExists { name: name.to_string() });
        }
        let dead_letter = match &config.dead_letter_queue {
            None => None,
            Some(dlq) if dlq == name => {
                return Err(Error::DeadLetterCycle { path: vec![name.to_string(), name.to_string()] });
            }
            Some(dlq) => match self.names.get(dlq) {
                Some(&r) => Some(r),
                None => return Err(Error::DeadLetterQueueNotFound { name: dlq.clone() }),
            },
        };
        // A dead-letter queue takes every payload its sources can hold.
        if dead_letter.is_some_and(|dlq| self.q(dlq).config.max_payload < config.max_payload) {
            return Err(Error::InvalidConfig { field: "dead_letter_queue", reason: String::new() });
        }
        let shards = config.shards.unwrap_or(self.default_shards).min(config.max_messages).max(1);
        let queue = QueueRef(self.queues.len());
        self.queues.push(Queue {
            name: name.to_string(),
            config,
            shards,
            deleted: false,
            dead_letter,
            messages: BTreeMap::new(),
            ready: VecDeque::new(),
            counters: Counters::default(),
            processing: Vec::new(),
            time_in_queue: Vec::new(),
            lease_left_at_ack: Vec::new(),
        });
        self.names.insert(name.to_string(), queue);
        Ok(queue)
    }

    /// Deletes a live queue and its messages, unless a live queue dead-letters into it.
    pub fn delete_queue(&mut self, name: &str) -> Result<(), Error> {
        self.begin();
        let Some(&queue) = self.names.get(name) else {
            return Err(Error::QueueNotFound { name: name.to_string() });
        };
        // `names` iterates sorted, so the first user is the alphabetically first.
        let user = self.names.iter().find(|(_, r)| self.q(**r).dead_letter == Some(queue));
        if let Some((used_by, _)) = user {
            return Err(Error::QueueInUse { name: name.to_string(), used_by: used_by.clone() });
        }
        self.names.remove(name);
        self.qm(queue).deleted = true;
        self.purge_all(queue);
        Ok(())
    }

    fn check_live(&self, queue: QueueRef) -> Result<(), Error> {
        let q = self.q(queue);
        if q.deleted {
            return Err(Error::QueueDeleted { name: q.name.clone() });
        }
        Ok(())
    }

    // ----- send ------------------------------------------------------------------

    /// Sends one message; `id` is the id it gets if accepted (ids are the
    /// engine's to choose; the caller checks they are unique).
    pub fn send(&mut self, queue: QueueRef, payload: Bytes, delay: Duration, id: MessageId) -> Result<(), Error> {
        self.begin();
        self.check_live(queue)?;
        let max = self.q(queue).config.max_delay;
        if delay > max {
            return Err(Error::DelayTooLong { requested: delay, max });
        }
        self.send_one(queue, payload, nanos(delay), id)
    }

    /// Sends several messages without delay; one result per payload. More
    /// than `MAX_BATCH` are refused whole.
    pub fn send_batch(&mut self, queue: QueueRef, payloads: Vec<(Bytes, MessageId)>) -> Vec<Result<(), Error>> {
        self.begin();
        let refusal = self.check_live(queue).and_then(|()| match payloads.len() {
            n if n > MAX_BATCH => Err(Error::InvalidBatchSize { requested: n, max: MAX_BATCH }),
            _ => Ok(()),
        });
        if let Err(e) = refusal {
            return payloads.iter().map(|_| Err(e.clone())).collect();
        }
        payloads.into_iter().map(|(payload, id)| self.send_one(queue, payload, 0, id)).collect()
    }

    fn send_one(&mut self, queue: QueueRef, payload: Bytes, delay: u64, id: MessageId) -> Result<(), Error> {
        let q = self.q(queue);
        if payload.len() > q.config.max_payload {
            return Err(Error::MessageTooLarge { size: payload.len(), max: q.config.max_payload });
        }
        if !q.has_room() {
            return Err(Error::QueueFull { capacity: q.config.max_messages, payload });
        }
        let message = Message::arrive(id, payload, self.now, 0, delay);
        self.arrive(queue, message);
        Ok(())
    }

    /// Places a message on `queue` (which has room) and counts it as sent.
    fn arrive(&mut self, queue: QueueRef, message: Message) {
        let stay = self.next_stay;
        self.next_stay += 1;
        let group = self.group;
        let ready = message.state == State::Ready;
        let mut message = message;
        message.arrival_group = group;
        let q = self.qm(queue);
        q.messages.insert(stay, message);
        if ready {
            q.make_ready(stay, group);
        }
        q.counters.sent += 1;
    }

    // ----- receive -----------------------------------------------------------------

    /// Checks a receive and says how many messages it returns.
    pub fn receive_plan(
        &mut self,
        queue: QueueRef,
        max: usize,
        visibility: Option<Duration>,
    ) -> Result<ReceivePlan, Error> {
        self.begin();
        self.check_live(queue)?;
        if max == 0 || max > MAX_BATCH {
            return Err(Error::InvalidBatchSize { requested: max, max: MAX_BATCH });
        }
        let q = self.q(queue);
        let visibility = match visibility {
            None => nanos(q.config.visibility_timeout),
            Some(v) if v > q.config.max_visibility => {
                return Err(Error::VisibilityTooLong { requested: v, max: q.config.max_visibility });
            }
            Some(v) => nanos(v),
        };
        Ok(ReceivePlan { count: max.min(q.ready.len()), visibility })
    }

    /// The ready messages in groups, oldest group first; order inside a
    /// group is open.
    pub fn ready_groups(&self, queue: QueueRef) -> Vec<Vec<MessageId>> {
        let q = self.q(queue);
        let mut groups: Vec<(u64, Vec<MessageId>)> = Vec::new();
        for &(group, stay) in &q.ready {
            let id = q.messages[&stay].id;
            match groups.last_mut() {
                Some((g, ids)) if *g == group => ids.push(id),
                _ => groups.push((group, vec![id])),
            }
        }
        groups.into_iter().map(|(_, ids)| ids).collect()
    }

    /// Whether a receive may return `ids`, in this order: the right number,
    /// each ready, none twice, taken whole groups oldest first (the last group
    /// taken may be partial) and in group order.
    pub fn check_choice(&self, queue: QueueRef, plan: ReceivePlan, ids: &[MessageId]) -> Result<(), String> {
        if ids.len() != plan.count {
            return Err(format!("returned {} messages, the contract says {}", ids.len(), plan.count));
        }
        let groups = self.ready_groups(queue);
        let group_of = |id: &MessageId| groups.iter().position(|g| g.contains(id));
        let mut last_group = 0;
        for (k, id) in ids.iter().enumerate() {
            let Some(group) = group_of(id) else {
                return Err(format!("returned {id}, which is not ready"));
            };
            if ids[..k].contains(id) {
                return Err(format!("returned {id} twice"));
            }
            if group < last_group {
                return Err(format!("returned {id} after a message that became ready later"));
            }
            last_group = group;
        }
        if let Some(skipped) = groups[..last_group.min(groups.len())].iter().flatten().find(|id| !ids.contains(id)) {
            return Err(format!("skipped {skipped}, which became ready before the messages returned"));
        }
        Ok(())
    }

    /// Receives the messages a checked plan allows (`ids` passed `check_choice`).
    pub fn receive_chosen(&mut self, queue: QueueRef, plan: ReceivePlan, ids: &[MessageId]) -> Vec<ModelDelivery> {
        let now = self.now;
        let deadline = now.saturating_add(plan.visibility);
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let q = self.qm(queue);
            let stay = q.ready.iter().map(|&(_, s)| s).find(|s| q.messages[s].id == *id).expect("checked choice");
            q.unlist_ready(stay);
            let m = q.messages.get_mut(&stay).expect("listed messages exist");
            m.delivery_count = m.delivery_count.saturating_add(1);
            m.lifetime_deliveries = m.lifetime_deliveries.saturating_add(1);
            m.received_at = now;
            m.deadline = deadline;
            m.expired_attempt = None;
            m.state = State::InFlight;
            let delivery = ModelDelivery {
                id: m.id,
                receipt: ModelReceipt::Genuine { queue, stay, attempt: m.delivery_count },
                payload: m.payload.clone(),
                delivery_count: m.delivery_count,
                deadline: Nanos(deadline),
                received_at: Nanos(now),
                fencing_token: u64::from(m.lifetime_deliveries),
                dead_letter: m.dead_letter.clone(),
            };
            let first = m.delivery_count == 1;
            let waited = now.saturating_sub(m.sent_at);
            q.counters.received += 1;
            if first {
                q.time_in_queue.push(waited);
            } else {
                q.counters.redelivered += 1;
            }
            out.push(delivery);
        }
        // A zero visibility grants a lease that is over already.
        self.settle();
        out
    }

    /// Receives with the model's own choice (oldest first).
    pub fn receive(
        &mut self,
        queue: QueueRef,
        max: usize,
        visibility: Option<Duration>,
    ) -> Result<Vec<ModelDelivery>, Error> {
        let plan = self.receive_plan(queue, max, visibility)?;
        let ids: Vec<MessageId> = self.ready_groups(queue).into_iter().flatten().take(plan.count).collect();
        Ok(self.receive_chosen(queue, plan, &ids))
    }

    // ----- receipts ------------------------------------------------------------------

    /// The stay and attempt a receipt names, refusing it as the engine must:
    /// deleted queue, then foreign engine, then wrong queue, then tampering.
    fn locate(&self, queue: QueueRef, receipt: &ModelReceipt) -> Result<(u64, u32), LeaseError> {
        let q = self.q(queue);
        if q.deleted {
            return Err(LeaseError::QueueDeleted);
        }
        let wrong_queue = || LeaseError::InvalidReceipt(ReceiptError::WrongQueue { presented_to: q.name.clone() });
        match *receipt {
            ModelReceipt::ForeignEngine => Err(LeaseError::InvalidReceipt(ReceiptError::WrongEngine)),
            ModelReceipt::Tampered { queue: of } | ModelReceipt::Genuine { queue: of, .. } if of != queue => {
                Err(wrong_queue())
            }
            ModelReceipt::Tampered { .. } => Err(LeaseError::InvalidReceipt(ReceiptError::Forged)),
            ModelReceipt::Genuine { stay, attempt, .. } => Ok((stay, attempt)),
        }
    }

    /// The message leased by this attempt, if the attempt still holds it.
    fn holder(&self, queue: QueueRef, stay: u64, attempt: u32) -> Option<&Message> {
        self.q(queue).messages.get(&stay).filter(|m| m.state == State::InFlight && m.delivery_count == attempt)
    }

    /// Whether the message waits because this attempt's lease ran out (and
    /// nobody has received it since).
    fn expired_here(&self, queue: QueueRef, stay: u64, attempt: u32) -> bool {
        self.q(queue).messages.get(&stay).is_some_and(|m| m.expired_attempt == Some(attempt))
    }

    fn why_not_held(&self, queue: QueueRef, stay: u64, attempt: u32) -> LeaseError {
        if self.expired_here(queue, stay, attempt) { LeaseError::Expired } else { LeaseError::Stale }
    }

    // ----- ack -------------------------------------------------------------------------

    /// Acks the attempt `receipt` names.
    pub fn ack(&mut self, queue: QueueRef, receipt: &ModelReceipt) -> Result<(), LeaseError> {
        self.begin();
        let (stay, attempt) = self.locate(queue, receipt)?;
        let now = self.now;
        let reject_late = self.q(queue).config.late_ack == LateAck::Reject;
        let late = if let Some(m) = self.holder(queue, stay, attempt) {
            now >= m.deadline
        } else if self.expired_here(queue, stay, attempt) {
            true
        } else {
            self.qm(queue).counters.stale_acks += 1;
            return Err(LeaseError::Stale);
        };
        let q = self.qm(queue);
        if late && reject_late {
            q.counters.expired_acks += 1;
            return Err(LeaseError::Expired);
        }
        let m = q.messages.remove(&stay).expect("held or expired-here messages exist");
        q.unlist_ready(stay);
        q.counters.acked += 1;
        if late {
            q.counters.late_acks += 1;
        }
        q.processing.push(now.saturating_sub(m.received_at));
        q.lease_left_at_ack.push(m.deadline.saturating_sub(now));
        Ok(())
    }

    // ----- extend ----------------------------------------------------------------------

    /// Extends the lease to now + `visibility`; returns the new deadline.
    pub fn extend(
        &mut self,
        queue: QueueRef,
        receipt: &ModelReceipt,
        visibility: Duration,
    ) -> Result<Nanos, LeaseError> {
        self.begin();
        let (stay, attempt) = self.locate(queue, receipt)?;
        let config = &self.q(queue).config;
        if visibility > config.max_visibility {
            return Err(LeaseError::VisibilityTooLong { requested: visibility, max: config.max_visibility });
        }
        let (max_lease, max_lease_nanos) = (config.max_lease, nanos(config.max_lease));
        let now = self.now;
        let refused = match self.holder(queue, stay, attempt) {
            None => Some(self.why_not_held(queue, stay, attempt)),
            Some(m) if now >= m.deadline => Some(LeaseError::Expired),
            Some(m) if now.saturating_add(nanos(visibility)).saturating_sub(m.received_at) > max_lease_nanos => {
                Some(LeaseError::CapExceeded { max_lease })
            }
            Some(_) => None,
        };
        let q = self.qm(queue);
        if let Some(error) = refused {
            q.counters.extensions_refused += 1;
            return Err(error);
        }
        let extended = now.saturating_add(nanos(visibility));
        q.messages.get_mut(&stay).expect("held").deadline = extended;
        q.counters.extensions += 1;
        self.settle();
        Ok(Nanos(extended))
    }

    // ----- release and dead-letter ------------------------------------------------------

    /// Ends the attempt; the message is receivable again after `delay`
    /// (`None`: the queue's backoff), or dead-lettered at the retry ceiling.
    pub fn release(
        &mut self,
        queue: QueueRef,
        receipt: &ModelReceipt,
        delay: Option<Duration>,
    ) -> Result<(), LeaseError> {
        self.begin();
        let (stay, attempt) = self.locate(queue, receipt)?;
        let max = self.q(queue).config.max_delay;
        if let Some(delay) = delay.filter(|d| *d > max) {
            return Err(LeaseError::DelayTooLong { requested: delay, max });
        }
        let m = self.holder(queue, stay, attempt).ok_or_else(|| self.why_not_held(queue, stay, attempt))?;
        if self.now >= m.deadline {
            return Err(LeaseError::Expired);
        }
        let delay = delay.unwrap_or_else(|| self.q(queue).config.backoff.delay(m.id, m.delivery_count));
        let now = self.now;
        self.fail_attempt(queue, stay, Failure::Released, now, nanos(delay));
        Ok(())
    }

    /// Moves the leased message to the dead-letter queue now.
    pub fn dead_letter(&mut self, queue: QueueRef, receipt: &ModelReceipt, reason: &str) -> Result<(), LeaseError> {
        self.begin();
        let (stay, attempt) = self.locate(queue, receipt)?;
        let Some(dlq) = self.q(queue).dead_letter else {
            return Err(LeaseError::NoDeadLetterQueue);
        };
        let m = self.holder(queue, stay, attempt).ok_or_else(|| self.why_not_held(queue, stay, attempt))?;
        if self.now >= m.deadline {
            return Err(LeaseError::Expired);
        }
        let last = AttemptRecord {
            delivery: m.delivery_count,
            received_at: Nanos(m.received_at),
            ended_at: Nanos(self.now),
            outcome: AttemptOutcome::DeadLettered(reason.to_string()),
        };
        if !self.move_to_dead_letter(queue, stay, last, DeadLetterReason::Explicit(reason.to_string())) {
            return Err(LeaseError::DeadLetterQueueFull { name: self.q(dlq).name.clone() });
        }
        Ok(())
    }

    /// Ends a failed attempt that ended at `ended_at`: to the dead-letter
    /// queue at the retry ceiling (if it has room), else receivable again at
    /// `ended_at + delay` (at once if that is not after now).
    fn fail_attempt(&mut self, queue: QueueRef, stay: u64, failure: Failure, ended_at: u64, delay: u64) {
        let now = self.now;
        let group = self.group;
        let q = self.q(queue);
        let m = &q.messages[&stay];
        let (outcome, reason) = match failure {
            Failure::Expired => (AttemptOutcome::Expired, DeadLetterReason::Expired),
            Failure::Released => (AttemptOutcome::Released, DeadLetterReason::Released),
        };
        let attempt = AttemptRecord {
            delivery: m.delivery_count,
            received_at: Nanos(m.received_at),
            ended_at: Nanos(ended_at),
            outcome,
        };
        let at_ceiling = q.config.max_receives.is_some_and(|ceiling| m.delivery_count >= ceiling);
        let linked = q.dead_letter.is_some();
        let count = |c: &mut Counters| match failure {
            Failure::Expired => c.expired += 1,
            Failure::Released => c.released += 1,
        };
        if self.past_retention(q.config.retention, m) {
            // Outlived the retention while in flight: dropped, not made
            // eligible again or dead-lettered.
            let q = self.qm(queue);
            q.messages.remove(&stay);
            count(&mut q.counters);
            q.counters.retention_dropped += 1;
            return;
        }
        if at_ceiling {
            if self.move_to_dead_letter(queue, stay, attempt.clone(), reason) {
                count(&mut self.qm(queue).counters);
                return;
            }
            self.qm(queue).counters.dead_letter_overflow += 1;
        }
        let q = self.qm(queue);
        count(&mut q.counters);
        let m = q.messages.get_mut(&stay).expect("failing message exists");
        let attempt_number = m.delivery_count;
        if linked {
            // As the engine: a failure is remembered for a dead-letter
            // record only while there is a dead-letter queue to move to.
            m.remember(attempt);
        }
        m.expired_attempt = (failure == Failure::Expired).then_some(attempt_number);
        let eligible_at = ended_at.saturating_add(delay);
        if eligible_at > now {
            m.state = State::Delayed { until: eligible_at };
        } else {
            m.state = State::Ready;
            q.make_ready(stay, group);
        }
    }

    /// Moves a leased message to its queue's dead-letter queue with a record;
    /// false (nothing changed) if there is none or it is full or deleted.
    fn move_to_dead_letter(
        &mut self,
        queue: QueueRef,
        stay: u64,
        last: AttemptRecord,
        reason: DeadLetterReason,
    ) -> bool {
        let now = self.now;
        let q = self.q(queue);
        let Some(dlq) = q.dead_letter else {
            return false;
        };
        if self.q(dlq).deleted || !self.q(dlq).has_room() {
            return false;
        }
        let m = &q.messages[&stay];
        let mut attempts = m.failures.clone();
        attempts.push(last);
        if attempts.len() > MAX_ATTEMPT_RECORDS {
            attempts.drain(..attempts.len() - MAX_ATTEMPT_RECORDS);
        }
        let record = DeadLetterRecord {
            source_queue: q.name.clone(),
            reason,
            delivery_count: m.delivery_count,
            attempts,
            dead_lettered_at: Nanos(now),
        };
        let mut arrival = Message::arrive(m.id, m.payload.clone(), now, m.lifetime_deliveries, 0);
        arrival.dead_letter = Some(Arc::new(record));
        let q = self.qm(queue);
        q.messages.remove(&stay);
        q.counters.dead_lettered += 1;
        self.arrive(dlq, arrival);
        true
    }

    // ----- purge and redrive ----------------------------------------------------------------

    /// Removes every message; returns how many.
    pub fn purge(&mut self, queue: QueueRef) -> Result<u64, Error> {
        self.begin();
        self.check_live(queue)?;
        Ok(self.purge_all(queue))
    }

    fn purge_all(&mut self, queue: QueueRef) -> u64 {
        let q = self.qm(queue);
        let purged = q.messages.len() as u64;
        q.messages.clear();
        q.ready.clear();
        q.counters.purged += purged;
        purged
    }

    fn redrive_ends(&self, from: &str, to: &str) -> Result<(QueueRef, QueueRef), Error> {
        let from_ref = self.queue(from).ok_or_else(|| Error::QueueNotFound { name: from.to_string() })?;
        let to_ref = self.queue(to).ok_or_else(|| Error::QueueNotFound { name: to.to_string() })?;
        if from_ref == to_ref {
            return Err(Error::InvalidConfig { field: "to", reason: String::new() });
        }
        Ok((from_ref, to_ref))
    }

    /// Whether a redrive of `max` from `from` to `to` has one outcome the
    /// model can name: the messages it moves, and (if `to` fills up) the one
    /// it tried and put back behind the others, are not split from a ready
    /// group whose inner order is open.
    pub fn redrive_is_determined(&self, from: &str, to: &str, max: usize) -> bool {
        let Ok((from, to)) = self.redrive_ends(from, to) else {
            return true;
        };
        let room = self.q(to).config.max_messages.saturating_sub(self.q(to).messages.len());
        let limit = self.q(to).config.max_payload;
        let source = self.q(from);
        let fitting = source.ready.iter().filter(|(_, stay)| source.messages[stay].payload.len() <= limit).count();
        if fitting < source.ready.len() {
            // Which messages too large for `to` a redrive passes over depends
            // on where it stops in an order the model leaves open, unless it
            // looks at every ready message: it moves all that fit and has
            // room for them.
            return max == 0 || (max > fitting && room >= fitting);
        }
        let groups = self.ready_groups(from);
        let ready: usize = groups.iter().map(Vec::len).sum();
        let wanted = max.min(ready);
        let moved = wanted.min(room);
        let mut boundaries = vec![0];
        for g in &groups {
            boundaries.push(boundaries.last().unwrap() + g.len());
        }
        if !boundaries.contains(&moved) {
            return false;
        }
        if moved < wanted {
            // The next message is tried and put back: it must be alone in its group.
            let next_group = boundaries.iter().position(|&b| b == moved).unwrap();
            return groups[next_group].len() == 1;
        }
        true
    }

    /// Moves up to `max` ready messages from `from` to `to` (oldest first),
    /// keeping ids, payloads and fencing tokens and dropping delivery counts
    /// and records. Stops when `to` is full; the message that did not fit goes
    /// behind the other ready messages of `from`. Messages above `to`'s
    /// `max_payload` are passed over, counted, and go behind the others too.
    pub fn redrive(&mut self, from: &str, to: &str, max: usize) -> Result<usize, Error> {
        self.begin();
        let (from, to) = self.redrive_ends(from, to)?;
        let now = self.now;
        let group = self.group;
        let limit = self.q(to).config.max_payload;
        let mut moved = 0;
        let mut too_large = Vec::new();
        while moved < max {
            let Some(&(_, stay)) = self.q(from).ready.front() else {
                break;
            };
            if self.q(from).messages[&stay].payload.len() > limit {
                self.qm(from).ready.pop_front();
                too_large.push(stay);
                continue;
            }
            if !self.q(to).has_room() {
                let q = self.qm(from);
                q.ready.pop_front();
                q.make_ready(stay, group);
                break;
            }
            let q = self.qm(from);
            q.ready.pop_front();
            let m = q.messages.remove(&stay).expect("listed messages exist");
            q.counters.redriven_out += 1;
            let arrival = Message::arrive(m.id, m.payload, now, m.lifetime_deliveries, 0);
            self.arrive(to, arrival);
            moved += 1;
        }
        let q = self.qm(from);
        q.counters.redrive_too_large += too_large.len() as u64;
        for stay in too_large {
            q.make_ready(stay, group);
        }
        Ok(moved)
    }

    // ----- stats -------------------------------------------------------------------------

    /// What `stats()` must report (works on deleted queues too).
    pub fn stats(&self, queue: QueueRef) -> ModelStats {
        let q = self.q(queue);
        let count = |f: fn(&State) -> bool| q.messages.values().filter(|m| f(&m.state)).count() as u64;
        let ready = count(|s| *s == State::Ready);
        let oldest = q.messages.values().filter(|m| m.state == State::Ready).map(|m| m.sent_at).min();
        ModelStats {
            ready,
            delayed: count(|s| matches!(s, State::Delayed { .. })),
            in_flight: count(|s| *s == State::InFlight),
            dead_letter_depth: q.dead_letter.map_or(0, |d| self.q(d).messages.len() as u64),
            oldest_ready_age: oldest.map(|sent| Duration::from_nanos(self.now.saturating_sub(sent))),
            counters: q.counters.clone(),
            visibility_timeout: q.config.visibility_timeout,
            processing: q.processing.clone(),
            time_in_queue: q.time_in_queue.clone(),
            lease_left_at_ack: q.lease_left_at_ack.clone(),
        }
    }
}
