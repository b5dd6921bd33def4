//! The op interpreter: applies each operation to an engine on a `ManualClock`
//! and to the model, and compares every result.
//!
//! Invariant: after each step either every observable result agreed, or the
//! run stops with a `Divergence` naming the step; the engine and the model see
//! exactly the same calls with the same arguments (the one exception, a
//! redrive whose outcome the contract leaves open, is trimmed for both).

use std::collections::HashSet;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use leaseq::{
    Clock, Delivery, Engine, Error, LeaseError, ManualClock, MessageId, Queue, QueueStats, Receipt, ReceiveOptions,
    SyncPolicy,
};

use super::ops::{NameChoice, Op, ReceiptPick, Span};
use crate::{Model, ModelDelivery, ModelReceipt, ModelStats, QueueRef};

/// Most steps one run executes (keeps the clock far from overflow: at most
/// one year per step).
pub const MAX_STEPS: usize = 256;

/// Most restarts one run executes; later `Restart`s do nothing. Each one
/// closes and reopens a data dir (a few milliseconds in a debug build), and
/// inputs made of little but restarts would otherwise dominate the corpus
/// replay.
pub const MAX_RESTARTS: usize = 8;

/// The first difference between engine and model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    /// Index of the step (`MAX_STEPS` and up: the final checks).
    pub step: usize,
    /// The operation.
    pub op: String,
    /// What differed.
    pub what: String,
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "engine and model diverge at step {} ({}): {}", self.step, self.op, self.what)
    }
}

impl std::error::Error for Divergence {}

/// How a run that found no divergence ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Steps applied.
    pub steps: usize,
    /// Set if the run stopped early at an outcome the contract leaves open.
    pub stopped_at_ambiguity: Option<String>,
    /// Queues created.
    pub queues: usize,
    /// Deliveries compared.
    pub deliveries: usize,
}

/// Runs `ops` (at most `MAX_STEPS`) against a fresh engine and model, then
/// compares stats of every queue and drains every live queue.
pub fn run(ops: &[Op]) -> Result<Outcome, Divergence> {
    // Only a run that restarts needs a data dir (and a log writer).
    let durable = ops.iter().take(MAX_STEPS).any(|op| *op == Op::Restart);
    let mut run = Differential::new(durable)?;
    let mut steps = 0;
    for op in ops.iter().take(MAX_STEPS) {
        run.step = steps;
        run.op = format!("{op:?}");
        run.apply(op)?;
        steps += 1;
        if let Some(why) = run.model.ambiguity() {
            let why = Some(why.to_string());
            return Ok(Outcome {
                steps,
                stopped_at_ambiguity: why,
                queues: run.queues.len(),
                deliveries: run.issued.len(),
            });
        }
    }
    run.step = MAX_STEPS;
    run.op = "final checks".into();
    run.finish()?;
    Ok(Outcome { steps, stopped_at_ambiguity: None, queues: run.queues.len(), deliveries: run.issued.len() })
}

/// A receipt issued by the engine with its counterpart in the model.
#[derive(Debug, Clone)]
struct Issued {
    engine: Receipt,
    model: ModelReceipt,
}

struct Differential {
    clock: ManualClock,
    engine: Engine,
    /// The durable engine's data dir (removed when the run ends).
    dir: Option<PathBuf>,
    /// Queues whose handle, since a restart, stands in for a deleted queue
    /// (a deleted queue of the closed engine is gone from the new one).
    stand_ins: HashSet<usize>,
    restarts: usize,
    model: Model,
    /// Handles in creation order; index = `QueueRef`.
    queues: Vec<Queue>,
    issued: Vec<Issued>,
    ids: HashSet<MessageId>,
    foreign: Option<(Engine, Receipt)>,
    payloads: u64,
    step: usize,
    op: String,
}

/// Opens (or reopens) the durable engine of a run: the policy that writes
/// without syncing (a clean close loses nothing), small segments.
fn open_durable(clock: &ManualClock, dir: &std::path::Path) -> Result<Engine, Error> {
    Engine::builder()
        .clock(clock.clone())
        .default_shards(1)
        .data_dir(dir)
        .sync(SyncPolicy::Never)
        .segment_bytes(64 << 10)
        .open()
}

