//! The durable state the log describes: live queues and messages, as a
//! replay of its entries.
//!
//! Invariants:
//!
//! * `Replica` is a pure function of the sequence of entries applied to it.
//!   Recovery builds one from the segments on disk; the writer keeps one up
//!   to date with every entry it writes, so compaction can write live state
//!   out without reading the engine (whose slots change under it). Entries
//!   that name a queue or message the replica does not hold (records of a
//!   queue deleted a moment earlier, or of a message whose older history a
//!   cleaning dropped) change nothing and are counted.
//! * Every entry takes the next log sequence number (`lsn`); a segment's
//!   preamble carries its own, so a replay that starts at any segment
//!   numbers the entries as the writer did. A message's `arrival` is the
//!   number of the entry it arrived by and a rewrite keeps it, so arrival
//!   order (FIFO at recovery) survives cleaning.
//! * A message's `home` is the segment holding its newest full state (its
//!   send or a rewrite); `by_segment` sums the live bytes homed in each, so
//!   the writer can tell what dropping a segment would cost.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;

use crate::config::QueueConfig;
use crate::dead_letter::DeadLetterRecord;
use crate::journal::Record;
use crate::log::id_table::IdTable;
use crate::log::record::{Entry, RestoredMessage};

/// A live queue.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct QueueState {
    pub(crate) name: String,
    pub(crate) config: QueueConfig,
    /// What `Queue::set_metadata` last stored (empty: none).
    pub(crate) metadata: Bytes,
}

/// A live message.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MessageState {
    pub(crate) queue: u32,
    /// Arrival order on its queue (FIFO is restored from it): the log
    /// sequence number of the entry it arrived by.
    pub(crate) arrival: u64,
    /// The segment holding its newest full state (module invariant).
    pub(crate) home: u64,
    /// When it arrived on its queue (Unix nanoseconds; 0: not known, from a
    /// log written before arrival times were logged).
    pub(crate) arrived: u64,
    pub(crate) payload: Bytes,
    /// Unix nanoseconds before which the message is not eligible: the end
    /// of its send's delay, or on a replicated engine the end of its current
    /// lease or release delay; 0 for none.
    pub(crate) deliver_at: u64,
    /// In flight until `deliver_at` (a replicated engine's lease in force
    /// when last logged), rather than delayed until then.
    pub(crate) leased: bool,
    /// Deliveries on its current queue.
    pub(crate) count: u32,
    /// Deliveries on earlier queues.
    pub(crate) carried: u32,
    pub(crate) dead_letter: Option<Arc<DeadLetterRecord>>,
}

/// Estimated bytes a message takes in a snapshot beyond its payload.
const MESSAGE_OVERHEAD: u64 = 48;

#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Replica {
    pub(crate) queues: BTreeMap<u32, QueueState>,
    pub(crate) messages: IdTable<MessageState>,
    /// The log sequence number the next entry takes.
    pub(crate) lsn: u64,
    /// The segment entries are being applied from (or written to).
    pub(crate) segment: u64,
    /// Live bytes (as `live_bytes` counts them) by home segment.
    by_segment: SegmentBytes,
    /// The next queue ordinal to hand out (ordinals are never reused).
    pub(crate) next_queue: u32,
    /// No message id at or above this was handed out.
    pub(crate) ids_below: u64,
    /// Entries that named a queue or message not held (see module docs).
    pub(crate) ignored: u64,
    /// What a snapshot of this state would take on disk, roughly.
    pub(crate) live_bytes: u64,
}

/// Live bytes by home segment. Homes are consecutive segment indexes that
/// only grow (the writer's current segment, the replay's), so a deque from
/// the oldest index still homing anything takes each update in O(1) (the
/// writer makes one per record it applies).
#[derive(Debug, Default, Clone)]
struct SegmentBytes {
    /// The segment of `bytes[0]`.
    first: u64,
    bytes: VecDeque<u64>,
}

impl PartialEq for SegmentBytes {
    /// Equal when every segment homes as many bytes in both (trailing zeros
    /// aside).
    fn eq(&self, other: &Self) -> bool {
        let end = |s: &SegmentBytes| s.first + s.bytes.len() as u64;
        let (from, to) = (self.first.min(other.first), end(self).max(end(other)));
        (from..to).all(|index| self.get(index) == other.get(index))
    }
}

