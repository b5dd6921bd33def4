//! The message lifecycle: the work each lease transition does under its claim.
//!
//! Each function here is one row of the transition table in docs/design.md:
//! it claims the slot's lease word (`lease.rs`), reads and writes the slot's
//! fields with exclusive access, records the transition in the shard's
//! counters, publishes the next word, and only then touches shared queues
//! (ready queue, timer inbox, waiters). Invariants:
//!
//! * A message is always in exactly one place: a slot of one queue, reachable
//!   through one live ready entry (`Ready`), one timer entry (`Delayed`,
//!   `InFlight`), or a receipt (`InFlight`). Moves between queues (dead-letter,
//!   redrive) insert into the destination before freeing the source, and undo
//!   nothing: if the destination is full the source keeps the message.
//! * Gauge inflows are counted before the publish that makes the message
//!   reachable, outflows after the claim that takes it, so a concurrent reader
//!   never sees a negative gauge (see `stats.rs`).
//! * A refused operation (stale, expired, over a cap, destination full)
//!   reverts its claim and changes nothing but a "refused" counter.

use std::time::Duration;

use bytes::Bytes;

use crate::clock::{Nanos, duration_nanos};
use crate::config::LateAck;
use crate::dead_letter::{
    AttemptOutcome, AttemptRecord, DeadLetterNote, DeadLetterReason, DeadLetterRecord, MAX_ATTEMPT_RECORDS,
};
use crate::delivery::Delivery;
use crate::error::{Error, LeaseError, ReceiptError};
use crate::identity::Identity;
use crate::journal::{Journal, Record, StorageFailure, SyncPolicy};
use crate::lease::{Claim, Phase, Word, next, next_generation};
use crate::queue::QueueCore;
use crate::ready::ReadyEntry;
use crate::receipt::{MessageId, Receipt};
use crate::shard::Shard;
use crate::slot::{History, Slot};
use crate::stats::{Counter, Distribution};
use crate::sync::Ordering;
use crate::timers::WheelState;
use crate::wheel::TimerEntry;

/// Entries one driver tick examines per shard when sweeping out ended
/// timers: bounds how long the tick holds the wheel (a few hundred
/// microseconds at a cache miss per entry).
const SWEEP_BUDGET: usize = 4096;
/// Entries a shard's wheel may hold beyond twice its slots before a sweep
/// starts.
const SWEEP_SLACK: usize = 1024;

/// A message arriving from elsewhere (send, dead-letter, redrive, or the
/// log at open).
#[derive(Debug)]
pub(crate) struct Arrival {
    pub(crate) id: Option<MessageId>,
    /// When it arrived on this queue (engine time), if before now: a message
    /// restored from the log keeps its arrival time, which the queue's
    /// retention counts from.
    pub(crate) arrived_at: Option<u64>,
    pub(crate) payload: Bytes,
    pub(crate) lifetime_deliveries: u32,
    pub(crate) history: Option<Box<History>>,
    /// Deliveries it already had on this queue (non-zero only when restored
    /// from the log).
    pub(crate) delivery_count: u32,
    pub(crate) origin: Origin,
}

impl Arrival {
    /// A user's send at Unix time `at`, maturing at `deliver_at` (both
    /// only logged, so 0 on an in-memory engine).
    pub(crate) fn sent(payload: Bytes, at: u64, deliver_at: u64) -> Self {
        Arrival {
            id: None,
            arrived_at: None,
            payload,
            lifetime_deliveries: 0,
            history: None,
            delivery_count: 0,
            origin: Origin::Send { at, deliver_at },
        }
    }
}

/// Where an arriving message comes from, which decides what the journal
/// records for it (docs/durability.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// A user's send at Unix time `at` (nanoseconds); `deliver_at` is the
    /// Unix time it matures at (0: at once).
    Send { at: u64, deliver_at: u64 },
    /// Moved here from queue `from` (dead-letter, redrive).
    Moved { from: u32 },
    /// Restored from the log when a durable engine opened: already recorded.
    Restored,
}

/// A message written into a slot its thread owns, not yet published: a send
/// under `SyncPolicy::Always` publishes only once its record is durable.
pub(crate) struct Staged<'s> {
    shard: &'s Shard,
    index: u32,
    slot: &'s Slot,
    pub(crate) id: MessageId,
    delay: u64,
    /// When it arrived here (engine time): its `sent_at`.
    arrived_at: u64,
}

/// Where `send_one_staging` left a message.
pub(crate) enum SendStep<'s> {
    /// Sent and receivable (or delayed): nothing to wait for.
    Sent(MessageId),
    /// Staged, waiting for its record (this sequence number) to be durable.
    Staged(Staged<'s>, u64),
}

/// Where `send_many_staging` left a batch.
pub(crate) struct StagedBatch<'s> {
    /// One result per payload; a staged message's is its id, final only
    /// once its record is durable.
    pub(crate) results: Vec<Result<MessageId, Error>>,
    /// The staged messages, with the index of their result.
    pub(crate) staged: Vec<(usize, Staged<'s>)>,
    /// The record to wait on; `None`: nothing is staged, the results are
    /// final.
    pub(crate) seq: Option<u64>,
}

/// A `Staged` message without its borrows, for a future that outlives the
/// call that staged it (`commit.rs`); `QueueCore::reattach` turns it back.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DetachedStage {
    shard: usize,
    index: u32,
    id: MessageId,
    delay: u64,
    arrived_at: u64,
}

impl Staged<'_> {
    pub(crate) fn detach(self) -> DetachedStage {
        let Staged { shard, index, id, delay, arrived_at, .. } = self;
        DetachedStage { shard: usize::from(shard.index), index, id, delay, arrived_at }
    }
}

/// How an attempt failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    Expired,
    Released,
}

impl QueueCore {
    /// The time an operation is stamped with (`Clock::now_relaxed`: the
    /// engine never orders transitions by comparing stamps).
    #[inline]
    pub(crate) fn now(&self) -> u64 {
        self.engine.clock.now_relaxed().0
    }

    /// Makes sure slot `index` has a timer at `deadline` or earlier, after
    /// the caller published the lease or delay that ends then: usually an
    /// entry queued for an earlier lease of the slot covers it (`Slot::arm`),
    /// and nothing is queued. A new entry tells a sleeping driver about a
    /// deadline earlier than any its shard had.
    #[inline]
    fn schedule(&self, shard: &Shard, index: u32, slot: &Slot, deadline: u64) {
        if slot.arm(deadline) && shard.timers.schedule(TimerEntry { deadline, slot: index }) {
            self.engine.driver.deadline_added(deadline);
        }
    }

    /// Engine time `t` (at or after `now`) as Unix nanoseconds, for records
    /// a replica reads on another clock.
    fn unix_at(&self, t: u64, now: u64) -> u64 {
        self.engine.clock.unix_now().saturating_add(t.saturating_sub(now)).max(1)
    }

    /// The earliest deadline any shard of this queue may hold (a lower bound),
    /// or `u64::MAX`.
    pub(crate) fn next_due(&self) -> u64 {
        self.shards.iter().map(|shard| shard.timers.next_due()).min().unwrap_or(u64::MAX)
    }

    // ----- send ------------------------------------------------------------

    /// Sends one message. Errors change nothing and hand the payload back.
    pub(crate) fn send_one(&self, payload: Bytes, delay: u64, now: u64) -> Result<MessageId, Error> {
        match self.send_one_staging(payload, delay, now)? {
            SendStep::Sent(id) => Ok(id),
            SendStep::Staged(staged, seq) => {
                let durable = self.journal().map_or(Ok(()), |journal| journal.wait_durable(seq));
                self.finish_staged(staged, durable, now)
            }
        }
    }