impl Differential {
    fn new(durable: bool) -> Result<Self, Divergence> {
        static RUNS: AtomicU64 = AtomicU64::new(0);
        let clock = ManualClock::new();
        let dir = durable.then(|| {
            let run = RUNS.fetch_add(1, Ordering::Relaxed);
            std::env::temp_dir().join(format!("leaseq-differential-{}-{run}", std::process::id()))
        });
        let engine = match &dir {
            None => Engine::builder().clock(clock.clone()).default_shards(1).build(),
            Some(dir) => {
                let _ = std::fs::remove_dir_all(dir);
                open_durable(&clock, dir).map_err(|e| Divergence {
                    step: 0,
                    op: "open".into(),
                    what: format!("the durable engine did not open: {e}"),
                })?
            }
        };
        Ok(Differential {
            clock,
            engine,
            dir,
            stand_ins: HashSet::new(),
            restarts: 0,
            model: Model::new(1),
            queues: Vec::new(),
            issued: Vec::new(),
            ids: HashSet::new(),
            foreign: None,
            payloads: 0,
            step: 0,
            op: String::new(),
        })
    }

    /// Closes the engine and opens its data dir again; the model restarts
    /// too. Handles are taken anew by name (a deleted queue's by a stand-in
    /// that refuses everything as deleted), and every receipt issued so far
    /// belongs to the closed engine.
    fn restart(&mut self) -> Result<(), Divergence> {
        let Some(dir) = self.dir.clone() else { return Ok(()) };
        if self.restarts == MAX_RESTARTS {
            return Ok(());
        }
        self.restarts += 1;
        let names: Vec<String> = (0..self.queues.len()).map(|i| self.model.name(QueueRef(i)).to_string()).collect();
        self.queues.clear();
        let now = self.clock.now();
        drop(std::mem::replace(&mut self.engine, Engine::new()));
        let clock = ManualClock::new();
        clock.advance_to(now);
        self.engine = open_durable(&clock, &dir).map_err(|e| self.diverge(format!("reopen: {e}")))?;
        self.clock = clock;
        let moved = self.model.restart();
        let report = self.engine.recovery().cloned().ok_or_else(|| self.diverge("no recovery report"))?;
        self.expect(report.dead_lettered == moved, || {
            format!("moved to dead-letter queues at open: engine {}, model {moved}", report.dead_lettered)
        })?;
        for (index, name) in names.iter().enumerate() {
            let r = QueueRef(index);
            let handle = if self.model.queue(name) == Some(r) {
                self.engine.queue(name).map_err(|e| self.diverge(format!("queue '{name}' after the restart: {e}")))?
            } else {
                self.stand_ins.insert(index);
                deleted_stand_in(name)
            };
            self.queues.push(handle);
        }
        let live: u64 = (0..self.queues.len())
            .filter(|i| !self.stand_ins.contains(i))
            .map(|i| {
                let s = self.model.stats(QueueRef(i));
                s.ready + s.delayed + s.in_flight
            })
            .sum();
        // `report.retention_dropped` is left alone: it also counts messages
        // the contract had dropped before the restart that the engine had
        // not met yet (it drops lazily).
        self.expect(report.messages == live, || {
            format!("messages restored: engine {}, model {live}", report.messages)
        })?;
        for issued in &mut self.issued {
            issued.model = ModelReceipt::ForeignEngine;
        }
        self.same_queue_list()
    }

    fn diverge(&self, what: impl Into<String>) -> Divergence {
        Divergence { step: self.step, op: self.op.clone(), what: what.into() }
    }

    fn expect(&self, same: bool, what: impl FnOnce() -> String) -> Result<(), Divergence> {
        if same { Ok(()) } else { Err(self.diverge(what())) }
    }

    fn queue(&self, k: u8) -> Option<(QueueRef, &Queue)> {
        if self.queues.is_empty() {
            return None;
        }
        let index = usize::from(k) % self.queues.len();
        Some((QueueRef(index), &self.queues[index]))
    }

    fn payload(&mut self, size: usize) -> Bytes {
        self.payloads += 1;
        let mut bytes = vec![0u8; size];
        for (k, b) in bytes.iter_mut().enumerate() {
            *b = (self.payloads >> (8 * (k % 8))) as u8;
        }
        Bytes::from(bytes)
    }