impl SegmentBytes {
    fn get(&self, index: u64) -> u64 {
        index
            .checked_sub(self.first)
            .and_then(|at| usize::try_from(at).ok())
            .and_then(|at| self.bytes.get(at).copied())
            .unwrap_or(0)
    }

    fn add(&mut self, index: u64, size: u64) {
        if self.bytes.is_empty() {
            self.first = index;
        }
        while index < self.first {
            self.bytes.push_front(0);
            self.first -= 1;
        }
        let at = usize::try_from(index - self.first).unwrap_or(usize::MAX);
        if at >= self.bytes.len() {
            self.bytes.resize(at + 1, 0);
        }
        self.bytes[at] += size;
    }

    fn sub(&mut self, index: u64, size: u64) {
        let Some(at) = index.checked_sub(self.first).and_then(|at| usize::try_from(at).ok()) else { return };
        if let Some(bytes) = self.bytes.get_mut(at) {
            *bytes = bytes.saturating_sub(size);
        }
        // The oldest segments empty first: drop them from the front.
        while self.bytes.front() == Some(&0) {
            self.bytes.pop_front();
            self.first += 1;
        }
    }
}

/// Hashes a message id (or an `IdTable` page number) with one
/// multiplication (Fibonacci hashing) instead of SipHash: ids are handed
/// out by the engine, not chosen by whoever sends, so there is no collision
/// attack to resist, and the writer applies every record to the replica
/// (SipHash was a tenth of the writer's time under `Never`).
pub(crate) type IdHash = std::hash::BuildHasherDefault<IdHasher>;