    /// `send_one` up to the wait for its record: under `SyncPolicy::Always`
    /// the message is staged and its record's sequence number returned, for
    /// the caller to wait on (a thread, or a task in `commit.rs`) and then
    /// `finish_staged`; otherwise it is sent.
    #[inline]
    pub(crate) fn send_one_staging(&self, payload: Bytes, delay: u64, now: u64) -> Result<SendStep<'_>, Error> {
        self.check_send(&payload)?;
        let Some(journal) = self.journal() else {
            let arrival = Arrival::sent(payload, 0, 0);
            return self.accept(arrival, delay, now).map(SendStep::Sent).map_err(|arrival| self.full(arrival.payload));
        };
        let unix_now = self.engine.clock.unix_now();
        let arrival = Arrival::sent(payload, unix_now, crate::journal::deliver_at(unix_now, delay));
        if journal.policy != SyncPolicy::Always {
            return self.accept(arrival, delay, now).map(SendStep::Sent).map_err(|arrival| self.full(arrival.payload));
        }
        // Always: the message becomes receivable only once its record is on
        // disk, so a failed write refuses the send and changes nothing, and
        // no consumer sees a message a crash could then take back.
        let staged = self.stage(arrival, delay, now).map_err(|arrival| self.full(arrival.payload))?;
        match journal.last_pushed_here() {
            Some(seq) => Ok(SendStep::Staged(staged, seq)),
            // Unreachable (staging a send pushes its record); publishing is
            // then what the record's absence allows.
            None => {
                let id = staged.id;
                self.publish_staged(staged, now);
                Ok(SendStep::Sent(id))
            }
        }
    }

    /// Publishes a staged message once its record is durable, or takes it
    /// back out (handing the payload back in the error) if the record failed.
    pub(crate) fn finish_staged(
        &self,
        staged: Staged<'_>,
        durable: Result<(), StorageFailure>,
        now: u64,
    ) -> Result<MessageId, Error> {
        match durable {
            Ok(()) => {
                let id = staged.id;
                self.publish_staged(staged, now);
                Ok(id)
            }
            Err(failure) => Err(Error::storage(failure, Some(self.unstage(staged)))),
        }
    }

    /// Sends several messages at `now`, receivable at once; one result per
    /// payload, in order. Under `SyncPolicy::Always` the records of every
    /// message the batch placed are synced as one group before any of them is
    /// published.
    pub(crate) fn send_many(&self, payloads: impl Iterator<Item = Bytes>, now: u64) -> Vec<Result<MessageId, Error>> {
        let StagedBatch { mut results, staged, seq } = self.send_many_staging(payloads, now);
        if let Some(seq) = seq {
            let durable = self.journal().map_or(Ok(()), |journal| journal.wait_durable(seq));
            self.finish_many(&mut results, staged, &durable, now);
        }
        results
    }

    /// `send_many` up to the wait for its group.
    pub(crate) fn send_many_staging(&self, payloads: impl Iterator<Item = Bytes>, now: u64) -> StagedBatch<'_> {
        let Some(journal) = self.journal().filter(|j| j.policy == SyncPolicy::Always) else {
            let results = payloads.map(|payload| self.send_one(payload, 0, now)).collect();
            return StagedBatch { results, staged: Vec::new(), seq: None };
        };
        let mut results = Vec::new();
        let mut staged = Vec::new();
        let unix_now = self.engine.clock.unix_now();
        for payload in payloads {
            let result = self.check_send(&payload).and_then(|()| {
                self.stage(Arrival::sent(payload, unix_now, 0), 0, now).map_err(|arrival| self.full(arrival.payload))
            });
            match result {
                Ok(message) => {
                    results.push(Ok(message.id));
                    staged.push((results.len() - 1, message));
                }
                Err(error) => results.push(Err(error)),
            }
        }
        let seq = if staged.is_empty() { None } else { journal.last_pushed_here() };
        if seq.is_none() {
            // Nothing staged, or (unreachable) no record to wait for.
            staged.drain(..).for_each(|(_, message)| self.publish_staged(message, now));
        }
        StagedBatch { results, staged, seq }
    }

    /// Publishes a batch's staged messages once their group is durable, or
    /// takes every one back out, turning its result into the failure.
    pub(crate) fn finish_many(
        &self,
        results: &mut [Result<MessageId, Error>],
        staged: Vec<(usize, Staged<'_>)>,
        durable: &Result<(), StorageFailure>,
        now: u64,
    ) {
        match durable {
            Ok(()) => staged.into_iter().for_each(|(_, message)| self.publish_staged(message, now)),
            Err(failure) => {
                for (at, message) in staged {
                    results[at] = Err(Error::storage(failure.clone(), Some(self.unstage(message))));
                }
            }
        }
    }

    /// Restores a message from the log at open (no record: the log has it),
    /// receivable after `delay`; hands it back if the queue is full.
    pub(crate) fn restore(&self, arrival: Arrival, delay: u64) -> Result<MessageId, Arrival> {
        debug_assert_eq!(arrival.origin, Origin::Restored);
        self.accept(arrival, delay, self.now())
    }

    /// Restores a message whose last attempt's lease is still in force
    /// (`Free(g)` -> `InFlight(g + 1)` at once, restore only): a replicated
    /// engine's failover at the retry ceiling, where the attempt has not
    /// failed yet. Its lease ends `lease_left` from now and then expires as
    /// any lease does (to the dead-letter queue at the ceiling). No receipt
    /// names it: the engine that granted the lease is gone.
    pub(crate) fn restore_leased(&self, arrival: Arrival, lease_left: u64) -> Result<MessageId, Arrival> {
        debug_assert_eq!(arrival.origin, Origin::Restored);
        let now = self.now();
        let Staged { shard, index, slot, id, arrived_at, .. } = self.stage(arrival, 0, now)?;
        let deadline = now.saturating_add(lease_left);
        slot.set_sent_at(arrived_at);
        // SAFETY: the slot is staged, not published: this thread owns it.
        unsafe {
            slot.body_mut(|body| {
                body.received_at = now;
                body.deadline = deadline;
            });
        }
        let published = next::received(next::sent(slot.lease.load(), false));
        slot.reset_late_calls(published.generation());
        // Counted before the publish, as a send is: the in-flight inflow.
        shard.stats.add(Counter::RestoredInFlight, 1);
        slot.lease.publish_owned(published);
        self.schedule(shard, index, slot, deadline);
        Ok(id)
    }

    /// The checks every send passes before it touches a slot.
    pub(crate) fn check_send(&self, payload: &Bytes) -> Result<(), Error> {
        if payload.len() > self.config.max_payload {
            return Err(Error::MessageTooLarge { size: payload.len(), max: self.config.max_payload });
        }
        if let Some(journal) = self.journal() {
            if let Some(failure) = journal.refusal() {
                return Err(Error::storage(failure, Some(payload.clone())));
            }
            journal.throttle();
        }
        Ok(())
    }

    /// The error of a send that found every shard full.
    pub(crate) fn full(&self, payload: Bytes) -> Error {
        Error::QueueFull { capacity: self.config.max_messages, payload }
    }

    /// The engine's journal, for a durable engine.
    #[inline]
    pub(crate) fn journal(&self) -> Option<&Journal> {
        self.engine.journal.as_deref()
    }

    /// Places a message in a free slot (home shard first), or hands it back
    /// if every shard is full (after dropping what outlived the retention,
    /// which may make room).
    pub(crate) fn accept(&self, arrival: Arrival, delay: u64, now: u64) -> Result<MessageId, Arrival> {
        let staged = self.stage(arrival, delay, now)?;
        let id = staged.id;
        self.publish_staged(staged, now);
        Ok(id)
    }

    /// Writes a message into a free slot (home shard first) without
    /// publishing it, and hands its record to the journal; hands the message
    /// back if every shard is full.
    pub(crate) fn stage(&self, arrival: Arrival, delay: u64, now: u64) -> Result<Staged<'_>, Arrival> {
        for pass in 0..2 {
            for index in self.ring.walk() {
                let shard = &self.shards[index];
                if let Some((index, slot)) = shard.slab.allocate() {
                    let id = arrival.id.unwrap_or_else(|| shard.next_id(&self.engine.id_blocks, self.journal()));
                    let arrived_at = arrival.arrived_at.unwrap_or(now);
                    self.fill(slot, id, arrival, delay, now);
                    return Ok(Staged { shard, index, slot, id, delay, arrived_at });
                }
            }
            // Full: messages past the retention hold room nobody may use.
            if pass == 1 || self.drop_past_retention(now) == 0 {
                break;
            }
        }
        Err(arrival)
    }

    /// A detached stage of this queue as the `Staged` it was.
    pub(crate) fn reattach(&self, detached: DetachedStage) -> Staged<'_> {
        let DetachedStage { shard, index, id, delay, arrived_at } = detached;
        let shard = &self.shards[shard];
        // A staged slot is allocated and owned by its stage until it is
        // published or unstaged, so the page holding it is there.
        let slot = shard.slab.get(index).expect("a staged slot stays allocated");
        Staged { shard, index, slot, id, delay, arrived_at }
    }

    /// Takes a staged message back out of its slot (its record failed) and
    /// returns the slot to the free list; hands the payload back.
    pub(crate) fn unstage(&self, staged: Staged<'_>) -> Bytes {
        // SAFETY: a staged slot is owned by this thread and was never
        // published.
        let (payload, history) =
            unsafe { staged.slot.body_mut(|body| (std::mem::take(&mut body.payload), body.identity.take_history())) };
        drop(history);
        // The slot's word is still the `Free` it was allocated with.
        staged.shard.slab.free(staged.index, staged.slot);
        payload
    }

    /// The first half of send (`Free(g)` -> `Ready(g)` / `Delayed(g)`): the
    /// body of a slot the caller just allocated (and therefore owns), and
    /// the arrival's record, pushed before the publish (`journal.rs`).
    fn fill(&self, slot: &Slot, id: MessageId, arrival: Arrival, delay: u64, now: u64) {
        if let Some(journal) = self.journal() {
            let record = match arrival.origin {
                Origin::Send { at, deliver_at } => Some(Record::Sent {
                    queue: self.ordinal,
                    id: id.0,
                    at,
                    deliver_at,
                    payload: arrival.payload.clone(),
                }),
                Origin::Moved { from } => Some(Record::Moved {
                    from,
                    to: self.ordinal,
                    id: id.0,
                    at: self.engine.clock.unix_now(),
                    carried: arrival.lifetime_deliveries,
                    dead_letter: arrival.history.as_ref().and_then(|h| h.dead_letter.clone()),
                }),
                Origin::Restored => None,
            };
            if let Some(record) = record {
                journal.push(record);
            }
        }
        // SAFETY: the slot came from `Slab::allocate` and is not published:
        // this thread is its only owner.
        unsafe {
            slot.body_mut(|body| {
                body.payload = arrival.payload;
                body.identity = Identity::new(id.0, History::on_arrival(arrival.history, arrival.lifetime_deliveries));
                body.received_at = 0;
                // A delayed message's deadline is when it becomes ready.
                body.deadline = if delay > 0 { now.saturating_add(delay) } else { 0 };
            });
        }
        // SAFETY: as above.
        unsafe { slot.set_delivery_count(arrival.delivery_count) };
    }

    /// The second half of send: publishes a staged message.
    pub(crate) fn publish_staged(&self, staged: Staged<'_>, now: u64) {
        let Staged { shard, index, slot, delay, arrived_at, .. } = staged;
        // A statistic and the retention's start, published with the lease
        // word below.
        slot.set_sent_at(arrived_at);
        let published = next::sent(slot.lease.load(), delay > 0);
        slot.reset_late_calls(published.generation());
        // Counted before the publish (see the module invariant): one counter,
        // both the event and the gauge inflow.
        if delay > 0 {
            shard.stats.add(Counter::SentDelayed, 1);
            slot.lease.publish_owned(published);
            self.schedule(shard, index, slot, now.saturating_add(delay));
        } else {
            shard.stats.add(Counter::SentReady, 1);
            slot.lease.publish_owned(published);
            shard.push_ready(index, published.generation());
        }
    }

    // ----- receive ---------------------------------------------------------

    /// Receives up to `max - out.len()` ready messages into `out`, home shard
    /// first, stealing from the others, applying due timers on the way.
    pub(crate) fn receive_ready(&self, max: usize, visibility: u64, now: u64, out: &mut Vec<Delivery>) {
        let before = out.len();
        self.receive_from_shards(max, visibility, now, out);
        if visibility == 0 && out.len() > before {
            // A zero visibility grants leases that are over already: expire
            // them now rather than whenever a timer runs next, so what happens
            // to them (back to ready, or to the dead-letter queue at the
            // ceiling) does not depend on which operation comes next.
            self.run_all_timers(now);
        }
    }

    fn receive_from_shards(&self, max: usize, visibility: u64, now: u64, out: &mut Vec<Delivery>) {
        for index in self.ring.walk() {
            let shard = &self.shards[index];
            self.run_timers(shard, now);
            while out.len() < max {
                let Some(entry) = shard.ready.pop() else {
                    break;
                };
                if let Some(delivery) = self.try_receive(shard, entry, visibility, now) {
                    out.push(delivery);
                }
            }
            if out.len() >= max {
                return;
            }
        }
    }

    /// receive: `Ready(g)` -> `InFlight(g + 1)`. `None` for a stale entry.
    fn try_receive(&self, shard: &Shard, entry: ReadyEntry, visibility: u64, now: u64) -> Option<Delivery> {
        let slot = shard.slab.get(entry.slot)?;
        // Settled, not merely loaded: a claim in progress may be reverted (a
        // refused late ack holds `Ready|E` for a moment), and dropping the
        // entry then would leave a ready message no receiver can find.
        let word = slot.lease.load_settled();
        if word.phase() != Phase::Ready || word.generation() as u32 != entry.generation {
            return None;
        }
        let claim = slot.lease.try_claim_ready(word.generation()).ok()?;
        if self.past_retention(slot, now) {
            self.discard(shard, entry.slot, slot, claim, Counter::RetentionDropped);
            return None;
        }
        let deadline = now.saturating_add(visibility);
        let published = next::received(claim.before());
        // SAFETY: we hold the claim.
        let (id, payload, count, lifetime, dead_letter) = unsafe {
            let count = slot.delivery_count().saturating_add(1);
            slot.set_delivery_count(count);
            slot.body_mut(|body| {
                body.received_at = now;
                body.deadline = deadline;
                let dead_letter = body.identity.history().and_then(|h| h.dead_letter.clone());
                (body.identity.id(), body.payload.clone(), count, body.lifetime_deliveries(count), dead_letter)
            })
        };
        if let Some(journal) = self.journal() {
            let until = if journal.replicated { self.unix_at(deadline, now) } else { 0 };
            journal.push(Record::Received { queue: self.ordinal, id, count, until });
        }
        let stats = &shard.stats;
        // The ready outflow and the in-flight inflow at once.
        stats.add(Counter::Received, 1);
        if count == 1 {
            stats.record(Distribution::TimeInQueue, now.saturating_sub(slot.sent_at()));
        } else {
            stats.add(Counter::Redelivered, 1);
        }
        claim.publish(published);
        self.schedule(shard, entry.slot, slot, deadline);
        let receipt = Receipt::mint(
            &self.engine.key,
            self.engine.id,
            self.ordinal,
            shard.index,
            entry.slot,
            published.generation(),
        );
        Some(Delivery {
            id: MessageId(id),
            receipt,
            payload,
            delivery_count: count,
            deadline: Nanos(deadline),
            received_at: Nanos(now),
            fencing_token: u64::from(lifetime),
            dead_letter,
        })
    }

    // ----- receipts ----------------------------------------------------------

    /// Finds the shard and slot a receipt names, refusing foreign, forged and
    /// malformed ones before any lease is touched.
    fn locate(&self, receipt: &Receipt) -> Result<(&Shard, &Slot), LeaseError> {
        if self.deleted.load(Ordering::Acquire) {
            return Err(LeaseError::QueueDeleted);
        }
        if receipt.engine != self.engine.id {
            return Err(ReceiptError::WrongEngine.into());
        }
        if receipt.queue != self.ordinal {
            return Err(ReceiptError::WrongQueue { presented_to: self.name.clone() }.into());
        }
        if !receipt.verify(&self.engine.key) {
            return Err(ReceiptError::Forged.into());
        }
        let shard = self.shards.get(usize::from(receipt.shard)).ok_or(ReceiptError::Forged)?;
        let slot = shard.slab.get(receipt.slot).ok_or(ReceiptError::Forged)?;
        Ok((shard, slot))
    }

    /// Counts a call refused as stale or expired against the message its
    /// receipt named, if that message is still on this queue (see
    /// `Slot::note_late_call`); `diagnose` tells a short timeout from a poison
    /// message by it.
    pub(crate) fn note_late_call(&self, receipt: &Receipt, result: &Result<impl Sized, LeaseError>) {
        if matches!(result, Err(LeaseError::Stale | LeaseError::Expired)) {
            if let Ok((_, slot)) = self.locate(receipt) {
                slot.note_late_call(receipt.generation);
            }
        }
    }

    /// Why attempt `generation` does not hold its lease: `Expired` if its
    /// lease ran out and nobody received the message since, else `Stale`
    /// (also when the message has outlived the retention since: it is gone,
    /// whether or not anything has dropped it yet).
    fn why_not_held(&self, slot: &Slot, generation: u64, now: u64) -> LeaseError {
        let word = slot.lease.load_settled();
        let expired_here = matches!(word.phase(), Phase::Ready | Phase::Delayed)
            && word.after_expiry()
            && word.generation() == next_generation(generation);
        let retention = self.retention.load(Ordering::Relaxed);
        let gone = || {
            retention != 0
                && slot
                    .waiting_sent_at()
                    .is_some_and(|(seen, sent_at)| seen == word && now >= sent_at.saturating_add(retention))
        };
        if expired_here && !gone() { LeaseError::Expired } else { LeaseError::Stale }
    }

    // ----- ack ---------------------------------------------------------------

    /// ack: `InFlight(g)` -> `Free(g + 1)`; or, late, `Ready|E(g + 1)` /
    /// `Delayed|E(g + 1)` -> `Free(g + 2)`.
    pub(crate) fn ack(&self, receipt: &Receipt) -> Result<(), LeaseError> {
        self.ack_at(receipt, self.now())
    }

    /// `ack` judged at `now` (a batch reads the clock once for all its acks,
    /// as `send_batch` does for its sends).
    pub(crate) fn ack_at(&self, receipt: &Receipt, now: u64) -> Result<(), LeaseError> {
        self.ack_freeing(receipt, now, None)
    }

    /// Acks every receipt at `now` and returns the freed slots to their
    /// shards' free lists in one push per shard, not one per message: in a
    /// pipeline the free-list head moves between the producer's core and the
    /// consumer's on every push. The slots become reusable when this returns,
    /// as a caller of `ack_batch` sees every ack complete then.
    pub(crate) fn ack_batch_at(&self, receipts: &[Receipt], now: u64) -> Vec<Result<(), LeaseError>> {
        let mut freed = Vec::with_capacity(receipts.len());
        let results = receipts.iter().map(|receipt| self.ack_freeing(receipt, now, Some(&mut freed))).collect();
        freed.sort_unstable_by_key(|&(shard, _, _)| shard);
        for group in freed.chunk_by(|a, b| a.0 == b.0) {
            self.shards[group[0].0].slab.free_all(group.iter().map(|&(_, index, slot)| (index, slot)));
        }
        results
    }

    /// `ack_at`, putting the freed slot into `freed` (shard, index, slot)
    /// instead of onto its free list when a batch collects them.
    fn ack_freeing<'s>(
        &'s self,
        receipt: &Receipt,
        now: u64,
        freed: Option<&mut Vec<(usize, u32, &'s Slot)>>,
    ) -> Result<(), LeaseError> {
        let (shard, slot) = self.locate(receipt)?;
        let reject_late = self.config.late_ack == LateAck::Reject;
        match slot.lease.try_claim_in_flight(receipt.generation) {
            Ok(claim) => {
                // SAFETY: we hold the claim.
                let deadline = unsafe { slot.body(|body| body.deadline) };
                let late = now >= deadline;
                if late && reject_late {
                    claim.revert();
                    shard.stats.add(Counter::ExpiredAcks, 1);
                    return Err(LeaseError::Expired);
                }
                self.complete(shard, receipt.slot, slot, claim, now, late, None, freed);
                Ok(())
            }
            Err(_) => match slot.lease.try_claim_expired_attempt(receipt.generation) {
                Ok(claim) if self.past_retention(slot, now) => {
                    // Gone (see `why_not_held`): dropped now, the ack is stale.
                    self.discard(shard, receipt.slot, slot, claim, Counter::RetentionDropped);
                    shard.stats.add(Counter::StaleAcks, 1);
                    Err(LeaseError::Stale)
                }
                Ok(claim) => {
                    if reject_late {
                        claim.revert();
                        shard.stats.add(Counter::ExpiredAcks, 1);
                        return Err(LeaseError::Expired);
                    }
                    let outflow =
                        if claim.before().phase() == Phase::Ready { Counter::ReadyOut } else { Counter::DelayedOut };
                    self.complete(shard, receipt.slot, slot, claim, now, true, Some(outflow), freed);
                    Ok(())
                }
                Err(_) => {
                    shard.stats.add(Counter::StaleAcks, 1);
                    Err(LeaseError::Stale)
                }
            },
        }
    }

    /// Frees an acked message. `after_expiry` is the ready or delayed outflow
    /// when the attempt's expiry was already applied (`None`: still in flight).
    /// The slot goes back on the free list, or into `freed` when a batch
    /// returns its slots together (`ack_batch_at`).
    #[allow(clippy::too_many_arguments)]
    fn complete<'s>(
        &self,
        shard: &Shard,
        index: u32,
        slot: &'s Slot,
        claim: Claim<'_>,
        now: u64,
        late: bool,
        after_expiry: Option<Counter>,
        freed: Option<&mut Vec<(usize, u32, &'s Slot)>>,
    ) {
        if let Some(journal) = self.journal() {
            // SAFETY: we hold the claim.
            let id = unsafe { Self::claimed_id(slot) };
            journal.push(Record::Gone { queue: self.ordinal, id: id.0 });
        }
        // SAFETY: we hold the claim.
        let (payload, history, processing, left) = unsafe {
            slot.body_mut(|body| {
                (
                    std::mem::take(&mut body.payload),
                    body.identity.take_history(),
                    now.saturating_sub(body.received_at),
                    // After expiry no lease is left (a delayed message's
                    // deadline is when it matures, not a lease's end).
                    if after_expiry.is_some() { 0 } else { body.deadline.saturating_sub(now) },
                )
            })
        };
        let stats = &shard.stats;
        match after_expiry {
            // The event and the in-flight outflow at once.
            None => stats.add(Counter::AckedInFlight, 1),
            Some(outflow) => {
                stats.add(Counter::AckedAfterExpiry, 1);
                stats.add(outflow, 1);
            }
        }
        if late {
            stats.add(Counter::LateAcks, 1);
        }
        stats.record(Distribution::Processing, processing);
        stats.record(Distribution::LeaseLeftAtAck, left);
        let before = claim.before();
        claim.publish(next::freed(before));
        match freed {
            Some(freed) => freed.push((usize::from(shard.index), index, slot)),
            None => shard.slab.free(index, slot),
        }
        // Freed outside the claim: a large payload's deallocation should not
        // lengthen anyone's spin.
        drop((payload, history));
    }

    // ----- extend ------------------------------------------------------------

    /// extend: `InFlight(g)` -> `InFlight(g)` with a later (or earlier)
    /// deadline, while the lease is held and within `max_lease`. With
    /// `up_to_cap`, a deadline past the cap is lowered to the cap instead of
    /// refused, and refused only when that grants nothing (the lease already
    /// ends at the cap).
    pub(crate) fn extend(&self, receipt: &Receipt, visibility: Duration, up_to_cap: bool) -> Result<Nanos, LeaseError> {
        let (shard, slot) = self.locate(receipt)?;
        if visibility > self.config.max_visibility {
            return Err(LeaseError::VisibilityTooLong { requested: visibility, max: self.config.max_visibility });
        }
        let now = self.now();
        let refuse = |error| {
            shard.stats.add(Counter::ExtensionsRefused, 1);
            Err(error)
        };
        let claim = match slot.lease.try_claim_in_flight(receipt.generation) {
            Ok(claim) => claim,
            Err(_) => return refuse(self.why_not_held(slot, receipt.generation, now)),
        };
        // SAFETY: we hold the claim.
        let (deadline, received_at) = unsafe { slot.body(|body| (body.deadline, body.received_at)) };
        if now >= deadline {
            // Judged against the clock, not the timer: the lease is over even
            // if its expiry has not been applied yet.
            claim.revert();
            return refuse(LeaseError::Expired);
        }
        let mut extended = now.saturating_add(duration_nanos(visibility));
        let cap_ends = received_at.saturating_add(self.limits.max_lease);
        if extended > cap_ends {
            // Every grant so far kept within the cap, so `deadline <= cap_ends`:
            // clamped, the lease moves later unless it ends at the cap already.
            if !up_to_cap || cap_ends <= deadline {
                claim.revert();
                return refuse(LeaseError::CapExceeded { max_lease: self.config.max_lease });
            }
            extended = cap_ends;
        }
        // SAFETY: we hold the claim.
        unsafe { slot.body_mut(|body| body.deadline = extended) };
        if let Some(journal) = self.journal().filter(|j| j.replicated) {
            // SAFETY: we hold the claim.
            let id = unsafe { Self::claimed_id(slot) };
            journal.push(Record::LeaseSet { queue: self.ordinal, id: id.0, until: self.unix_at(extended, now) });
        }
        let before = claim.before();
        claim.publish(next::extended(before));
        if extended < deadline {
            // The armed entry may fire too late for an earlier deadline.
            self.schedule(shard, receipt.slot, slot, extended);
        }
        // A later deadline needs nothing, not even the arm: the lease stays in
        // force throughout, so whoever fires the entry that covered the old
        // deadline finds it, reads the new deadline under its claim and arms
        // again for it (lazy rescheduling).
        shard.stats.add(Counter::Extensions, 1);
        if extended <= now {
            // Extended to zero: the lease is over now (see `receive_ready`).
            self.run_timers(shard, now);
        }
        Ok(Nanos(extended))
    }

    // ----- release -----------------------------------------------------------

    /// release: `InFlight(g)` -> `Ready(g + 1)` / `Delayed(g + 1)`, or to the
    /// dead-letter queue at the retry ceiling. `delay: None` takes the queue's
    /// backoff.
    pub(crate) fn release(&self, receipt: &Receipt, delay: Option<Duration>) -> Result<(), LeaseError> {
        let (shard, slot) = self.locate(receipt)?;
        if let Some(delay) = delay {
            if delay > self.config.max_delay {
                return Err(LeaseError::DelayTooLong { requested: delay, max: self.config.max_delay });
            }
        }
        let now = self.now();
        let claim = slot
            .lease
            .try_claim_in_flight(receipt.generation)
            .map_err(|_| self.why_not_held(slot, receipt.generation, now))?;
        // SAFETY: we hold the claim.
        let (deadline, count) = unsafe { (slot.body(|body| body.deadline), slot.delivery_count()) };
        if now >= deadline {
            claim.revert();
            return Err(LeaseError::Expired);
        }
        let delay = match delay {
            Some(delay) => duration_nanos(delay),
            // SAFETY: we hold the claim.
            None => self.config.backoff.delay_nanos(|| unsafe { Self::claimed_id(slot) }, count),
        };
        if let Some(journal) = self.journal().filter(|j| j.replicated) {
            // A replica keeps the message hidden until the release's delay
            // ends (a move or a drop that follows records itself).
            // SAFETY: we hold the claim.
            let id = unsafe { Self::claimed_id(slot) };
            let until = if delay > 0 { self.unix_at(now.saturating_add(delay), now) } else { 0 };
            journal.push(Record::Released { queue: self.ordinal, id: id.0, until });
        }
        if self.fail_attempt(shard, receipt.slot, slot, claim, now, now, Failure::Released, delay, None) {
            self.waiters.notify();
        }
        Ok(())
    }

    /// Ends a failed attempt (release or expiry) that ended at `ended_at`: to
    /// the dead-letter queue at the retry ceiling, else eligible again at
    /// `ended_at + delay`. An expiry ends at its deadline, not when its timer
    /// happened to run, so retry times do not depend on timer latency. Returns
    /// whether the message is ready now (so waiters should be woken). With
    /// `deferred`, a failure that keeps the message here is tallied there
    /// instead of counted, for the caller to count in bulk.
    // Inlined into its two callers: as a call, passing nine arguments and
    // spilling around it cost about 40 of the 350 instructions an expiry
    // took (callgrind, `hot_loop expiry`).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn fail_attempt<'s>(
        &self,
        shard: &Shard,
        index: u32,
        slot: &'s Slot,
        mut claim: Claim<'s>,
        ended_at: u64,
        now: u64,
        failure: Failure,
        delay: u64,
        deferred: Option<&mut u64>,
    ) -> bool {
        // SAFETY: we hold the claim.
        let (count, received_at) = unsafe { (slot.delivery_count(), slot.body(|body| body.received_at)) };
        let (outcome, reason, counter) = match failure {
            Failure::Expired => (AttemptOutcome::Expired, DeadLetterReason::Expired, Counter::Expired),
            Failure::Released => (AttemptOutcome::Released, DeadLetterReason::Released, Counter::Released),
        };
        if self.past_retention(slot, now) {
            // Outlived the retention while in flight: dropped rather than
            // made eligible again (or dead-lettered).
            shard.stats.add(counter, 1);
            self.discard(shard, index, slot, claim, Counter::RetentionDropped);
            return false;
        }
        let attempt =
            AttemptRecord { delivery: count, received_at: Nanos(received_at), ended_at: Nanos(ended_at), outcome };
        if self.dead_letter.max_receives().is_some_and(|ceiling| count >= ceiling) {
            match self.move_to_dead_letter(shard, index, slot, claim, now, attempt.clone(), reason) {
                Ok(()) => {
                    shard.stats.add(counter, 1);
                    return false;
                }
                Err(kept) => {
                    // The dead-letter queue is full: keep the message here
                    // rather than drop it, and say so in the stats.
                    claim = kept;
                    shard.stats.add(Counter::DeadLetterOverflow, 1);
                }
            }
        }
        if self.dead_letter.linked() {
            // The attempt history is read only when the message moves to the
            // dead-letter queue; without one, remembering it would cost an
            // allocation per expiry or release for nothing.
            // SAFETY: we hold the claim.
            unsafe { slot.body_mut(|body| body.identity.history_mut().remember(attempt)) };
        }
        match deferred {
            // Outflows may be counted late (a gauge then reads high for a
            // moment, never negative): the timer run adds them once per batch.
            Some(expired) => *expired += 1,
            None => {
                shard.stats.add(counter, 1);
                shard.stats.add(Counter::InFlightOut, 1);
            }
        }
        let before = claim.before();
        let eligible_at = ended_at.saturating_add(delay);
        let delayed = eligible_at > now;
        let published =
            if failure == Failure::Expired { next::expired(before, delayed) } else { next::released(before, delayed) };
        if delayed {
            shard.stats.add(Counter::DelayedIn, 1);
            // SAFETY: we hold the claim.
            unsafe { slot.body_mut(|body| body.deadline = eligible_at) };
            claim.publish(published);
            self.schedule(shard, index, slot, eligible_at);
            false
        } else {
            shard.stats.add(Counter::ReadyIn, 1);
            claim.publish(published);
            shard.push_ready(index, published.generation());
            true
        }
    }

    // ----- dead-letter -------------------------------------------------------

    /// dead-letter (explicit): `InFlight(g)` -> `Free(g + 1)` here, a new
    /// `Ready` message on the dead-letter queue.
    pub(crate) fn dead_letter(&self, receipt: &Receipt, reason: &str) -> Result<(), LeaseError> {
        let (shard, slot) = self.locate(receipt)?;
        let Some(dead_letter_queue) = self.dead_letter.target() else {
            return Err(LeaseError::NoDeadLetterQueue);
        };
        let now = self.now();
        let claim = slot
            .lease
            .try_claim_in_flight(receipt.generation)
            .map_err(|_| self.why_not_held(slot, receipt.generation, now))?;
        // SAFETY: we hold the claim.
        let (count, (deadline, received_at)) =
            unsafe { (slot.delivery_count(), slot.body(|body| (body.deadline, body.received_at))) };
        if now >= deadline {
            claim.revert();
            return Err(LeaseError::Expired);
        }
        let attempt = AttemptRecord {
            delivery: count,
            received_at: Nanos(received_at),
            ended_at: Nanos(now),
            outcome: AttemptOutcome::DeadLettered(reason.to_string()),
        };
        let reason = DeadLetterReason::Explicit(reason.to_string());
        match self.move_to_dead_letter(shard, receipt.slot, slot, claim, now, attempt, reason) {
            Ok(()) => Ok(()),
            Err(claim) => {
                claim.revert();
                Err(LeaseError::DeadLetterQueueFull { name: dead_letter_queue.name.clone() })
            }
        }
    }

    /// Moves the claimed in-flight message to the dead-letter queue, or hands
    /// the claim back untouched if that queue is full (or deleted).
    #[allow(clippy::too_many_arguments)]
    fn move_to_dead_letter<'s>(
        &self,
        shard: &Shard,
        index: u32,
        slot: &'s Slot,
        claim: Claim<'s>,
        now: u64,
        last: AttemptRecord,
        reason: DeadLetterReason,
    ) -> Result<(), Claim<'s>> {
        // Held until the message is there (`dead_letter_link.rs`): a change
        // of the link waits for this move.
        let target = self.dead_letter.locked_target();
        let Some(dead_letter_queue) = target.as_ref() else {
            return Err(claim);
        };
        // SAFETY: we hold the claim.
        let count = unsafe { slot.delivery_count() };
        // SAFETY: we hold the claim.
        let (id, payload, lifetime, mut attempts) = unsafe {
            slot.body(|body| {
                let attempts = body.identity.history().map(|h| h.attempts.clone()).unwrap_or_default();
                (body.identity.id(), body.payload.clone(), body.lifetime_deliveries(count), attempts)
            })
        };
        attempts.push(last);
        if attempts.len() > MAX_ATTEMPT_RECORDS {
            attempts.drain(..attempts.len() - MAX_ATTEMPT_RECORDS);
        }
        let record = DeadLetterRecord {
            source_queue: self.name.clone(),
            reason,
            delivery_count: count,
            attempts,
            dead_lettered_at: Nanos(now),
        };
        let record = std::sync::Arc::new(record);
        let note = DeadLetterNote { id: MessageId(id), record: record.clone(), late_calls: slot.late_calls() };
        let history = History { dead_letter: Some(record), ..History::default() };
        let arrival = Arrival {
            id: Some(MessageId(id)),
            arrived_at: None,
            payload,
            lifetime_deliveries: lifetime,
            history: Some(Box::new(history)),
            delivery_count: 0,
            origin: Origin::Moved { from: self.ordinal },
        };
        // A payload above the dead-letter queue's limit cannot arrive from a
        // queue created here (`create_queue` links only queues that take
        // their sources' payloads), but a queue restored from a log written
        // before that rule could send one: it stays here, as when full.
        let refused = dead_letter_queue.deleted.load(Ordering::Acquire)
            || arrival.payload.len() > dead_letter_queue.config.max_payload
            || dead_letter_queue.accept(arrival, 0, now).is_err();
        if refused {
            return Err(claim);
        }
        dead_letter_queue.waiters.notify();
        self.dead_letter_log.remember(note);
        // SAFETY: we hold the claim.
        let (payload, history) =
            unsafe { slot.body_mut(|body| (std::mem::take(&mut body.payload), body.identity.take_history())) };
        shard.stats.add(Counter::DeadLettered, 1);
        shard.stats.add(Counter::InFlightOut, 1);
        let before = claim.before();
        claim.publish(next::freed(before));
        shard.slab.free(index, slot);
        drop((payload, history));
        Ok(())
    }

    // ----- timers --------------------------------------------------------------

    /// Applies every expiry and delay due at `now` on `shard`, unless another
    /// thread is doing it already.
    pub(crate) fn run_timers(&self, shard: &Shard, now: u64) {
        if shard.timers.maybe_due(now) {
            self.apply_timers(shard, now, false);
        }
    }

    /// Applies every due timer on every shard.
    pub(crate) fn run_all_timers(&self, now: u64) {
        for shard in self.shards.iter() {
            self.run_timers(shard, now);
        }
    }

    /// The driver's tick: applies due timers like `run_all_timers`, and even
    /// when nothing is due moves the inbox into the wheel and sweeps out a
    /// bounded number of entries of leases that already ended (see
    /// `Wheel::sweep`). Without it, every message acked within its lease
    /// would leave its entry behind (6 bytes in a bucket) until its old
    /// deadline passed. Returns whether a shard has more sweeping to do (the
    /// driver then comes back after a tick rather than sleeping until the
    /// next deadline).
    pub(crate) fn tidy_timers(&self, now: u64) -> bool {
        let mut more = false;
        for shard in self.shards.iter() {
            more |= self.apply_timers(shard, now, true);
        }
        more
    }

    /// Returns whether a sweep is unfinished (always `false` without `tidy`).
    fn apply_timers(&self, shard: &Shard, now: u64, tidy: bool) -> bool {
        let Some(mut state) = shard.timers.try_wheel() else {
            return false;
        };
        let mut made_ready = false;
        let mut expired = 0;
        loop {
            shard.timers.collect_due(&mut state, now, |index| shard.alarm(index));
            if state.fired.is_empty() {
                break;
            }
            let fired = std::mem::take(&mut state.fired);
            for entry in &fired {
                made_ready |= self.fire(shard, *entry, now, &mut expired);
            }
            state.fired = fired;
        }
        if expired > 0 {
            // Expiries that stayed on this queue, counted once per run rather
            // than twice per message (see `fail_attempt`).
            shard.stats.add(Counter::Expired, expired);
            shard.stats.add(Counter::InFlightOut, expired);
        }
        let more = tidy && Self::sweep_ended(shard, &mut state);
        drop(state);
        if made_ready {
            self.waiters.notify();
        }
        more
    }

    /// Continues (or starts, once the wheel holds more than twice as many
    /// entries as the shard has slots, or than it kept after the last pass)
    /// a sweep of timer entries whose lease or delay has ended. Returns
    /// whether the sweep is unfinished.
    fn sweep_ended(shard: &Shard, state: &mut WheelState) -> bool {
        let bound = (2 * shard.slab.allocated() as usize + SWEEP_SLACK).max(state.sweep_above);
        if !state.wheel.sweeping() && state.wheel.len() <= bound {
            return false;
        }
        if state.wheel.sweep(SWEEP_BUDGET, |index| shard.alarm(index), |entry| Self::timer_may_matter(shard, entry)) {
            state.sweep_above = 2 * state.wheel.len();
        }
        state.wheel.sweeping()
    }

    /// Whether a timer entry must stay (the sweep drops the others): it holds
    /// its slot's arm and a lease or delay is in force there. Called with the
    /// wheel held, so no `fire` runs meanwhile. An entry that does not hold
    /// the arm is covered by the one that does, or nothing needs it (an arm
    /// being taken right now queues its own entry). One that holds it while
    /// nothing is in force gives the arm up and looks once more, as `fire`
    /// does: a lease published before that is in force now, and keeps it.
    fn timer_may_matter(shard: &Shard, entry: &TimerEntry) -> bool {
        let Some(slot) = shard.slab.get(entry.slot) else {
            return false;
        };
        let in_force = || matches!(slot.lease.load().phase(), Phase::InFlight | Phase::Delayed | Phase::Claimed);
        if slot.armed() != entry.deadline {
            return false;
        }
        if in_force() {
            return true;
        }
        if !slot.disarm(entry.deadline) {
            return false;
        }
        if in_force() {
            slot.arm(entry.deadline);
            return true;
        }
        false
    }

    /// One fired timer entry: an alarm for its slot, whatever the slot holds
    /// now. An in-flight lease or a delay that has ended is applied; one that
    /// ends later (extended, or a later lease of the slot) arms again for its
    /// own deadline (lazy rescheduling); anything else needs no timer (lazy
    /// cancellation). Either way the arm this entry held is given up.
    fn fire(&self, shard: &Shard, entry: TimerEntry, now: u64, expired: &mut u64) -> bool {
        let Some(slot) = shard.slab.get(entry.slot) else {
            return false;
        };
        // Give up the arm first, then look: a scheduler that relied on this
        // entry armed before the disarm, and its lease is visible to the
        // look; one that arms after it finds no arm and queues its own entry.
        #[cfg(not(leaseq_mutant = "look_before_disarm"))]
        slot.disarm(entry.deadline);
        // Settled: an extend (or a refused ack or release) holding the claim
        // right now publishes again, and its lease is then one this entry
        // must apply or arm for; judging the claimed word would drop it.
        let word = slot.lease.load_settled();
        // Mutant (loom-tests only): the look before the disarm, so a lease
        // that arms in between relies on an entry that is then dropped.
        #[cfg(leaseq_mutant = "look_before_disarm")]
        slot.disarm(entry.deadline);
        match Self::claim_timed(slot, word) {
            Some(claim) => self.apply_timer(shard, entry.slot, slot, claim, now, expired),
            None => false,
        }
    }

    /// The id of the message in a slot the caller has claimed.
    ///
    /// # Safety
    /// The caller holds the slot's claim (it owns the body).
    unsafe fn claimed_id(slot: &Slot) -> MessageId {
        // SAFETY: the caller holds the claim.
        MessageId(unsafe { slot.body(|body| body.identity.id()) })
    }

    /// Claims the in-flight lease or the delay `word` shows, if it is still
    /// there.
    fn claim_timed(slot: &Slot, word: Word) -> Option<Claim<'_>> {
        match word.phase() {
            Phase::InFlight => slot.lease.try_claim_in_flight(word.generation()).ok(),
            Phase::Delayed => slot.lease.try_claim_delayed(word.generation()).ok(),
            _ => None,
        }
    }

    /// A claimed lease or delay whose timer fired, after the slot's arm was
    /// given up: not over yet, it arms again for its end; over, it expires
    /// (`InFlight(g)` -> `Ready|E(g + 1)` / `Delayed|E(g + 1)` after backoff /
    /// dead-letter queue at the ceiling) or matures (`Delayed(g)` ->
    /// `Ready(g)`). Returns whether a message became ready.
    fn apply_timer(
        &self,
        shard: &Shard,
        index: u32,
        slot: &Slot,
        claim: Claim<'_>,
        now: u64,
        expired: &mut u64,
    ) -> bool {
        // SAFETY: we hold the claim. For a delay, `deadline` is when it ends.
        let ends = unsafe { slot.body(|body| body.deadline) };
        if ends > now {
            claim.revert();
            self.schedule(shard, index, slot, ends);
            return false;
        }
        if claim.before().phase() == Phase::InFlight {
            // SAFETY: we hold the claim.
            let count = unsafe { slot.delivery_count() };
            // SAFETY: we hold the claim.
            let delay = self.config.backoff.delay_nanos(|| unsafe { Self::claimed_id(slot) }, count);
            return self.fail_attempt(shard, index, slot, claim, ends, now, Failure::Expired, delay, Some(expired));
        }
        if self.past_retention(slot, now) {
            self.discard(shard, index, slot, claim, Counter::RetentionDropped);
            return false;
        }
        shard.stats.add(Counter::DelayedOut, 1);
        shard.stats.add(Counter::ReadyIn, 1);
        let published = next::matured(claim.before());
        claim.publish(published);
        shard.push_ready(index, published.generation());
        true
    }

    // ----- purge and redrive -------------------------------------------------------

    /// Removes every message present when it starts: the ready ones through
    /// their ready entries, then delayed and in-flight ones by a slab scan.
    /// Ready and delayed ones past the retention count as dropped for it,
    /// not as purged (they were gone already).
    pub(crate) fn purge_all(&self) -> u64 {
        let now = self.now();
        let mut purged = 0;
        let mut remove = |shard: &Shard, index: u32, slot: &Slot, claim: Claim<'_>| {
            let waiting = claim.before().phase() != Phase::InFlight;
            if waiting && self.past_retention(slot, now) {
                self.discard(shard, index, slot, claim, Counter::RetentionDropped);
            } else {
                self.discard(shard, index, slot, claim, Counter::Purged);
                purged += 1;
            }
        };
        for shard in self.shards.iter() {
            while let Some(entry) = shard.ready.pop() {
                if let Some((slot, claim)) = Self::claim_entry(shard, entry) {
                    remove(shard, entry.slot, slot, claim);
                }
            }
            for index in 0..shard.slab.allocated() {
                let Some(slot) = shard.slab.get(index) else {
                    continue;
                };
                if let Ok(claim) = slot.lease.try_claim_occupied() {
                    remove(shard, index, slot, claim);
                }
            }
        }
        purged
    }

    /// Whether the message in a slot the caller has claimed outlived the
    /// queue's retention at `now`.
    #[inline]
    fn past_retention(&self, slot: &Slot, now: u64) -> bool {
        let retention = self.retention.load(Ordering::Relaxed);
        retention != 0 && now >= slot.sent_at().saturating_add(retention)
    }

    /// Drops every ready or delayed message that outlived the retention at
    /// `now` (a scan of the slots in use, as `oldest_ready_sent_at`; nothing
    /// on a queue without one); returns how many. In-flight ones keep their
    /// lease and are dropped when it ends (`fail_attempt`).
    pub(crate) fn drop_past_retention(&self, now: u64) -> u64 {
        let retention = self.retention.load(Ordering::Relaxed);
        if retention == 0 {
            return 0;
        }
        let mut dropped = 0;
        for shard in self.shards.iter() {
            for index in 0..shard.slab.allocated() {
                let Some(slot) = shard.slab.get(index) else {
                    continue;
                };
                // A first look without a claim: most slots are not due.
                let Some((word, sent_at)) = slot.waiting_sent_at() else {
                    continue;
                };
                if now < sent_at.saturating_add(retention) {
                    continue;
                }
                let claim = match word.phase() {
                    Phase::Ready => slot.lease.try_claim_ready(word.generation()),
                    _ => slot.lease.try_claim_delayed(word.generation()),
                };
                let Ok(claim) = claim else {
                    continue;
                };
                // Looked at again under the claim: the message may have
                // changed between the look and the claim.
                if self.past_retention(slot, now) {
                    self.discard(shard, index, slot, claim, Counter::RetentionDropped);
                    dropped += 1;
                } else {
                    claim.revert();
                }
            }
        }
        dropped
    }

    /// Claims the `Ready` message a popped entry names, if the entry is live.
    fn claim_entry(shard: &Shard, entry: ReadyEntry) -> Option<(&Slot, Claim<'_>)> {
        let slot = shard.slab.get(entry.slot)?;
        // Settled, not merely loaded: a claim in progress may be reverted (a
        // refused late ack holds `Ready|E` for a moment), and dropping the
        // entry then would leave a ready message no receiver can find.
        let word = slot.lease.load_settled();
        if word.phase() != Phase::Ready || word.generation() as u32 != entry.generation {
            return None;
        }
        let claim = slot.lease.try_claim_ready(word.generation()).ok()?;
        Some((slot, claim))
    }

    /// purge / retention / moved away: any occupied phase -> `Free(g + 1)`.
    /// A purge or retention drop records the message as gone; a move's
    /// record was the arrival's.
    fn discard(&self, shard: &Shard, index: u32, slot: &Slot, claim: Claim<'_>, reason: Counter) {
        let gone = matches!(reason, Counter::Purged | Counter::RetentionDropped);
        if gone && !self.deleted.load(Ordering::Relaxed) {
            if let Some(journal) = self.journal() {
                // SAFETY: we hold the claim.
                let id = unsafe { Self::claimed_id(slot) };
                journal.push(Record::Gone { queue: self.ordinal, id: id.0 });
            }
        }
        let outflow = match claim.before().phase() {
            Phase::Ready => Counter::ReadyOut,
            Phase::Delayed => Counter::DelayedOut,
            _ => Counter::InFlightOut,
        };
        // SAFETY: we hold the claim.
        let (payload, history) =
            unsafe { slot.body_mut(|body| (std::mem::take(&mut body.payload), body.identity.take_history())) };
        shard.stats.add(outflow, 1);
        shard.stats.add(reason, 1);
        let before = claim.before();
        claim.publish(next::freed(before));
        shard.slab.free(index, slot);
        drop((payload, history));
    }

    /// Moves up to `max` ready messages to `to`, keeping ids and payloads,
    /// resetting delivery counts and dead-letter records. Stops early when
    /// `to` is full; a message that did not fit stays here. A message above
    /// `to`'s `max_payload` is refused (counted) and stays here too, and the
    /// redrive goes on with the others; the refused ones go back behind them.
    pub(crate) fn redrive_to(&self, to: &QueueCore, max: usize) -> usize {
        let now = self.now();
        let mut moved = 0;
        let mut full = false;
        for shard in self.shards.iter() {
            let mut too_large = Vec::new();
            while moved < max && !full {
                let Some(entry) = shard.ready.pop() else {
                    break;
                };
                let Some((slot, claim)) = Self::claim_entry(shard, entry) else {
                    continue;
                };
                if self.past_retention(slot, now) {
                    self.discard(shard, entry.slot, slot, claim, Counter::RetentionDropped);
                    continue;
                }
                // SAFETY: we hold the claim.
                let (id, payload, lifetime) = unsafe {
                    let count = slot.delivery_count();
                    slot.body(|body| (body.identity.id(), body.payload.clone(), body.lifetime_deliveries(count)))
                };
                if payload.len() > to.config.max_payload {
                    // Set aside, not pushed back now: this loop would pop it again.
                    claim.revert();
                    too_large.push(entry);
                    continue;
                }
                let arrival = Arrival {
                    id: Some(MessageId(id)),
                    arrived_at: None,
                    payload,
                    lifetime_deliveries: lifetime,
                    history: None,
                    delivery_count: 0,
                    origin: Origin::Moved { from: self.ordinal },
                };
                if to.accept(arrival, 0, now).is_err() {
                    claim.revert();
                    shard.ready.push(entry);
                    full = true;
                    break;
                }
                self.discard(shard, entry.slot, slot, claim, Counter::RedrivenOut);
                moved += 1;
            }
            if !too_large.is_empty() {
                shard.stats.add(Counter::RedriveTooLarge, too_large.len() as u64);
                too_large.into_iter().for_each(|entry| shard.ready.push(entry));
            }
        }
        if moved > 0 {
            to.waiters.notify();
        }
        moved
    }

    /// Send time of the oldest ready message (a scan of the slots' state
    /// words: O(slots in use), about a millisecond per million messages).
    pub(crate) fn oldest_ready_sent_at(&self) -> Option<u64> {
        let mut oldest: Option<u64> = None;
        for shard in self.shards.iter() {
            for index in 0..shard.slab.allocated() {
                let Some(slot) = shard.slab.get(index) else {
                    continue;
                };
                if let Some(sent_at) = slot.ready_sent_at() {
                    oldest = Some(oldest.map_or(sent_at, |o| o.min(sent_at)));
                }
            }
        }
        oldest
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    //! Regressions. First those found by the loom models (loom-tests/): an
    //! entry judged against a word that another thread holds claimed must
    //! wait for the claim, because the claim may be reverted. A helper thread
    //! holds the claim for a while; if the engine does not wait, the message
    //! is lost, and if the helper is slow to start, the test passes
    //! vacuously, never spuriously fails. Then the attempt history, which is
    //! kept only on queues with a dead-letter queue.

    use std::sync::mpsc;
    use std::thread;
    use std::time::Duration;

    use crate::{AttemptOutcome, Engine, LateAck, ManualClock, QueueConfig};

    const HOLD: Duration = Duration::from_millis(50);

    fn setup(late_ack: LateAck) -> (ManualClock, crate::Queue) {
        let clock = ManualClock::new();
        let engine = Engine::builder().clock(clock.clone()).build();
        let config = QueueConfig {
            visibility_timeout: Duration::from_secs(10),
            late_ack,
            shards: Some(1),
            max_messages: 4,
            ..QueueConfig::default()
        };
        (clock, engine.create_queue("q", config).unwrap())
    }

    /// The timer arm: a slot reused for message after message with the same
    /// visibility keeps the one entry its first lease queued (a manual clock:
    /// no driver, no sweep). Without the arm every receive queued its own.
    #[test]
    fn a_reused_slot_keeps_one_timer_entry() {
        let (_clock, q) = setup(LateAck::AcceptIfNotRedelivered);
        let mut out = Vec::new();
        for _ in 0..1_000 {
            q.send(&b"m"[..]).unwrap();
            out.clear();
            q.receive_into(1, crate::ReceiveOptions::default(), &mut out).unwrap();
            q.ack(&out[0].receipt).unwrap();
        }
        assert_eq!(q.core.shards[0].timers.entries(), 1);
    }

    /// The slot's armed entry is an alarm for the slot: when the entry of an
    /// acked lease fires while a delayed message sits in the slot, it arms
    /// again for the delay's end instead of maturing it early, and a lease
    /// received later in the slot still expires at its own deadline.
    #[test]
    fn an_old_entry_matures_no_delay_early_and_rearms() {
        let (clock, q) = setup(LateAck::AcceptIfNotRedelivered);
        q.send(&b"a"[..]).unwrap();
        let a = q.receive(1).unwrap().remove(0);
        q.ack(&a.receipt).unwrap();
        // A's entry is due at 10 s; B becomes ready at 15 s, in A's slot.
        let b = q.send_with(&b"b"[..], Duration::from_secs(15)).unwrap();
        clock.advance(Duration::from_secs(10));
        assert!(q.receive(1).unwrap().is_empty(), "B matured at A's old deadline");
        clock.advance(Duration::from_secs(5));
        let got = q.receive(1).unwrap().remove(0);
        assert_eq!(got.id, b);
        // The entry that matured B gave the arm up, so B's receive queued its
        // own: the lease ends at 25 s, not before and not never.
        clock.advance(Duration::from_millis(9_999));
        assert!(q.receive(1).unwrap().is_empty(), "B redelivered before its lease ended");
        clock.advance(Duration::from_millis(1));
        let again = q.receive(1).unwrap().remove(0);
        assert_eq!((again.id, again.delivery_count), (b, 2));
    }

    #[test]
    fn an_expiry_timer_firing_during_an_extension_is_kept() {
        let (clock, queue) = setup(LateAck::default());
        queue.send(&b"m"[..]).unwrap();
        let d = queue.receive(1).unwrap().pop().unwrap();
        let (held, wait) = mpsc::channel();
        let core = queue.core.clone();
        let generation = d.receipt.generation();
        let holder = thread::spawn(move || {
            let slot = core.shards[0].slab.get(0).unwrap();
            // Stands in for an extend (or a refused ack) mid-transition.
            let claim = slot.lease.try_claim_in_flight(generation).unwrap();
            held.send(()).unwrap();
            thread::sleep(HOLD);
            claim.revert();
        });
        wait.recv().unwrap();
        // Moving the manual clock fires the expiry timer while the claim is
        // held.
        clock.advance(Duration::from_secs(10));
        let redelivered = queue.receive(1).unwrap();
        holder.join().unwrap();
        let redelivered = if redelivered.is_empty() { queue.receive(1).unwrap() } else { redelivered };
        assert_eq!(redelivered.len(), 1, "the lease's only expiry timer was dropped");
        assert_eq!(redelivered[0].delivery_count, 2);
    }

    #[test]
    fn a_ready_entry_popped_during_a_refused_late_ack_is_kept() {
        let (clock, queue) = setup(LateAck::Reject);
        queue.send(&b"m"[..]).unwrap();
        let d = queue.receive(1).unwrap().pop().unwrap();
        clock.advance(Duration::from_secs(10));
        assert_eq!(queue.stats().expired, 1, "expiry applied: the message is ready again");
        let (held, wait) = mpsc::channel();
        let core = queue.core.clone();
        let generation = d.receipt.generation();
        let holder = thread::spawn(move || {
            let slot = core.shards[0].slab.get(0).unwrap();
            // What a late ack under `LateAck::Reject` does before refusing.
            let claim = slot.lease.try_claim_expired_attempt(generation).unwrap();
            held.send(()).unwrap();
            thread::sleep(HOLD);
            claim.revert();
        });
        wait.recv().unwrap();
        let got = queue.receive(1).unwrap();
        holder.join().unwrap();
        let got = if got.is_empty() { queue.receive(1).unwrap() } else { got };
        assert_eq!(got.len(), 1, "the message's only ready entry was dropped");
        assert_eq!(got[0].delivery_count, 2);
    }
    /// Skipping the attempt history on queues without a dead-letter queue
    /// must not lose it where it is read: the dead-letter record still lists
    /// every failed attempt.
    #[test]
    fn dead_letter_record_keeps_every_failed_attempt() {
        let clock = ManualClock::new();
        let engine = Engine::builder().clock(clock.clone()).build();
        engine.create_queue("dlq", QueueConfig::default()).unwrap();
        let config = QueueConfig::default()
            .visibility_timeout(Duration::from_secs(1))
            .max_receives(3)
            .dead_letter_queue("dlq")
            .shards(1);
        let q = engine.create_queue("jobs", config).unwrap();
        q.send(&b"poison"[..]).unwrap();
        let first = q.receive(1).unwrap().remove(0);
        q.release(&first.receipt, Duration::ZERO).unwrap();
        for _ in 0..2 {
            assert_eq!(q.receive(1).unwrap().len(), 1);
            clock.advance(Duration::from_secs(2));
        }
        assert!(q.receive(1).unwrap().is_empty(), "the third failure moved it away");
        let dead = engine.queue("dlq").unwrap().receive(1).unwrap().remove(0);
        let record = dead.dead_letter.expect("a dead-letter record");
        let outcomes: Vec<_> = record.attempts.iter().map(|a| a.outcome.clone()).collect();
        assert_eq!(outcomes, vec![AttemptOutcome::Released, AttemptOutcome::Expired, AttemptOutcome::Expired]);
    }

    /// Messages acked within their lease leave no timer entry behind for
    /// long: the driver's tick sweeps them out, so the timers hold O(slots)
    /// entries rather than one per message acked in the last hour.
    #[test]
    fn timers_of_acked_leases_do_not_accumulate() {
        let engine = Engine::builder().tick(Duration::from_millis(1)).build();
        let config = QueueConfig::default().visibility_timeout(Duration::from_secs(3600)).shards(1);
        let q = engine.create_queue("hot", config).unwrap();
        let cycles = 400_000;
        let mut out = Vec::new();
        for _ in 0..cycles {
            q.send(&b"m"[..]).unwrap();
            out.clear();
            q.receive_into(1, crate::ReceiveOptions::default(), &mut out).unwrap();
            q.ack(&out[0].receipt).unwrap();
        }
        let timers = &q.core.shards[0].timers;
        let bound = 2 * q.core.shards[0].slab.allocated() as usize + super::SWEEP_SLACK;
        let started = std::time::Instant::now();
        let mut left = timers.entries();
        // A sweep keeps pace with acks (a driver wake per tick while one is
        // unfinished): 400,000 entries take milliseconds, not the ten seconds of
        // sweeping only when the driver wakes for other reasons.
        while left > bound && started.elapsed() < Duration::from_secs(4) {
            thread::sleep(Duration::from_millis(10));
            left = timers.entries();
        }
        assert!(left <= bound, "{left} timer entries kept for {cycles} acked messages (bound {bound})");
        assert_eq!(q.stats().acked, cycles);
    }

    /// Without a dead-letter queue an expired message comes back with its
    /// delivery count and no record.
    #[test]
    fn expiry_without_dead_letter_queue_redelivers() {
        let clock = ManualClock::new();
        let engine = Engine::builder().clock(clock.clone()).build();
        let config = QueueConfig::default().visibility_timeout(Duration::from_secs(1)).shards(1);
        let q = engine.create_queue("jobs", config).unwrap();
        q.send(&b"x"[..]).unwrap();
        q.receive(1).unwrap();
        clock.advance(Duration::from_secs(2));
        let again = q.receive(1).unwrap().remove(0);
        assert_eq!(again.delivery_count, 2);
        assert!(again.dead_letter.is_none());
        assert_eq!(q.stats().expired, 1);
    }
}
