//! A Jepsen-style linearizability checker for queue histories, checked
//! against the reference [`Model`].
//!
//! Invariant: a history passes iff some total order of its operations,
//! consistent with real time (an operation that responded before another was
//! invoked comes first), makes the model produce every observed result.
//! Operations that never responded (crashed or timed-out clients) may take
//! effect or not.
//!
//! The search is Wing–Gong / Lowe (WGL): depth first over the *minimal*
//! operations (those invoked before every not yet linearized operation
//! responded), cloning the model at each step, with memoization of visited
//! (linearized set, model state, receipts) configurations. A search that runs
//! past [`MAX_STEPS`] (or the bound given to [`check_bounded`]) reports
//! [`CheckError::Inconclusive`], never a pass.
//!
//! A batch receive is not a snapshot: the engine takes its messages one at a
//! time inside the call (lock-free pops, which other receivers interleave
//! with), as SQS's ReceiveMessage does. So the checker splits a receive that
//! returned `k` messages into `k` single receives, each with the call's own
//! invocation and response, plus one receive that found nothing when it
//! returned fewer than it asked for; acks refer to the piece that took their
//! message. Reported op ids are those of the history as recorded.
//!
//! Operations that never responded (indeterminate):
//! * A send may be applied with any received id that no completed send
//!   returned, or not at all; with a fresh id (one nobody saw) only if some
//!   send was refused: a message nobody sees can change no other answer but
//!   a refusal for want of room (it only adds to what is ready, and no
//!   receive returned it), so without one that choice is never needed.
//! * A receive of up to `max` is split into `max` single receives, each of
//!   which may be applied at any point after the call's invocation (taking
//!   one message the model would let it take) or not at all; so the call may
//!   have taken any number of messages up to `max`, as a receive whose
//!   deliveries were only partly logged before a crash may have. What such a
//!   piece took is unknown, so no ack can name it. The pieces of one call are
//!   interchangeable and are applied in index order only (symmetry, not a
//!   constraint), and a piece takes a message as early as it could
//!   (`Search::dfs` says why that loses nothing). Only messages that no
//!   completed receive returned are tried:
//!   on the fixed clock (below) a message leased with a non-zero visibility
//!   is never ready again, so a piece that took a message some completed
//!   receive returned leaves that receive unexplainable wherever it is
//!   placed; leaving such choices out loses no linearization. A piece with a
//!   zero visibility may take any message it could.
//! * An ack is only taken as not applied. On the fixed clock this is
//!   indistinguishable from applied, except by a later ack of the same
//!   receipt (refused `Stale` only if the first one took effect) or by the
//!   queue's capacity.
//!
//! Limits:
//! * The clock is taken as fixed for the whole history: record it on a
//!   `ManualClock` that is not advanced, with a visibility long enough that no
//!   lease expires inside the window (the zero-visibility case above is the
//!   one exception the model settles within a step).
//! * A history relying on an indeterminate ack having taken effect (a re-ack
//!   of its receipt refused as stale) is reported as a violation.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use leaseq::{MAX_BATCH, MessageId, QueueConfig};

use crate::differential::error_key;
use crate::{Model, ModelReceipt, QueueRef};

/// An operation's index in its history.
pub type OpId = usize;

/// Steps (model applications) after which the search gives up.
pub const MAX_STEPS: usize = 2_000_000;

/// What a client asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// Send one message without delay.
    Send {
        /// Queue name.
        queue: String,
        /// The payload.
        payload: Bytes,
    },
    /// Receive up to `max` messages with a lease of `visibility`.
    Receive {
        /// Queue name.
        queue: String,
        /// Most messages to return.
        max: usize,
        /// The lease length.
        visibility: Duration,
    },
    /// Ack the delivery at `index` of the receive `receive`.
    Ack {
        /// Queue name.
        queue: String,
        /// The receive operation that handed out the receipt.
        receive: OpId,
        /// The delivery's index in that receive's result.
        index: usize,
    },
}