    /// Checks that a newly sent message got an id never seen before.
    fn fresh_id(&mut self, id: MessageId) -> Result<(), Divergence> {
        let fresh = self.ids.insert(id);
        self.expect(fresh, || format!("send returned id {id}, which an earlier message has"))
    }

    fn receipt(&mut self, pick: ReceiptPick) -> Option<Issued> {
        match pick {
            ReceiptPick::Issued(back) | ReceiptPick::Tampered(back) if !self.issued.is_empty() => {
                let back = if back < 0xc000 { usize::from(back % 8) } else { usize::from(back) };
                let original = &self.issued[self.issued.len() - 1 - back % self.issued.len()];
                if let ReceiptPick::Issued(_) = pick {
                    return Some(original.clone());
                }
                let ModelReceipt::Genuine { queue, .. } = original.model else {
                    return None;
                };
                let text = original.engine.to_string();
                let (fields, tag) = text.rsplit_once('.').expect("a receipt has fields");
                let tag = u64::from_str_radix(tag, 16).expect("a receipt's tag is hex") ^ 1;
                let engine = Receipt::from_str(&format!("{fields}.{tag:x}")).expect("an altered tag still parses");
                Some(Issued { engine, model: ModelReceipt::Tampered { queue } })
            }
            ReceiptPick::Issued(_) | ReceiptPick::Tampered(_) => None,
            ReceiptPick::Foreign => {
                let (_, receipt) = self.foreign.get_or_insert_with(foreign_receipt);
                Some(Issued { engine: *receipt, model: ModelReceipt::ForeignEngine })
            }
        }
    }