/// See [`IdHash`].
#[derive(Default)]
pub(crate) struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are hashed here; any other input still hashes.
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, id: u64) {
        // The high bits of the product pick hashbrown's bucket and control
        // byte, so sequential keys spread over the whole table. (Locality
        // of neighbouring ids is `IdTable`'s pages' job, not the hash's.)
        self.0 = id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

impl Replica {
    /// Applies one entry (it takes the next log sequence number).
    pub(crate) fn apply(&mut self, entry: Entry) {
        let lsn = self.lsn;
        self.lsn += 1;
        match entry {
            Entry::Op(record) => self.apply_op_at(record, lsn),
            Entry::Snapshot { next_queue, ids_below } => {
                *self = Replica {
                    next_queue,
                    ids_below,
                    ignored: self.ignored,
                    lsn: self.lsn,
                    segment: self.segment,
                    ..Replica::default()
                };
            }
            Entry::Preamble { lsn, next_queue, ids_below } => {
                self.lsn = lsn.saturating_add(1);
                self.next_queue = self.next_queue.max(next_queue);
                self.ids_below = self.ids_below.max(ids_below);
            }
            Entry::Restored(m) => {
                let RestoredMessage {
                    queue,
                    id,
                    arrival,
                    arrived,
                    deliver_at,
                    leased,
                    count,
                    carried,
                    dead_letter,
                    payload,
                } = *m;
                if !self.queues.contains_key(&queue) {
                    self.ignored += 1;
                    return;
                }
                let state = MessageState {
                    queue,
                    arrival: arrival.unwrap_or(lsn),
                    home: self.segment,
                    arrived,
                    payload,
                    deliver_at,
                    leased,
                    count,
                    carried,
                    dead_letter,
                };
                self.insert(id, state);
            }
        }
    }

    /// Applies one transition's record (it takes the next log sequence
    /// number).
    pub(crate) fn apply_op(&mut self, record: Record) {
        let lsn = self.lsn;
        self.lsn += 1;
        self.apply_op_at(record, lsn);
    }

    fn apply_op_at(&mut self, record: Record, lsn: u64) {
        match record {
            Record::QueueCreated { queue, name, config } => {
                // A preamble names every live queue again: replace, not add.
                self.live_bytes += 64 + name.len() as u64;
                let old = self.queues.insert(queue, QueueState { name, config: *config, metadata: Bytes::new() });
                if let Some(old) = old {
                    self.live_bytes =
                        self.live_bytes.saturating_sub(64 + old.name.len() as u64 + old.metadata.len() as u64);
                }
                self.next_queue = self.next_queue.max(queue.saturating_add(1));
            }
            Record::QueueDeleted { queue } => {
                if let Some(state) = self.queues.remove(&queue) {
                    self.live_bytes = self.live_bytes.saturating_sub(64 + state.name.len() as u64);
                    let mut freed = 0;
                    self.messages.retain(|_, m| {
                        let keep = m.queue != queue;
                        if !keep {
                            freed += m.payload.len() as u64 + MESSAGE_OVERHEAD;
                        }
                        keep
                    });
                    self.live_bytes = self.live_bytes.saturating_sub(freed);
                } else {
                    self.ignored += 1;
                }
            }
            Record::Sent { queue, id, at, deliver_at, payload } => {
                if !self.queues.contains_key(&queue) {
                    self.ignored += 1;
                    return;
                }
                let state = MessageState {
                    queue,
                    arrival: lsn,
                    home: self.segment,
                    arrived: at,
                    payload,
                    deliver_at,
                    leased: false,
                    count: 0,
                    carried: 0,
                    dead_letter: None,
                };
                self.insert(id, state);
            }
            Record::Received { queue, id, count, until } => match self.messages.get_mut(id) {
                Some(m) if m.queue == queue => {
                    m.count = count;
                    if until != 0 {
                        m.deliver_at = until;
                        m.leased = true;
                    }
                }
                _ => self.ignored += 1,
            },
            Record::LeaseSet { queue, id, until } => match self.messages.get_mut(id) {
                Some(m) if m.queue == queue => {
                    m.deliver_at = until;
                    m.leased = true;
                }
                _ => self.ignored += 1,
            },
            Record::Released { queue, id, until } => match self.messages.get_mut(id) {
                Some(m) if m.queue == queue => {
                    m.deliver_at = until;
                    m.leased = false;
                }
                _ => self.ignored += 1,
            },
            Record::Gone { queue, id } => match self.messages.get(id) {
                Some(m) if m.queue == queue => {
                    self.remove(id);
                }
                _ => self.ignored += 1,
            },
            Record::Moved { from, to, id, at, carried, dead_letter } => {
                let moved = match self.messages.get(id) {
                    Some(m) if m.queue == from && self.queues.contains_key(&to) => true,
                    Some(m) if m.queue == from => {
                        // The destination is gone: the message went with it.
                        self.remove(id);
                        false
                    }
                    _ => false,
                };
                if !moved {
                    self.ignored += 1;
                    return;
                }
                let mut m = self.remove(id).expect("checked above");
                // Its payload stays where its send or rewrite put it (the
                // home is unchanged); its place in the new queue is this.
                m.arrival = lsn;
                m.queue = to;
                m.arrived = at;
                m.count = 0;
                m.deliver_at = 0;
                m.leased = false;
                m.carried = carried;
                m.dead_letter = dead_letter;
                self.insert(id, m);
            }
            Record::IdsReserved { below } => self.ids_below = self.ids_below.max(below),
            Record::RetentionSet { queue, retention } => match self.queues.get_mut(&queue) {
                Some(state) => state.config.retention = retention,
                None => self.ignored += 1,
            },
            Record::DeadLetterSet { queue, dead_letter_queue, max_receives } => match self.queues.get_mut(&queue) {
                Some(state) => {
                    state.config.dead_letter_queue = dead_letter_queue;
                    state.config.max_receives = max_receives;
                }
                None => self.ignored += 1,
            },
            Record::MetadataSet { queue, metadata } => match self.queues.get_mut(&queue) {
                Some(state) => {
                    self.live_bytes =
                        (self.live_bytes + metadata.len() as u64).saturating_sub(state.metadata.len() as u64);
                    state.metadata = metadata;
                }
                None => self.ignored += 1,
            },
        }
    }

    fn insert(&mut self, id: u64, state: MessageState) {
        self.ids_below = self.ids_below.max(id.saturating_add(1));
        let size = state.payload.len() as u64 + MESSAGE_OVERHEAD;
        self.live_bytes += size;
        self.by_segment.add(state.home, size);
        if let Some(old) = self.messages.insert(id, state) {
            self.forget(&old);
        }
    }

    fn remove(&mut self, id: u64) -> Option<MessageState> {
        let m = self.messages.remove(id)?;
        self.forget(&m);
        Some(m)
    }

    /// Takes a message that left out of the live byte counts.
    fn forget(&mut self, m: &MessageState) {
        let size = m.payload.len() as u64 + MESSAGE_OVERHEAD;
        self.live_bytes = self.live_bytes.saturating_sub(size);
        self.by_segment.sub(m.home, size);
    }

    /// Live bytes homed in segment `index`.
    pub(crate) fn live_in(&self, index: u64) -> u64 {
        self.by_segment.get(index)
    }

    /// The messages homed in segments below `index`, as the entries that
    /// rewrite them in place of their history there: oldest home first,
    /// and in arrival order within one.
    pub(crate) fn rewrites_below(&self, index: u64) -> Vec<(u64, Entry)> {
        let mut homed: Vec<(u64, &MessageState)> = self.messages.iter().filter(|(_, m)| m.home < index).collect();
        homed.sort_unstable_by_key(|(id, m)| (m.home, m.arrival, *id));
        homed.into_iter().map(|(id, m)| (m.home, rewrite(id, m, m.arrival))).collect()
    }

    /// The live queues, each after the queue its dead-letter link names: the
    /// order `restore` creates them in, so a dead-letter queue is there
    /// before its users even when the link was set after both were created
    /// (`Queue::set_dead_letter`). Else in ordinal order; a link to no live
    /// queue (never written) is left for `restore` to refuse.
    pub(crate) fn queues_in_link_order(&self) -> Vec<(u32, &QueueState)> {
        let by_name: HashMap<&str, u32> = self.queues.iter().map(|(ordinal, q)| (q.name.as_str(), *ordinal)).collect();
        let mut placed = std::collections::HashSet::new();
        let mut order = Vec::with_capacity(self.queues.len());
        for &start in self.queues.keys() {
            // The chain of links from `start` down to a queue placed already
            // (links are acyclic; the `contains` only bounds a bad log's walk).
            let mut chain = Vec::new();
            let mut at = Some(start);
            while let Some(ordinal) = at.filter(|o| !placed.contains(o) && !chain.contains(o)) {
                chain.push(ordinal);
                at = self.queues[&ordinal].config.dead_letter_queue.as_deref().and_then(|n| by_name.get(n).copied());
            }
            for ordinal in chain.into_iter().rev() {
                placed.insert(ordinal);
                order.push((ordinal, &self.queues[&ordinal]));
            }
        }
        order
    }

    /// The entries a new segment starts with (module invariant): its
    /// preamble, then every live queue.
    pub(crate) fn preamble(&self) -> Vec<Entry> {
        self.preamble_at(self.lsn)
    }

    fn preamble_at(&self, lsn: u64) -> Vec<Entry> {
        let header = Entry::Preamble { lsn, next_queue: self.next_queue, ids_below: self.ids_below };
        let mut entries = vec![header];
        for (queue, q) in &self.queues {
            entries.push(Entry::Op(Record::QueueCreated {
                queue: *queue,
                name: q.name.clone(),
                config: Box::new(q.config.clone()),
            }));
            if !q.metadata.is_empty() {
                entries.push(Entry::Op(Record::MetadataSet { queue: *queue, metadata: q.metadata.clone() }));
            }
        }
        entries
    }

    /// After a snapshot of `frames` entries was written as segment `index`:
    /// the writer's replica becomes what replaying it gives (every message
    /// homed there, numbered by its rank, and the numbering after it).
    pub(crate) fn rehome_all(&mut self, index: u64, frames: u64) {
        let ranks: HashMap<u64, u64, IdHash> =
            self.messages_in_order().into_iter().zip(0..).map(|((id, _), rank)| (id, rank)).collect();
        let count = ranks.len() as u64;
        self.segment = index;
        // The snapshot's preamble takes number `count`; every entry after it
        // the next.
        self.lsn = count + frames.saturating_sub(1);
        self.messages.retain(|id, m| {
            m.home = index;
            m.arrival = ranks[&id];
            true
        });
        let messages: u64 = self.by_segment.bytes.iter().sum();
        self.by_segment = SegmentBytes::default();
        self.by_segment.add(index, messages);
    }

    /// The live messages in arrival order, with their ids.
    pub(crate) fn messages_in_order(&self) -> Vec<(u64, &MessageState)> {
        let mut all: Vec<(u64, &MessageState)> = self.messages.iter().collect();
        all.sort_unstable_by_key(|(id, m)| (m.arrival, *id));
        all
    }

    /// The entries of a snapshot of this state, in the order to write them.
    /// A snapshot is a function of the state alone, not of the history that
    /// led there (replicas compare them): messages are numbered by their
    /// rank in the arrival order, and the preamble takes the number after
    /// the last rank.
    pub(crate) fn snapshot(&self) -> impl Iterator<Item = Entry> + '_ {
        let header = Entry::Snapshot { next_queue: self.next_queue, ids_below: self.ids_below };
        let ordered = self.messages_in_order();
        let queues = self.preamble_at(ordered.len() as u64);
        let messages = ordered.into_iter().zip(0..).map(|((id, m), rank)| rewrite(id, m, rank));
        std::iter::once(header).chain(queues).chain(messages.collect::<Vec<_>>())
    }

    /// Whether two replicas hold the same queues and messages in the same
    /// order (arrival numbers and homes aside).
    #[cfg(test)]
    pub(crate) fn same_state(&self, other: &Replica) -> bool {
        let order = |r: &Replica| -> Vec<(u64, MessageState)> {
            r.messages_in_order()
                .into_iter()
                .map(|(id, m)| (id, MessageState { arrival: 0, home: 0, ..m.clone() }))
                .collect()
        };
        self.queues == other.queues && order(self) == order(other) && self.next_queue == other.next_queue
    }
}