/// What a client observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A send accepted with this id.
    Sent(MessageId),
    /// A receive returned these (id, delivery count) pairs, in order.
    Received(Vec<(MessageId, u32)>),
    /// An ack succeeded.
    Acked,
    /// The operation failed: for a send or receive the engine error's
    /// [`error_key`], for an ack the `LeaseError` as `{:?}`.
    Failed(String),
}

/// One operation of a history: invocation and (if it responded) response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    /// The client (thread) that ran it.
    pub process: usize,
    /// What it asked.
    pub call: Call,
    /// Logical time of the invocation.
    pub invoked: u64,
    /// Logical time of the response and what it observed; `None`: indeterminate.
    pub completed: Option<(u64, Outcome)>,
}

/// A recorder shared by many threads.
#[derive(Debug, Default)]
pub struct History {
    inner: Mutex<(u64, Vec<Op>)>,
}

impl History {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, Vec<Op>)> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records an invocation; call it just before the operation starts.
    pub fn invoke(&self, process: usize, call: Call) -> OpId {
        let mut g = self.lock();
        g.0 += 1;
        let invoked = g.0;
        g.1.push(Op { process, call, invoked, completed: None });
        g.1.len() - 1
    }

    /// Records a response; call it just after the operation returned. An
    /// unknown or already completed op is ignored.
    pub fn complete(&self, op: OpId, outcome: Outcome) {
        let mut g = self.lock();
        g.0 += 1;
        let at = g.0;
        if let Some(o) = g.1.get_mut(op) {
            if o.completed.is_none() {
                o.completed = Some((at, outcome));
            }
        }
    }

    /// A copy of the operations recorded so far.
    pub fn ops(&self) -> Vec<Op> {
        self.lock().1.clone()
    }
}

/// A passing check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckReport {
    /// One linearization (indeterminate ops left out did not take effect).
    pub order: Vec<OpId>,
    /// Model applications the search made.
    pub steps: usize,
}

/// A history no linearization explains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The longest linearizable prefix found.
    pub prefix: Vec<OpId>,
    /// Each op that could be placed next after that prefix, and why the model
    /// rejected it.
    pub stuck: Vec<(OpId, String)>,
}

/// Why a check did not pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckError {
    /// No linearization exists.
    Violation(Violation),
    /// The search ran past [`MAX_STEPS`]: neither pass nor fail.
    Inconclusive {
        /// Steps made.
        steps: usize,
    },
    /// The history itself is malformed (e.g. an ack naming an unknown receive).
    Malformed(String),
}

impl std::fmt::Display for CheckError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CheckError::Violation(v) => {
                write!(f, "not linearizable after {} ops {:?}; cannot place:", v.prefix.len(), v.prefix)?;
                for (op, why) in &v.stuck {
                    write!(f, " op {op}: {why};")?;
                }
                Ok(())
            }
            CheckError::Inconclusive { steps } => write!(f, "inconclusive after {steps} steps"),
            CheckError::Malformed(why) => write!(f, "malformed history: {why}"),
        }
    }
}

#[derive(Clone)]
struct State {
    model: Model,
    done: Vec<bool>,
    /// Receipts handed out by each linearized receive on this path.
    receipts: Vec<Option<Vec<ModelReceipt>>>,
    /// Ids already sent on this path.
    sent: HashSet<MessageId>,
}

struct Search<'a> {
    ops: &'a [Op],
    queues: Vec<QueueRef>,
    /// Ids an indeterminate send may have been given.
    orphan_ids: Vec<MessageId>,
    /// Whether an indeterminate send is also tried with an id nobody saw:
    /// only useful to explain a send refused for want of room.
    fresh_ids: bool,
    /// Ids some completed receive returned (an indeterminate receive never
    /// usefully takes one; see the module docs).
    returned: HashSet<MessageId>,
    /// For each piece of an indeterminate receive after its first, the
    /// piece before it (applied first: the pieces are interchangeable).
    previous_piece: Vec<Option<OpId>>,
    seen: HashSet<(Vec<bool>, String)>,
    steps: usize,
    max_steps: usize,
    best: Violation,
    order: Vec<OpId>,
}