    fn apply(&mut self, op: &Op) -> Result<(), Divergence> {
        match *op {
            Op::Create { name, ref config } => {
                let (name, config) = (name.name(), config.config());
                let engine = self.engine.create_queue(name, config.clone());
                let model = self.model.create_queue(name, config);
                match (engine, model) {
                    (Ok(handle), Ok(queue)) => {
                        self.expect(queue.0 == self.queues.len(), || "model numbered the queue differently".into())?;
                        self.queues.push(handle);
                    }
                    (Err(e), Err(m)) => self.same_error(&e, &m)?,
                    (e, m) => return Err(self.diverge(format!("engine {:?}, model {m:?}", e.map(|_| ())))),
                }
                self.same_queue_list()
            }
            Op::Delete { name } => {
                let engine = self.engine.delete_queue(name.name());
                let model = self.model.delete_queue(name.name());
                self.same_result(&engine, &model)?;
                self.same_queue_list()
            }
            Op::Send { queue, size, delay } => {
                let Some((r, handle)) = self.queue(queue) else { return Ok(()) };
                let handle = handle.clone();
                let payload = self.payload(usize::from(size % 600));
                let delay = delay.map_or(Duration::ZERO, Span::duration);
                let engine = handle.send_with(payload.clone(), delay);
                let id = *engine.as_ref().unwrap_or(&MessageId::from_u64(u64::MAX));
                let model = self.model.send(r, payload, delay, id);
                let sent = engine.is_ok();
                self.same_result(&engine.map(|_| ()), &model)?;
                if sent {
                    self.fresh_id(id)?;
                }
                Ok(())
            }
            Op::SendBatch { queue, ref sizes } => {
                let Some((r, handle)) = self.queue(queue) else { return Ok(()) };
                let handle = handle.clone();
                let payloads: Vec<Bytes> = sizes.iter().take(8).map(|&s| self.payload(usize::from(s))).collect();
                let engine = handle.send_batch(payloads.clone());
                self.expect(engine.len() == payloads.len(), || {
                    format!("{} results for {} payloads", engine.len(), payloads.len())
                })?;
                let ids = engine.iter().map(|r| *r.as_ref().unwrap_or(&MessageId::from_u64(u64::MAX)));
                let model = self.model.send_batch(r, payloads.into_iter().zip(ids).collect());
                for (e, m) in engine.iter().zip(&model) {
                    self.same_result(&e.as_ref().map(|_| ()).map_err(Clone::clone), m)?;
                    if let Ok(id) = e {
                        self.fresh_id(*id)?;
                    }
                }
                Ok(())
            }
            Op::Receive { queue, max, visibility } => {
                let Some((r, _)) = self.queue(queue) else { return Ok(()) };
                self.receive(r, Op::batch_size(max), visibility.map(Span::duration)).map(|_| ())
            }
            Op::Ack { queue, receipt } => {
                let Some((r, handle)) = self.queue(queue) else { return Ok(()) };
                let handle = handle.clone();
                let Some(receipt) = self.receipt(receipt) else { return Ok(()) };
                let engine = handle.ack(&receipt.engine);
                let model = self.model.ack(r, &receipt.model);
                self.same_lease_result(&engine, &model)
            }
            Op::Extend { queue, receipt, visibility } => {
                let Some((r, handle)) = self.queue(queue) else { return Ok(()) };
                let handle = handle.clone();
                let Some(receipt) = self.receipt(receipt) else { return Ok(()) };
                let engine = handle.extend(&receipt.engine, visibility.duration());
                let model = self.model.extend(r, &receipt.model, visibility.duration());
                self.expect(engine == model, || format!("engine {engine:?}, model {model:?}"))
            }
            Op::Release { queue, receipt, delay } => {
                let Some((r, handle)) = self.queue(queue) else { return Ok(()) };
                let handle = handle.clone();
                let Some(receipt) = self.receipt(receipt) else { return Ok(()) };
                let delay = delay.map(Span::duration);
                let engine = match delay {
                    Some(d) => handle.release(&receipt.engine, d),
                    None => handle.release_with_backoff(&receipt.engine),
                };
                let model = self.model.release(r, &receipt.model, delay);
                self.same_lease_result(&engine, &model)
            }
            Op::DeadLetter { queue, receipt, reason } => {
                let Some((r, handle)) = self.queue(queue) else { return Ok(()) };
                let handle = handle.clone();
                let Some(receipt) = self.receipt(receipt) else { return Ok(()) };
                let reason = format!("poison {reason}");
                let engine = handle.dead_letter(&receipt.engine, &reason);
                let model = self.model.dead_letter(r, &receipt.model, &reason);
                self.same_lease_result(&engine, &model)
            }
            Op::Advance { by } => {
                let by = by.duration().min(crate::validate::YEAR);
                self.clock.advance(by);
                self.model.advance(by);
                let (engine, model) = (self.engine.now(), self.model.now());
                self.expect(engine == model, || format!("clock: engine {engine:?}, model {model:?}"))
            }
            Op::Purge { queue } => {
                let Some((r, handle)) = self.queue(queue) else { return Ok(()) };
                let engine = handle.purge();
                let model = self.model.purge(r);
                self.same_result(&engine, &model)
            }
            Op::SetRetention { queue, retention } => {
                let Some((r, handle)) = self.queue(queue) else { return Ok(()) };
                let retention = retention.map(|s| s.duration());
                let engine = handle.set_retention(retention);
                let model = self.model.set_retention(r, retention);
                self.same_result(&engine, &model)
            }
            Op::SetDeadLetter { queue, to, max_receives } => {
                let Some((r, handle)) = self.queue(queue) else { return Ok(()) };
                let (to, max_receives) = (to.map(NameChoice::name), max_receives.map(u32::from));
                let engine = handle.set_dead_letter(to, max_receives);
                let model = self.model.set_dead_letter(r, to, max_receives);
                self.same_result(&engine, &model)
            }
            Op::Redrive { from, to, max } => {
                let (from, to) = (from.name(), to.name());
                // Trim an open-ended redrive to the largest batch with one outcome.
                let max = (0..=usize::from(max))
                    .rev()
                    .find(|&m| self.model.redrive_is_determined(from, to, m))
                    .expect("a redrive of nothing is determined");
                let engine = self.engine.redrive(from, to, max);
                let model = self.model.redrive(from, to, max);
                self.same_result(&engine, &model)
            }
            Op::Stats { queue } => {
                let Some((r, handle)) = self.queue(queue) else { return Ok(()) };
                if self.stand_ins.contains(&r.0) {
                    return Ok(());
                }
                let engine = handle.stats();
                self.same_stats(&engine, &self.model.stats(r))
            }
            Op::Restart => self.restart(),
        }
    }