/// The entry that writes message `id` with its whole state and its place
/// in the arrival order.
fn rewrite(id: u64, m: &MessageState, arrival: u64) -> Entry {
    Entry::Restored(Box::new(RestoredMessage {
        queue: m.queue,
        id,
        arrival: Some(arrival),
        arrived: m.arrived,
        deliver_at: m.deliver_at,
        leased: m.leased,
        count: m.count,
        carried: m.carried,
        dead_letter: m.dead_letter.clone(),
        payload: m.payload.clone(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(queue: u32, id: u64) -> Entry {
        Entry::Op(Record::Sent { queue, id, at: id, deliver_at: 0, payload: Bytes::from(vec![id as u8; 10]) })
    }

    fn created(queue: u32, name: &str) -> Entry {
        Entry::Op(Record::QueueCreated { queue, name: name.into(), config: Box::default() })
    }

    #[test]
    fn replay_follows_each_message() {
        let mut r = Replica::default();
        for e in [
            created(0, "dlq"),
            created(1, "jobs"),
            sent(1, 10),
            sent(1, 11),
            sent(1, 12),
            Entry::Op(Record::Received { queue: 1, id: 10, count: 1, until: 0 }),
            Entry::Op(Record::Received { queue: 1, id: 10, count: 2, until: 0 }),
            Entry::Op(Record::Gone { queue: 1, id: 11 }),
            Entry::Op(Record::Moved { from: 1, to: 0, id: 12, at: 77, carried: 1, dead_letter: None }),
        ] {
            r.apply(e);
        }
        let order: Vec<(u64, u32, u32)> = r.messages_in_order().iter().map(|(id, m)| (*id, m.queue, m.count)).collect();
        assert_eq!(order, vec![(10, 1, 2), (12, 0, 0)]);
        let arrived: Vec<u64> = r.messages_in_order().iter().map(|(_, m)| m.arrived).collect();
        assert_eq!(arrived, vec![10, 77], "a move's time replaces the send's");
        assert_eq!(r.next_queue, 2);
        assert_eq!(r.ids_below, 13);
        assert_eq!(r.ignored, 0);
    }

    #[test]
    fn records_of_a_deleted_queue_change_nothing() {
        let mut r = Replica::default();
        for e in [created(0, "a"), sent(0, 1), Entry::Op(Record::QueueDeleted { queue: 0 }), sent(0, 2)] {
            r.apply(e);
        }
        assert!(r.messages.is_empty());
        assert!(r.queues.is_empty());
        assert_eq!(r.ignored, 1);
        assert_eq!(r.next_queue, 1, "a deleted queue's ordinal stays used");
    }

    #[test]
    fn a_snapshot_replays_to_the_same_state() {
        let mut r = Replica::default();
        for e in history() {
            r.apply(e);
        }
        let mut again = Replica { ignored: 5, ..Replica::default() };
        again.apply(created(9, "old"));
        for e in r.snapshot() {
            again.apply(e);
        }
        assert!(again.same_state(&r), "{again:?} vs {r:?}");
        assert_eq!(again.queues[&3].config.retention, Some(std::time::Duration::from_secs(60)));
        assert_eq!(again.ids_below, 1000);
        assert_eq!(again.live_bytes, r.live_bytes);
    }

    fn history() -> Vec<Entry> {
        vec![
            created(0, "dlq"),
            created(3, "jobs"),
            sent(3, 1),
            sent(3, 2),
            Entry::Op(Record::Received { queue: 3, id: 2, count: 4, until: 0 }),
            sent(3, 5),
            Entry::Op(Record::Moved { from: 3, to: 0, id: 1, at: 78, carried: 2, dead_letter: None }),
            Entry::Op(Record::IdsReserved { below: 1000 }),
            Entry::Op(Record::RetentionSet { queue: 3, retention: Some(std::time::Duration::from_secs(60)) }),
            Entry::Op(Record::MetadataSet { queue: 3, metadata: Bytes::from_static(b"m") }),
            sent(0, 6),
            Entry::Op(Record::Gone { queue: 3, id: 5 }),
        ]
    }

    /// The writer's replica after it wrote a snapshot is exactly the replica
    /// a replay of that snapshot builds (numbers, homes and sizes included),
    /// so what it writes after the snapshot numbers as a replay will.
    #[test]
    fn after_a_snapshot_the_writers_replica_is_the_replay_of_it() {
        let mut writer = Replica { segment: 4, ..Replica::default() };
        for e in history() {
            writer.apply(e);
        }
        let entries: Vec<Entry> = writer.snapshot().collect();
        let mut replay = Replica { segment: 9, lsn: 12_345, ..Replica::default() };
        for e in entries.clone() {
            replay.apply(e);
        }
        writer.rehome_all(9, entries.len() as u64);
        assert_eq!(writer, replay);
        assert_eq!(writer.live_in(9), writer.live_bytes - (64 + 3) - (64 + 4) - 1, "every message, no queue");
    }

    /// Replaying from a segment that starts with a preamble, with the older
    /// history gone and the messages homed there rewritten forward, gives
    /// the full replay's state and order.
    #[test]
    fn a_replay_from_a_preamble_after_rewrites_matches_the_full_replay() {
        let mut full = Replica { segment: 1, ..Replica::default() };
        for e in history() {
            full.apply(e);
        }
        // Segment 2 starts: its preamble, then more history.
        full.segment = 2;
        let mut suffix = full.preamble();
        let later = vec![
            sent(3, 7),
            Entry::Op(Record::Received { queue: 3, id: 2, count: 5, until: 0 }),
            Entry::Op(Record::Received { queue: 3, id: 7, count: 1, until: 0 }),
            sent(3, 8),
        ];
        suffix.extend(later);
        for e in suffix.clone() {
            full.apply(e);
        }
        // Cleaning drops segment 1: the messages homed there move forward.
        let rewrites: Vec<Entry> = full.rewrites_below(2).into_iter().map(|(_, e)| e).collect();
        assert_eq!(rewrites.len(), 3, "ids 1, 2 and 6 were homed in segment 1");
        full.segment = 3;
        for e in rewrites.clone() {
            full.apply(e);
        }
        assert_eq!(full.live_in(1), 0);
        let mut replay = Replica { segment: 2, ..Replica::default() };
        for e in suffix {
            replay.apply(e);
        }
        replay.segment = 3;
        for e in rewrites {
            replay.apply(e);
        }
        assert!(replay.same_state(&full), "{replay:?} vs {full:?}");
        let order: Vec<u64> = replay.messages_in_order().iter().map(|(id, _)| *id).collect();
        assert_eq!(order, vec![2, 1, 6, 7, 8], "arrival order, a move counting as an arrival");
        assert_eq!(replay.live_bytes, full.live_bytes);
        assert_eq!(replay.messages.get(2).map(|m| m.count), Some(5));
    }
}