/// Checks `ops` against a model with `shards` default shards on which
/// `queues` were created first (in order).
///
/// # Errors
/// [`CheckError::Violation`] if no linearization exists,
/// [`CheckError::Inconclusive`] if the search was cut off,
/// [`CheckError::Malformed`] if the history or the queue setup is invalid.
pub fn check(ops: &[Op], queues: &[(String, QueueConfig)], shards: usize) -> Result<CheckReport, CheckError> {
    check_bounded(ops, queues, shards, MAX_STEPS)
}

/// [`check`] that gives up after `max_steps` model applications instead of
/// [`MAX_STEPS`]: for a caller with a time budget (a step of a debug build
/// on a history of a hundred ops is a few hundred microseconds).
///
/// # Errors
/// As [`check`], with [`CheckError::Inconclusive`] past `max_steps`.
pub fn check_bounded(
    ops: &[Op],
    queues: &[(String, QueueConfig)],
    shards: usize,
    max_steps: usize,
) -> Result<CheckReport, CheckError> {
    let mut model = Model::new(shards);
    for (name, config) in queues {
        model.create_queue(name, config.clone()).map_err(|e| CheckError::Malformed(format!("queue '{name}': {e}")))?;
    }
    let mut refs = Vec::new();
    let mut completed_sent = HashSet::new();
    for (i, op) in ops.iter().enumerate() {
        let name = match &op.call {
            Call::Send { queue, .. } | Call::Receive { queue, .. } | Call::Ack { queue, .. } => queue,
        };
        let q = model.queue(name).ok_or_else(|| CheckError::Malformed(format!("op {i}: unknown queue '{name}'")))?;
        refs.push(q);
        if let Some((at, _)) = &op.completed {
            if *at < op.invoked {
                return Err(CheckError::Malformed(format!("op {i} responded before it was invoked")));
            }
        }
        if let Some((_, Outcome::Sent(id))) = &op.completed {
            if !completed_sent.insert(*id) {
                return Err(CheckError::Malformed(format!("op {i}: id {id} returned by two sends")));
            }
        }
        if let Call::Ack { receive, index, .. } = &op.call {
            let r = ops.get(*receive).ok_or_else(|| CheckError::Malformed(format!("op {i}: no op {receive}")))?;
            let ok = matches!(&r.call, Call::Receive { .. })
                && matches!(&r.completed, Some((at, Outcome::Received(got))) if *index < got.len() && *at < op.invoked);
            if !ok {
                return Err(CheckError::Malformed(format!(
                    "op {i}: acks delivery {index} of op {receive}, which is not a receive that returned it before the ack"
                )));
            }
        }
    }
    let (ops, origin) = split_batches(ops);
    let ops = &ops[..];
    let refs: Vec<QueueRef> = origin.iter().map(|&o| refs[o]).collect();
    let mut orphan_ids: Vec<MessageId> = Vec::new();
    for op in ops {
        if let Some((_, Outcome::Received(got))) = &op.completed {
            for (id, _) in got {
                if !completed_sent.contains(id) && !orphan_ids.contains(id) {
                    orphan_ids.push(*id);
                }
            }
        }
    }
    let returned: HashSet<MessageId> = ops
        .iter()
        .filter_map(|op| match &op.completed {
            Some((_, Outcome::Received(got))) => Some(got.iter().map(|(id, _)| *id)),
            _ => None,
        })
        .flatten()
        .collect();
    let previous_piece = (0..ops.len())
        .map(|j| {
            let indeterminate_receive = matches!((&ops[j].call, &ops[j].completed), (Call::Receive { .. }, None));
            (indeterminate_receive && j > 0 && origin[j - 1] == origin[j]).then(|| j - 1)
        })
        .collect();
    let state = State { model, done: vec![false; ops.len()], receipts: vec![None; ops.len()], sent: HashSet::new() };
    let mut search = Search {
        ops,
        queues: refs,
        orphan_ids,
        fresh_ids: ops
            .iter()
            .any(|op| matches!((&op.call, &op.completed), (Call::Send { .. }, Some((_, Outcome::Failed(_)))))),
        returned,
        previous_piece,
        seen: HashSet::new(),
        steps: 0,
        max_steps,
        best: Violation { prefix: Vec::new(), stuck: Vec::new() },
        order: Vec::new(),
    };
    let recorded = |pieces: Vec<OpId>| {
        let mut ids: Vec<OpId> = Vec::new();
        for piece in pieces {
            if ids.last() != Some(&origin[piece]) {
                ids.push(origin[piece]);
            }
        }
        ids
    };
    match search.dfs(state, Vec::new()) {
        Some(true) => Ok(CheckReport { order: recorded(search.order), steps: search.steps }),
        Some(false) => {
            let stuck = search.best.stuck.into_iter().map(|(piece, why)| (origin[piece], why)).collect();
            Err(CheckError::Violation(Violation { prefix: recorded(search.best.prefix), stuck }))
        }
        None => Err(CheckError::Inconclusive { steps: search.steps }),
    }
}