    /// Receives on both sides: the engine chooses, the model checks the
    /// choice is allowed, then the deliveries must match field by field.
    fn receive(&mut self, r: QueueRef, max: usize, visibility: Option<Duration>) -> Result<usize, Divergence> {
        let options = ReceiveOptions { visibility, wait: None };
        let engine = self.queues[r.0].receive_with(max, options);
        let plan = self.model.receive_plan(r, max, visibility);
        let (deliveries, plan) = match (engine, plan) {
            (Ok(d), Ok(p)) => (d, p),
            (Err(e), Err(m)) => return self.same_error(&e, &m).map(|()| 0),
            (e, m) => return Err(self.diverge(format!("engine {:?}, model {m:?}", e.map(|d| d.len())))),
        };
        let ids: Vec<MessageId> = deliveries.iter().map(|d| d.id).collect();
        self.model.check_choice(r, plan, &ids).map_err(|why| self.diverge(format!("receive {why}")))?;
        let expected = self.model.receive_chosen(r, plan, &ids);
        for (engine, model) in deliveries.iter().zip(&expected) {
            self.same_delivery(engine, model)?;
            self.issued.push(Issued { engine: engine.receipt, model: model.receipt.clone() });
        }
        Ok(deliveries.len())
    }

    /// Compares stats of every queue, the queue list, then drains every live
    /// queue (dead-letter queues included), comparing each delivery and its
    /// dead-letter record.
    fn finish(&mut self) -> Result<(), Divergence> {
        self.same_queue_list()?;
        for (index, handle) in self.queues.iter().enumerate() {
            if !self.stand_ins.contains(&index) {
                self.same_stats(&handle.stats(), &self.model.stats(QueueRef(index)))?;
            }
        }
        for index in 0..self.queues.len() {
            let r = QueueRef(index);
            if self.model.queue(self.model.name(r)) != Some(r) {
                continue;
            }
            // Leases as long as allowed, so the drain ends unless the queue's
            // longest visibility is zero (then what comes back is compared again,
            // a bounded number of times).
            let longest = self.queues[index].config().max_visibility;
            for _ in 0..3 {
                if self.receive(r, 1024, Some(longest))? == 0 {
                    break;
                }
            }
        }
        Ok(())
    }

    // ----- comparisons -------------------------------------------------------------

    fn same_error(&self, engine: &Error, model: &Error) -> Result<(), Divergence> {
        self.expect(error_key(engine) == error_key(model), || format!("engine {engine:?}, model {model:?}"))
    }

    fn same_result<T: PartialEq + fmt::Debug>(
        &self,
        engine: &Result<T, Error>,
        model: &Result<T, Error>,
    ) -> Result<(), Divergence> {
        match (engine, model) {
            (Ok(e), Ok(m)) if e == m => Ok(()),
            (Err(e), Err(m)) => self.same_error(e, m),
            (e, m) => Err(self.diverge(format!("engine {e:?}, model {m:?}"))),
        }
    }

    fn same_lease_result(
        &self,
        engine: &Result<(), LeaseError>,
        model: &Result<(), LeaseError>,
    ) -> Result<(), Divergence> {
        self.expect(engine == model, || format!("engine {engine:?}, model {model:?}"))
    }

    fn same_queue_list(&self) -> Result<(), Divergence> {
        let (engine, model) = (self.engine.list_queues(), self.model.list_queues());
        self.expect(engine == model, || format!("queues: engine {engine:?}, model {model:?}"))
    }

    fn same_delivery(&self, engine: &Delivery, model: &ModelDelivery) -> Result<(), Divergence> {
        let fields = |d: (&MessageId, &Bytes, u32, u64, u64, u64)| format!("{d:?}");
        let e = fields((
            &engine.id,
            &engine.payload,
            engine.delivery_count,
            engine.deadline.0,
            engine.received_at.0,
            engine.fencing_token,
        ));
        let m = fields((
            &model.id,
            &model.payload,
            model.delivery_count,
            model.deadline.0,
            model.received_at.0,
            model.fencing_token,
        ));
        self.expect(e == m, || {
            format!("delivery (id, payload, count, deadline, received_at, fence): engine {e}, model {m}")
        })?;
        let (er, mr) = (engine.dead_letter.as_deref(), model.dead_letter.as_deref());
        self.expect(er == mr, || format!("dead-letter record of {}: engine {er:?}, model {mr:?}", engine.id))
    }