/// Splits every receive that returned messages into single receives (and
/// one that found nothing if it returned fewer than `max`), and every
/// indeterminate receive into `max` indeterminate single receives, rewriting
/// acks to name the piece that took their message; returns the ops and, for
/// each, the recorded op it came from. Run on a validated history.
fn split_batches(ops: &[Op]) -> (Vec<Op>, Vec<OpId>) {
    let mut out = Vec::new();
    let mut origin = Vec::new();
    // For each recorded op, the piece that took each of its deliveries.
    let mut pieces: Vec<Vec<OpId>> = Vec::with_capacity(ops.len());
    for (i, op) in ops.iter().enumerate() {
        let mut taken = Vec::new();
        match (&op.call, &op.completed) {
            (Call::Receive { queue, max, visibility }, Some((at, Outcome::Received(got)))) if !got.is_empty() => {
                let single = |result: Vec<(MessageId, u32)>| Op {
                    process: op.process,
                    call: Call::Receive { queue: queue.clone(), max: 1, visibility: *visibility },
                    invoked: op.invoked,
                    completed: Some((*at, Outcome::Received(result))),
                };
                for delivery in got {
                    taken.push(out.len());
                    out.push(single(vec![*delivery]));
                    origin.push(i);
                }
                if got.len() < *max {
                    out.push(single(Vec::new()));
                    origin.push(i);
                }
            }
            // A size the model refuses stays one op, which the model fails.
            (Call::Receive { queue, max, visibility }, None) if (1..=MAX_BATCH).contains(max) => {
                for _ in 0..*max {
                    out.push(Op {
                        process: op.process,
                        call: Call::Receive { queue: queue.clone(), max: 1, visibility: *visibility },
                        invoked: op.invoked,
                        completed: None,
                    });
                    origin.push(i);
                }
            }
            _ => {
                out.push(op.clone());
                origin.push(i);
            }
        }
        pieces.push(taken);
    }
    for op in &mut out {
        if let Call::Ack { receive, index, .. } = &mut op.call {
            if let Some(&piece) = pieces.get(*receive).and_then(|p| p.get(*index)) {
                (*receive, *index) = (piece, 0);
            }
        }
    }
    (out, origin)
}

fn response(op: &Op) -> u64 {
    op.completed.as_ref().map_or(u64::MAX, |(at, _)| *at)
}

impl Search<'_> {
    /// `Some(true)`: linearized; `Some(false)`: no linearization from here;
    /// `None`: cut off.
    ///
    /// `late`: the (indeterminate receive piece, message) pairs that could
    /// already have been placed before the op that got here, a completed one;
    /// they are not tried here. A piece taking a message nobody saw can be
    /// moved before a completed op it follows and could precede, keeping every
    /// result (the message only leaves the ready set sooner, which no op that
    /// did not return it can miss: a receive that left it ready returned its
    /// full `max`), so taking it as early as possible loses no linearization
    /// and spares the search every later place. The pairs are part of the
    /// memo key, since what is tried from a state depends on them.
    fn dfs(&mut self, state: State, late: Vec<(OpId, Option<MessageId>)>) -> Option<bool> {
        let pending: Vec<OpId> = (0..self.ops.len()).filter(|&i| !state.done[i]).collect();
        if pending.iter().all(|&i| self.ops[i].completed.is_none()) {
            return Some(true);
        }
        let key = (state.done.clone(), format!("{:?}{:?}{late:?}", state.model, state.receipts));
        if !self.seen.insert(key) {
            return Some(false);
        }
        let horizon = pending.iter().map(|&i| response(&self.ops[i])).min().unwrap_or(u64::MAX);
        let mut stuck = Vec::new();
        // Then ops that responded, then the other indeterminate ones: a
        // history whose indeterminate sends took no effect is linearized
        // without trying them.
        let (answered, open): (Vec<OpId>, Vec<OpId>) = pending.iter().partition(|&&i| self.ops[i].completed.is_some());
        let open: Vec<(OpId, Vec<Option<MessageId>>)> = open
            .into_iter()
            .filter(|&i| self.ops[i].invoked <= horizon)
            .map(|i| (i, self.candidates(&state, i)))
            .collect();
        // What may not wait until after a completed op placed here.
        let early: Vec<(OpId, Option<MessageId>)> = open
            .iter()
            .filter(|(i, _)| matches!(&self.ops[*i].call, Call::Receive { visibility, .. } if !visibility.is_zero()))
            .flat_map(|(i, ids)| ids.iter().map(move |id| (*i, *id)))
            .collect();
        let answered: Vec<(OpId, Vec<Option<MessageId>>)> =
            answered.into_iter().map(|i| (i, self.candidates(&state, i))).collect();
        // A receive piece that can take a message nobody saw is tried first:
        // it may take it only now (above), and a drain that found nothing
        // usually says some piece did.
        let (taking, open): (Vec<_>, Vec<_>) =
            open.into_iter().partition(|(i, ids)| !ids.is_empty() && matches!(self.ops[*i].call, Call::Receive { .. }));
        for (i, tries) in taking.into_iter().chain(answered).chain(open) {
            if self.ops[i].invoked > horizon {
                continue;
            }
            for attempt in tries {
                if late.contains(&(i, attempt)) {
                    continue;
                }
                self.steps += 1;
                if self.steps > self.max_steps {
                    return None;
                }
                let mut next = state.clone();
                match self.apply(&mut next, i, attempt) {
                    Ok(()) => {
                        next.done[i] = true;
                        self.order.push(i);
                        if self.order.len() > self.best.prefix.len() {
                            self.best = Violation { prefix: self.order.clone(), stuck: Vec::new() };
                        }
                        let late = if self.ops[i].completed.is_some() { early.clone() } else { Vec::new() };
                        match self.dfs(next, late) {
                            Some(false) => {}
                            other => return other,
                        }
                        self.order.pop();
                    }
                    // An indeterminate op the model refuses here is one that
                    // did not take effect here: not a reason to be stuck.
                    Err(why) if self.ops[i].completed.is_some() => stuck.push((i, why)),
                    Err(_) => {}
                }
            }
        }
        if self.order == self.best.prefix && self.best.stuck.is_empty() {
            self.best.stuck = stuck;
        }
        Some(false)
    }

    /// The ids to try for op `i`: for an indeterminate send the id it is
    /// given, for an indeterminate receive the message it takes, one `None`
    /// for an op that responded; none at all for an indeterminate ack.
    fn candidates(&self, state: &State, i: OpId) -> Vec<Option<MessageId>> {
        let op = &self.ops[i];
        match (&op.call, &op.completed) {
            (Call::Send { .. }, None) => {
                let mut ids: Vec<Option<MessageId>> =
                    self.orphan_ids.iter().filter(|id| !state.sent.contains(id)).map(|id| Some(*id)).collect();
                if self.fresh_ids {
                    ids.push(Some(MessageId::from_u64(u64::MAX - i as u64)));
                }
                ids
            }
            (Call::Receive { visibility, .. }, None) => {
                if self.previous_piece[i].is_some_and(|p| !state.done[p]) {
                    return Vec::new();
                }
                // A single receive takes from the oldest ready group.
                let first = state.model.ready_groups(self.queues[i]).into_iter().next().unwrap_or_default();
                first.into_iter().filter(|id| visibility.is_zero() || !self.returned.contains(id)).map(Some).collect()
            }
            // Indeterminate acks are only taken as never applied.
            (_, None) => Vec::new(),
            _ => vec![None],
        }
    }

    fn apply(&self, state: &mut State, i: OpId, id: Option<MessageId>) -> Result<(), String> {
        let op = &self.ops[i];
        let q = self.queues[i];
        let observed = op.completed.as_ref().map(|(_, o)| o);
        match &op.call {
            Call::Send { payload, .. } => {
                let id = match (observed, id) {
                    (Some(Outcome::Sent(id)), _) => *id,
                    (_, Some(id)) => id,
                    (_, None) => MessageId::from_u64(u64::MAX - i as u64),
                };
                let got = state.model.send(q, payload.clone(), Duration::ZERO, id);
                match (got, observed) {
                    (Ok(()), Some(Outcome::Sent(_)) | None) => {
                        state.sent.insert(id);
                        Ok(())
                    }
                    (Err(e), Some(Outcome::Failed(k))) if error_key(&e) == *k => Ok(()),
                    (Err(_), None) => Ok(()),
                    (got, observed) => Err(format!("send: model says {got:?}, observed {observed:?}")),
                }
            }
            Call::Receive { max, visibility, .. } if observed.is_none() => {
                // An indeterminate piece taking message `id`; what it
                // received stays unknown (`receipts[i]` stays `None`).
                let id = id.ok_or("an indeterminate receive is tried with a message")?;
                let plan = state.model.receive_plan(q, *max, Some(*visibility)).map_err(|e| format!("{e}"))?;
                state.model.check_choice(q, plan, &[id])?;
                state.model.receive_chosen(q, plan, &[id]);
                Ok(())
            }
            Call::Receive { max, visibility, .. } => {
                match (state.model.receive_plan(q, *max, Some(*visibility)), observed) {
                    (Ok(plan), Some(Outcome::Received(got))) => {
                        let ids: Vec<MessageId> = got.iter().map(|(id, _)| *id).collect();
                        state.model.check_choice(q, plan, &ids)?;
                        let deliveries = state.model.receive_chosen(q, plan, &ids);
                        for (d, (id, count)) in deliveries.iter().zip(got) {
                            if d.delivery_count != *count {
                                return Err(format!(
                                    "returned {id} with delivery count {count}, the model says {}",
                                    d.delivery_count
                                ));
                            }
                        }
                        state.receipts[i] = Some(deliveries.into_iter().map(|d| d.receipt).collect());
                        Ok(())
                    }
                    (Err(e), Some(Outcome::Failed(k))) if error_key(&e) == *k => Ok(()),
                    (plan, observed) => Err(format!("receive: model says {plan:?}, observed {observed:?}")),
                }
            }
            Call::Ack { receive, index, .. } => {
                let receipt = state
                    .receipts
                    .get(*receive)
                    .and_then(|r| r.as_ref())
                    .and_then(|r| r.get(*index))
                    .cloned()
                    .ok_or_else(|| format!("receive op {receive} is not linearized before its ack"))?;
                let got = state.model.ack(q, &receipt);
                match (&got, observed) {
                    (Ok(()), Some(Outcome::Acked)) => Ok(()),
                    (Err(e), Some(Outcome::Failed(k))) if format!("{e:?}") == *k => Ok(()),
                    _ => Err(format!("ack of op {receive}[{index}]: model says {got:?}, observed {observed:?}")),
                }
            }
        }
    }
}