    fn same_stats(&self, engine: &QueueStats, model: &ModelStats) -> Result<(), Divergence> {
        let c = &model.counters;
        let engine_view = [
            engine.ready,
            engine.delayed,
            engine.in_flight,
            engine.dead_letter_depth,
            engine.sent,
            engine.received,
            engine.redelivered,
            engine.acked,
            engine.late_acks,
            engine.stale_acks,
            engine.expired_acks,
            engine.expired,
            engine.extensions,
            engine.extensions_refused,
            engine.released,
            engine.dead_lettered,
            engine.purged,
            engine.dead_letter_overflow,
            engine.redriven_out,
            engine.redrive_too_large,
            engine.retention_dropped,
        ];
        let model_view = [
            model.ready,
            model.delayed,
            model.in_flight,
            model.dead_letter_depth,
            c.sent,
            c.received,
            c.redelivered,
            c.acked,
            c.late_acks,
            c.stale_acks,
            c.expired_acks,
            c.expired,
            c.extensions,
            c.extensions_refused,
            c.released,
            c.dead_lettered,
            c.purged,
            c.dead_letter_overflow,
            c.redriven_out,
            c.redrive_too_large,
            c.retention_dropped,
        ];
        const NAMES: &str = "ready delayed in_flight dead_letter_depth sent received redelivered acked late_acks \
                             stale_acks expired_acks expired extensions extensions_refused released dead_lettered \
                             purged dead_letter_overflow redriven_out redrive_too_large";
        for ((name, e), m) in NAMES.split_whitespace().zip(engine_view).zip(model_view) {
            self.expect(e == m, || format!("stats.{name}: engine {e}, model {m}"))?;
        }
        let ages = (engine.oldest_ready_age, model.oldest_ready_age);
        self.expect(ages.0 == ages.1, || format!("stats.oldest_ready_age: engine {:?}, model {:?}", ages.0, ages.1))?;
        let vis = (engine.visibility_timeout, model.visibility_timeout);
        self.expect(vis.0 == vis.1, || format!("stats.visibility_timeout: engine {:?}, model {:?}", vis.0, vis.1))?;
        for (name, histogram, samples) in [
            ("processing_time", &engine.processing_time, &model.processing),
            ("time_in_queue", &engine.time_in_queue, &model.time_in_queue),
            ("lease_left_at_ack", &engine.lease_left_at_ack, &model.lease_left_at_ack),
        ] {
            self.expect(histogram.len() == samples.len() as u64, || {
                format!("stats.{name} has {} samples, model {}", histogram.len(), samples.len())
            })?;
            if let Some(&max) = samples.iter().max() {
                // The engine keeps log buckets (1/16 relative precision), then
                // HdrHistogram adds its own rounding on read.
                let (got, slack) = (histogram.max(), max / 14 + 2);
                self.expect(got.abs_diff(max) <= slack, || format!("stats.{name} max: engine {got}, model {max}"))?;
            }
        }
        Ok(())
    }
}

/// An error's identity without its free-text reason (the model names the
/// broken rule, not the engine's wording).
pub fn error_key(error: &Error) -> String {
    match error {
        Error::InvalidConfig { field, .. } => format!("InvalidConfig({field})"),
        Error::InvalidQueueName { name, .. } => format!("InvalidQueueName({name:?})"),
        other => format!("{other:?}"),
    }
}

impl Drop for Differential {
    fn drop(&mut self) {
        if let Some(dir) = self.dir.take() {
            // Close the engine before its files go.
            self.queues.clear();
            drop(std::mem::replace(&mut self.engine, Engine::new()));
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A handle on a deleted queue named `name`, of an engine of its own: every
/// call on it is refused as on a deleted queue.
fn deleted_stand_in(name: &str) -> Queue {
    let engine = Engine::new();
    let queue = engine.create_queue(name, leaseq::QueueConfig::default()).expect("the name was valid once");
    engine.delete_queue(name).expect("nothing uses it");
    queue
}

/// A receipt issued by another engine instance.
fn foreign_receipt() -> (Engine, Receipt) {
    let engine = Engine::builder().clock(ManualClock::new()).default_shards(1).build();
    let queue = engine.create_queue("a", leaseq::QueueConfig::default()).expect("default config is valid");
    queue.send(&b"elsewhere"[..]).expect("an empty queue has room");
    let receipt = queue.receive(1).expect("a valid receive").remove(0).receipt;
    (engine, receipt)
}