/// A history as text, one op per line, that [`read_ops`] reads back: how a
/// history recorded elsewhere (a cluster test) is kept for replay.
///
/// `process invoked queue call -> response`, where call is `send PAYLOAD`
/// (UTF-8, no spaces), `receive MAX VISIBILITY_NANOS` or `ack RECEIVE
/// INDEX`, and response is `-` (indeterminate) or `AT sent ID`, `AT
/// received ID:COUNT,...`, `AT acked`, `AT failed KEY` (ids in hex).
pub fn write_ops(ops: &[Op]) -> String {
    let mut out = String::new();
    for op in ops {
        let (queue, call) = match &op.call {
            Call::Send { queue, payload } => (queue, format!("send {}", String::from_utf8_lossy(payload))),
            Call::Receive { queue, max, visibility } => (queue, format!("receive {max} {}", visibility.as_nanos())),
            Call::Ack { queue, receive, index } => (queue, format!("ack {receive} {index}")),
        };
        let response = match &op.completed {
            None => "-".to_string(),
            Some((at, Outcome::Sent(id))) => format!("{at} sent {:x}", id.as_u64()),
            Some((at, Outcome::Received(got))) => {
                let got: Vec<String> = got.iter().map(|(id, n)| format!("{:x}:{n}", id.as_u64())).collect();
                format!("{at} received {}", got.join(","))
            }
            Some((at, Outcome::Acked)) => format!("{at} acked"),
            Some((at, Outcome::Failed(key))) => format!("{at} failed {key}"),
        };
        out.push_str(&format!("{} {} {queue} {call} -> {response}\n", op.process, op.invoked));
    }
    out
}

/// Reads what [`write_ops`] wrote.
///
/// # Errors
/// The line number and what is wrong with it.
pub fn read_ops(text: &str) -> Result<Vec<Op>, String> {
    fn num<T: std::str::FromStr>(word: Option<&str>, what: &str) -> Result<T, String> {
        word.and_then(|w| w.parse().ok()).ok_or_else(|| format!("expected {what}"))
    }
    fn id(hex: &str) -> Result<MessageId, String> {
        u64::from_str_radix(hex, 16).map(MessageId::from_u64).map_err(|_| format!("{hex:?} is not a hex id"))
    }
    let line = |line: &str| -> Result<Op, String> {
        let (call, response) = line.split_once(" -> ").ok_or("no ' -> '")?;
        let mut words = call.split(' ');
        let process = num(words.next(), "a process")?;
        let invoked = num(words.next(), "an invocation time")?;
        let queue = words.next().ok_or("expected a queue")?.to_string();
        let call = match words.next() {
            Some("send") => Call::Send { queue, payload: Bytes::from(words.next().unwrap_or("").to_string()) },
            Some("receive") => Call::Receive {
                queue,
                max: num(words.next(), "a max")?,
                visibility: Duration::from_nanos(num(words.next(), "a visibility")?),
            },
            Some("ack") => {
                Call::Ack { queue, receive: num(words.next(), "a receive")?, index: num(words.next(), "an index")? }
            }
            other => return Err(format!("unknown call {other:?}")),
        };
        let completed = if response == "-" {
            None
        } else {
            let mut words = response.splitn(3, ' ');
            let at = num(words.next(), "a response time")?;
            let outcome = match (words.next(), words.next().unwrap_or("")) {
                (Some("sent"), hex) => Outcome::Sent(id(hex)?),
                (Some("received"), "") => Outcome::Received(Vec::new()),
                (Some("received"), got) => Outcome::Received(
                    got.split(',')
                        .map(|d| {
                            let (hex, n) = d.split_once(':').ok_or("expected ID:COUNT")?;
                            Ok((id(hex)?, num(Some(n), "a count")?))
                        })
                        .collect::<Result<_, String>>()?,
                ),
                (Some("acked"), _) => Outcome::Acked,
                (Some("failed"), key) => Outcome::Failed(key.to_string()),
                (other, _) => return Err(format!("unknown response {other:?}")),
            };
            Some((at, outcome))
        };
        Ok(Op { process, call, invoked, completed })
    };
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(n, l)| line(l).map_err(|e| format!("line {}: {e}", n + 1)))
        .collect()
}
