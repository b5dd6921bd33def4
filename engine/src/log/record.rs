//! The log's record format: how one entry becomes bytes on disk and back.
//!
//! A frame is `magic (u16) | body length (u32) | CRC32C (u32) | body`, all
//! little-endian, where the CRC covers the length field and the body, so a
//! flipped bit anywhere in a frame (its length included) fails the check.
//!
//! Invariant: `decode(encode(e)) == e` for every entry, and `decode` of any
//! byte string returns an entry or an error, never panics (it is fuzzed by
//! the unit tests below with arbitrary bytes).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::backoff::Backoff;
use crate::clock::Nanos;
use crate::config::{LateAck, QueueConfig};
use crate::dead_letter::{AttemptOutcome, AttemptRecord, DeadLetterReason, DeadLetterRecord};
use crate::journal::Record;

/// Marks the start of a frame ("LQ").
pub(crate) const FRAME_MAGIC: u16 = 0x514C;
/// Bytes before a frame's body.
pub(crate) const FRAME_HEADER: usize = 10;
/// Largest body a frame may declare: a full payload plus its fields.
pub(crate) const MAX_BODY: usize = crate::config::MAX_PAYLOAD_LIMIT + (1 << 16);

/// One entry of the log: a transition's record, or one of the entries
/// compaction and segment rolls write.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Entry {
    /// A transition's durable effect.
    Op(Record),
    /// A snapshot starts here: forget everything before it.
    Snapshot {
        /// The next queue ordinal to hand out.
        next_queue: u32,
        /// No message id at or above this was handed out.
        ids_below: u64,
    },
    /// One live message, written by compaction with its whole state.
    Restored(Box<RestoredMessage>),
    /// A segment's preamble: the first entry of every segment a roll or a
    /// compaction starts, followed by the queue table (`QueueCreated` and
    /// `MetadataSet` entries), so that the segment's replay needs no older
    /// segment for anything but messages homed there.
    Preamble {
        /// The log sequence number of this entry (every entry of the log
        /// takes the next one).
        lsn: u64,
        /// The next queue ordinal to hand out.
        next_queue: u32,
        /// No message id at or above this was handed out.
        ids_below: u64,
    },
}

/// A live message as compaction writes it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RestoredMessage {
    pub(crate) queue: u32,
    pub(crate) id: u64,
    /// Its place in its queue's arrival order: the log sequence number of
    /// the entry it arrived by (`None`: the number of this entry, as logs
    /// written before cleaning carried it).
    pub(crate) arrival: Option<u64>,
    /// When it arrived on its queue (Unix nanoseconds; 0: not known).
    pub(crate) arrived: u64,
    pub(crate) deliver_at: u64,
    /// In flight until `deliver_at` (a replicated engine's lease), rather
    /// than delayed until then.
    pub(crate) leased: bool,
    pub(crate) count: u32,
    pub(crate) carried: u32,
    pub(crate) dead_letter: Option<Arc<DeadLetterRecord>>,
    pub(crate) payload: Bytes,
}

/// Why bytes did not decode to an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DecodeError(pub(crate) &'static str);

const QUEUE_CREATED: u8 = 1;
const QUEUE_DELETED: u8 = 2;
const SENT: u8 = 3;
const RECEIVED: u8 = 4;
const GONE: u8 = 5;
const MOVED: u8 = 6;
const IDS_RESERVED: u8 = 7;
const SNAPSHOT: u8 = 8;
const RESTORED: u8 = 9;
// The three record types above that gained an arrival time, as written now
// (the old tags still decode, with the time unknown), and a config change.
const SENT_AT: u8 = 10;
const MOVED_AT: u8 = 11;
const RESTORED_AT: u8 = 12;
const RETENTION_SET: u8 = 13;
// Replicated engines only (a local data dir never holds them).
const RECEIVED_UNTIL: u8 = 14;
const LEASE_SET: u8 = 15;
/// A queue's metadata (`Queue::set_metadata`).
const METADATA_SET: u8 = 16;
// Replicated engines only: a release (`LEASE_SET` had held both), and a
// live message in flight at a snapshot (the layout of `RESTORED_AT`).
const RELEASED: u8 = 17;
const RESTORED_LEASED: u8 = 18;
/// A segment's preamble.
const PREAMBLE: u8 = 19;
/// A live message with its place in the arrival order (cleaning rewrites a
/// message forward without moving it back in its queue).
const RESTORED_IN_ORDER: u8 = 20;
/// A queue's dead-letter link changed (`Queue::set_dead_letter`).
const DEAD_LETTER_SET: u8 = 21;

/// Appends `entry` as one frame to `out`.
pub(crate) fn encode_entry(entry: &Entry, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; FRAME_HEADER]);
    let mut body = Writer(out);
    match entry {
        Entry::Op(record) => encode_record(record, &mut body),
        Entry::Snapshot { next_queue, ids_below } => {
            body.u8(SNAPSHOT);
            body.u32(*next_queue);
            body.u64(*ids_below);
        }
        Entry::Preamble { lsn, next_queue, ids_below } => {
            body.u8(PREAMBLE);
            body.u64(*lsn);
            body.u32(*next_queue);
            body.u64(*ids_below);
        }
        Entry::Restored(m) => {
            match m.arrival {
                Some(arrival) => {
                    body.u8(RESTORED_IN_ORDER);
                    body.u8(u8::from(m.leased));
                    body.u32(m.queue);
                    body.u64(m.id);
                    body.u64(arrival);
                }
                None => {
                    body.u8(if m.leased { RESTORED_LEASED } else { RESTORED_AT });
                    body.u32(m.queue);
                    body.u64(m.id);
                }
            }
            body.u64(m.arrived);
            body.u64(m.deliver_at);
            body.u32(m.count);
            body.u32(m.carried);
            body.dead_letter(m.dead_letter.as_deref());
            body.0.extend_from_slice(&m.payload);
        }
    }
    seal(out, start);
}

/// Appends a transition's record as one frame (the writer's hot path: no
/// `Entry` wrapper to build).
pub(crate) fn encode_op(record: &Record, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; FRAME_HEADER]);
    encode_record(record, &mut Writer(out));
    seal(out, start);
}

/// Fills in the header of the frame that starts at `start`.
fn seal(out: &mut [u8], start: usize) {
    let len = (out.len() - start - FRAME_HEADER) as u32;
    out[start..start + 2].copy_from_slice(&FRAME_MAGIC.to_le_bytes());
    out[start + 2..start + 6].copy_from_slice(&len.to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&len.to_le_bytes()), &out[start + FRAME_HEADER..]);
    out[start + 6..start + 10].copy_from_slice(&crc.to_le_bytes());
}

fn encode_record(record: &Record, body: &mut Writer<'_>) {
    match record {
        Record::QueueCreated { queue, name, config } => {
            body.u8(QUEUE_CREATED);
            body.u32(*queue);
            body.str(name);
            body.config(config);
            // Last, so that a record written before retention existed (which
            // ends after `config`) still decodes.
            body.opt_u64(config.retention.map(|r| u64::try_from(r.as_nanos()).unwrap_or(u64::MAX)));
        }
        Record::QueueDeleted { queue } => {
            body.u8(QUEUE_DELETED);
            body.u32(*queue);
        }
        Record::Sent { queue, id, at, deliver_at, payload } => {
            body.u8(SENT_AT);
            body.u32(*queue);
            body.u64(*id);
            body.u64(*at);
            body.u64(*deliver_at);
            body.0.extend_from_slice(payload);
        }
        Record::Received { queue, id, count, until: 0 } => {
            body.u8(RECEIVED);
            body.u32(*queue);
            body.u64(*id);
            body.u32(*count);
        }
        Record::Received { queue, id, count, until } => {
            body.u8(RECEIVED_UNTIL);
            body.u32(*queue);
            body.u64(*id);
            body.u32(*count);
            body.u64(*until);
        }
        Record::LeaseSet { queue, id, until } => {
            body.u8(LEASE_SET);
            body.u32(*queue);
            body.u64(*id);
            body.u64(*until);
        }
        Record::Released { queue, id, until } => {
            body.u8(RELEASED);
            body.u32(*queue);
            body.u64(*id);
            body.u64(*until);
        }
        Record::Gone { queue, id } => {
            body.u8(GONE);
            body.u32(*queue);
            body.u64(*id);
        }
        Record::Moved { from, to, id, at, carried, dead_letter } => {
            body.u8(MOVED_AT);
            body.u32(*from);
            body.u32(*to);
            body.u64(*id);
            body.u64(*at);
            body.u32(*carried);
            body.dead_letter(dead_letter.as_deref());
        }
        Record::RetentionSet { queue, retention } => {
            body.u8(RETENTION_SET);
            body.u32(*queue);
            body.opt_u64(retention.map(|r| u64::try_from(r.as_nanos()).unwrap_or(u64::MAX)));
        }
        Record::MetadataSet { queue, metadata } => {
            body.u8(METADATA_SET);
            body.u32(*queue);
            body.0.extend_from_slice(metadata);
        }
        Record::DeadLetterSet { queue, dead_letter_queue, max_receives } => {
            body.u8(DEAD_LETTER_SET);
            body.u32(*queue);
            body.opt_u64(max_receives.map(u64::from));
            if let Some(name) = dead_letter_queue {
                body.str(name);
            }
        }
        Record::IdsReserved { below } => {
            body.u8(IDS_RESERVED);
            body.u64(*below);
        }
    }
}

/// What `frame_at` found at an offset.
#[derive(Debug, PartialEq)]
pub(crate) enum Frame {
    /// A valid frame of `len` bytes in all.
    Valid { entry: Entry, len: usize },
    /// Not a valid frame, for this reason.
    Bad(&'static str),
}

/// Reads the frame starting at `buf[0]`.
pub(crate) fn frame_at(buf: &[u8]) -> Frame {
    if buf.len() < FRAME_HEADER {
        return Frame::Bad("cut short inside a frame header");
    }
    let magic = u16::from_le_bytes([buf[0], buf[1]]);
    if magic != FRAME_MAGIC {
        return Frame::Bad("no frame marker");
    }
    let len_bytes = [buf[2], buf[3], buf[4], buf[5]];
    let len = u32::from_le_bytes(len_bytes) as usize;
    if len > MAX_BODY {
        return Frame::Bad("frame length above the largest record");
    }
    if buf.len() < FRAME_HEADER + len {
        return Frame::Bad("cut short inside a record");
    }
    let body = &buf[FRAME_HEADER..FRAME_HEADER + len];
    let crc = u32::from_le_bytes([buf[6], buf[7], buf[8], buf[9]]);
    if crc32c::crc32c_append(crc32c::crc32c(&len_bytes), body) != crc {
        return Frame::Bad("checksum mismatch");
    }
    match decode_body(body) {
        Ok(entry) => Frame::Valid { entry, len: FRAME_HEADER + len },
        Err(DecodeError(why)) => Frame::Bad(why),
    }
}

/// Decodes a frame's body.
pub(crate) fn decode_body(body: &[u8]) -> Result<Entry, DecodeError> {
    let mut r = Reader { buf: body, pos: 0 };
    let tag = r.u8()?;
    let entry = match tag {
        QUEUE_CREATED => {
            let queue = r.u32()?;
            let name = r.str()?;
            let mut config = r.config()?;
            if r.pos < body.len() {
                config.retention = r.opt_u64()?.map(Duration::from_nanos);
            }
            Entry::Op(Record::QueueCreated { queue, name, config: Box::new(config) })
        }
        QUEUE_DELETED => Entry::Op(Record::QueueDeleted { queue: r.u32()? }),
        SENT | SENT_AT => {
            let (queue, id) = (r.u32()?, r.u64()?);
            let at = if tag == SENT_AT { r.u64()? } else { 0 };
            let deliver_at = r.u64()?;
            Entry::Op(Record::Sent { queue, id, at, deliver_at, payload: Bytes::copy_from_slice(r.rest()) })
        }
        RECEIVED => Entry::Op(Record::Received { queue: r.u32()?, id: r.u64()?, count: r.u32()?, until: 0 }),
        RECEIVED_UNTIL => {
            let (queue, id, count, until) = (r.u32()?, r.u64()?, r.u32()?, r.u64()?);
            Entry::Op(Record::Received { queue, id, count, until })
        }
        LEASE_SET => Entry::Op(Record::LeaseSet { queue: r.u32()?, id: r.u64()?, until: r.u64()? }),
        RELEASED => Entry::Op(Record::Released { queue: r.u32()?, id: r.u64()?, until: r.u64()? }),
        GONE => Entry::Op(Record::Gone { queue: r.u32()?, id: r.u64()? }),
        MOVED | MOVED_AT => {
            let (from, to, id) = (r.u32()?, r.u32()?, r.u64()?);
            let at = if tag == MOVED_AT { r.u64()? } else { 0 };
            let carried = r.u32()?;
            let dead_letter = r.dead_letter()?;
            Entry::Op(Record::Moved { from, to, id, at, carried, dead_letter })
        }
        RETENTION_SET => {
            let queue = r.u32()?;
            Entry::Op(Record::RetentionSet { queue, retention: r.opt_u64()?.map(Duration::from_nanos) })
        }
        METADATA_SET => {
            let queue = r.u32()?;
            Entry::Op(Record::MetadataSet { queue, metadata: Bytes::copy_from_slice(r.rest()) })
        }
        DEAD_LETTER_SET => {
            let queue = r.u32()?;
            let max_receives = match r.opt_u64()? {
                None => None,
                Some(n) => Some(u32::try_from(n).map_err(|_| DecodeError("max_receives above u32"))?),
            };
            let dead_letter_queue = if r.pos < body.len() { Some(r.str()?) } else { None };
            Entry::Op(Record::DeadLetterSet { queue, dead_letter_queue, max_receives })
        }
        IDS_RESERVED => Entry::Op(Record::IdsReserved { below: r.u64()? }),
        SNAPSHOT => Entry::Snapshot { next_queue: r.u32()?, ids_below: r.u64()? },
        PREAMBLE => Entry::Preamble { lsn: r.u64()?, next_queue: r.u32()?, ids_below: r.u64()? },
        RESTORED | RESTORED_AT | RESTORED_LEASED | RESTORED_IN_ORDER => {
            let leased = match tag {
                RESTORED_IN_ORDER => r.flag()?,
                _ => tag == RESTORED_LEASED,
            };
            let (queue, id) = (r.u32()?, r.u64()?);
            let arrival = if tag == RESTORED_IN_ORDER { Some(r.u64()?) } else { None };
            let arrived = if tag == RESTORED { 0 } else { r.u64()? };
            let (deliver_at, count, carried) = (r.u64()?, r.u32()?, r.u32()?);
            let dead_letter = r.dead_letter()?;
            let payload = Bytes::copy_from_slice(r.rest());
            Entry::Restored(Box::new(RestoredMessage {
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
            }))
        }
        _ => return Err(DecodeError("unknown record type")),
    };
    if r.pos != body.len() {
        return Err(DecodeError("bytes left over after the record"));
    }
    Ok(entry)
}

struct Writer<'a>(&'a mut Vec<u8>);

impl Writer<'_> {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn duration(&mut self, d: Duration) {
        self.u64(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }
    fn str(&mut self, s: &str) {
        self.u32(s.len() as u32);
        self.0.extend_from_slice(s.as_bytes());
    }
    fn opt_u64(&mut self, v: Option<u64>) {
        match v {
            None => self.u8(0),
            Some(v) => {
                self.u8(1);
                self.u64(v);
            }
        }
    }

    fn config(&mut self, c: &QueueConfig) {
        self.duration(c.visibility_timeout);
        self.duration(c.max_visibility);
        self.duration(c.max_lease);
        self.duration(c.max_delay);
        self.opt_u64(c.max_receives.map(u64::from));
        match &c.dead_letter_queue {
            None => self.u8(0),
            Some(name) => {
                self.u8(1);
                self.str(name);
            }
        }
        self.u8(match c.late_ack {
            LateAck::AcceptIfNotRedelivered => 0,
            LateAck::Reject => 1,
        });
        match c.backoff {
            Backoff::None => self.u8(0),
            Backoff::Fixed(d) => {
                self.u8(1);
                self.duration(d);
            }
            Backoff::Exponential { base, max, jitter } => {
                self.u8(2);
                self.duration(base);
                self.duration(max);
                self.u8(u8::from(jitter));
            }
        }
        self.u64(c.max_messages as u64);
        self.u64(c.max_payload as u64);
        self.opt_u64(c.shards.map(|s| s as u64));
    }

    fn dead_letter(&mut self, record: Option<&DeadLetterRecord>) {
        let Some(d) = record else {
            self.u8(0);
            return;
        };
        self.u8(1);
        self.str(&d.source_queue);
        match &d.reason {
            DeadLetterReason::Expired => self.u8(0),
            DeadLetterReason::Released => self.u8(1),
            DeadLetterReason::Explicit(text) => {
                self.u8(2);
                self.str(text);
            }
        }
        self.u32(d.delivery_count);
        self.u32(d.attempts.len() as u32);
        for a in &d.attempts {
            self.u32(a.delivery);
            self.u64(a.received_at.0);
            self.u64(a.ended_at.0);
            match &a.outcome {
                AttemptOutcome::Expired => self.u8(0),
                AttemptOutcome::Released => self.u8(1),
                AttemptOutcome::DeadLettered(text) => {
                    self.u8(2);
                    self.str(text);
                }
            }
        }
        self.u64(d.dead_lettered_at.0);
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

const SHORT: DecodeError = DecodeError("record ends early");

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.pos.checked_add(n).filter(|&end| end <= self.buf.len()).ok_or(SHORT)?;
        let bytes = &self.buf[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }
    fn rest(&mut self) -> &'a [u8] {
        let bytes = &self.buf[self.pos..];
        self.pos = self.buf.len();
        bytes
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().map_err(|_| SHORT)?))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().map_err(|_| SHORT)?))
    }
    fn duration(&mut self) -> Result<Duration, DecodeError> {
        Ok(Duration::from_nanos(self.u64()?))
    }
    fn usize(&mut self) -> Result<usize, DecodeError> {
        usize::try_from(self.u64()?).map_err(|_| DecodeError("a size above this machine's word"))
    }
    fn str(&mut self) -> Result<String, DecodeError> {
        let len = self.u32()? as usize;
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| DecodeError("text that is not UTF-8"))
    }
    fn flag(&mut self) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(DecodeError("a flag other than 0 or 1")),
        }
    }
    fn opt_u64(&mut self) -> Result<Option<u64>, DecodeError> {
        if self.flag()? { Ok(Some(self.u64()?)) } else { Ok(None) }
    }

    fn config(&mut self) -> Result<QueueConfig, DecodeError> {
        let visibility_timeout = self.duration()?;
        let max_visibility = self.duration()?;
        let max_lease = self.duration()?;
        let max_delay = self.duration()?;
        let max_receives = match self.opt_u64()? {
            None => None,
            Some(n) => Some(u32::try_from(n).map_err(|_| DecodeError("max_receives above u32"))?),
        };
        let dead_letter_queue = if self.flag()? { Some(self.str()?) } else { None };
        let late_ack = match self.u8()? {
            0 => LateAck::AcceptIfNotRedelivered,
            1 => LateAck::Reject,
            _ => return Err(DecodeError("unknown late-ack rule")),
        };
        let backoff = match self.u8()? {
            0 => Backoff::None,
            1 => Backoff::Fixed(self.duration()?),
            2 => Backoff::Exponential { base: self.duration()?, max: self.duration()?, jitter: self.flag()? },
            _ => return Err(DecodeError("unknown backoff")),
        };
        let max_messages = self.usize()?;
        let max_payload = self.usize()?;
        let shards = match self.opt_u64()? {
            None => None,
            Some(n) => Some(usize::try_from(n).map_err(|_| DecodeError("shard count above this machine's word"))?),
        };
        Ok(QueueConfig {
            visibility_timeout,
            max_visibility,
            max_lease,
            max_delay,
            max_receives,
            dead_letter_queue,
            late_ack,
            backoff,
            max_messages,
            max_payload,
            shards,
            retention: None,
        })
    }

    fn dead_letter(&mut self) -> Result<Option<Arc<DeadLetterRecord>>, DecodeError> {
        if !self.flag()? {
            return Ok(None);
        }
        let source_queue = self.str()?;
        let reason = match self.u8()? {
            0 => DeadLetterReason::Expired,
            1 => DeadLetterReason::Released,
            2 => DeadLetterReason::Explicit(self.str()?),
            _ => return Err(DecodeError("unknown dead-letter reason")),
        };
        let delivery_count = self.u32()?;
        let count = self.u32()? as usize;
        if count > crate::dead_letter::MAX_ATTEMPT_RECORDS + 1 {
            return Err(DecodeError("more attempt records than a message keeps"));
        }
        let mut attempts = Vec::with_capacity(count);
        for _ in 0..count {
            let delivery = self.u32()?;
            let received_at = Nanos(self.u64()?);
            let ended_at = Nanos(self.u64()?);
            let outcome = match self.u8()? {
                0 => AttemptOutcome::Expired,
                1 => AttemptOutcome::Released,
                2 => AttemptOutcome::DeadLettered(self.str()?),
                _ => return Err(DecodeError("unknown attempt outcome")),
            };
            attempts.push(AttemptRecord { delivery, received_at, ended_at, outcome });
        }
        let dead_lettered_at = Nanos(self.u64()?);
        Ok(Some(Arc::new(DeadLetterRecord { source_queue, reason, delivery_count, attempts, dead_lettered_at })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> Arc<DeadLetterRecord> {
        Arc::new(DeadLetterRecord {
            source_queue: "jobs".into(),
            reason: DeadLetterReason::Explicit("bad input".into()),
            delivery_count: 3,
            attempts: vec![
                AttemptRecord {
                    delivery: 1,
                    received_at: Nanos(5),
                    ended_at: Nanos(9),
                    outcome: AttemptOutcome::Expired,
                },
                AttemptRecord {
                    delivery: 2,
                    received_at: Nanos(10),
                    ended_at: Nanos(12),
                    outcome: AttemptOutcome::DeadLettered("nope".into()),
                },
            ],
            dead_lettered_at: Nanos(77),
        })
    }

    pub(crate) fn every_kind() -> Vec<Entry> {
        let config = QueueConfig::default()
            .max_receives(4)
            .dead_letter_queue("dlq")
            .late_ack(LateAck::Reject)
            .backoff(Backoff::Exponential { base: Duration::from_millis(5), max: Duration::from_secs(2), jitter: true })
            .shards(3)
            .retention(Duration::from_secs(4 * 86_400));
        vec![
            Entry::Op(Record::QueueCreated { queue: 7, name: "jobs".into(), config: Box::new(config) }),
            Entry::Op(Record::QueueCreated { queue: 8, name: "plain".into(), config: Box::default() }),
            Entry::Op(Record::QueueDeleted { queue: 8 }),
            Entry::Op(Record::Sent {
                queue: 7,
                id: u64::MAX,
                at: 100,
                deliver_at: 123,
                payload: Bytes::from_static(b"hi"),
            }),
            Entry::Op(Record::Sent { queue: 7, id: 0, at: 0, deliver_at: 0, payload: Bytes::new() }),
            Entry::Op(Record::Received { queue: 7, id: 9, count: u32::MAX, until: 0 }),
            Entry::Op(Record::Received { queue: 7, id: 9, count: 3, until: 1 << 62 }),
            Entry::Op(Record::LeaseSet { queue: 7, id: 9, until: 77 }),
            Entry::Op(Record::LeaseSet { queue: 7, id: 9, until: 0 }),
            Entry::Op(Record::Released { queue: 7, id: 9, until: 88 }),
            Entry::Op(Record::Released { queue: 7, id: 9, until: 0 }),
            Entry::Op(Record::Gone { queue: 7, id: 9 }),
            Entry::Op(Record::Moved { from: 7, to: 1, id: 4, at: 5, carried: 2, dead_letter: Some(record()) }),
            Entry::Op(Record::Moved { from: 1, to: 7, id: 4, at: u64::MAX, carried: 3, dead_letter: None }),
            Entry::Op(Record::RetentionSet { queue: 7, retention: Some(Duration::from_secs(60)) }),
            Entry::Op(Record::RetentionSet { queue: 7, retention: None }),
            Entry::Op(Record::MetadataSet { queue: 7, metadata: Bytes::from_static(b"{\"DelaySeconds\":5}") }),
            Entry::Op(Record::MetadataSet { queue: 8, metadata: Bytes::new() }),
            Entry::Op(Record::DeadLetterSet { queue: 8, dead_letter_queue: Some("dlq".into()), max_receives: Some(3) }),
            Entry::Op(Record::DeadLetterSet { queue: 8, dead_letter_queue: Some("d".into()), max_receives: None }),
            Entry::Op(Record::DeadLetterSet { queue: 8, dead_letter_queue: None, max_receives: None }),
            Entry::Op(Record::IdsReserved { below: 1 << 50 }),
            Entry::Snapshot { next_queue: 9, ids_below: 1 << 41 },
            Entry::Restored(Box::new(RestoredMessage {
                queue: 7,
                id: 3,
                arrival: None,
                arrived: 42,
                deliver_at: 99,
                leased: false,
                count: 2,
                carried: 1,
                dead_letter: Some(record()),
                payload: Bytes::from_static(b"payload"),
            })),
            Entry::Restored(Box::new(RestoredMessage {
                queue: 7,
                id: 4,
                arrival: None,
                arrived: 43,
                deliver_at: 100,
                leased: true,
                count: 1,
                carried: 0,
                dead_letter: None,
                payload: Bytes::from_static(b"leased"),
            })),
            Entry::Preamble { lsn: 1 << 40, next_queue: 12, ids_below: 1 << 33 },
            Entry::Restored(Box::new(RestoredMessage {
                queue: 7,
                id: 5,
                arrival: Some(u64::MAX - 1),
                arrived: 44,
                deliver_at: 101,
                leased: true,
                count: 7,
                carried: 2,
                dead_letter: Some(record()),
                payload: Bytes::from_static(b"in order"),
            })),
            Entry::Restored(Box::new(RestoredMessage {
                queue: 7,
                id: 6,
                arrival: Some(0),
                arrived: 0,
                deliver_at: 0,
                leased: false,
                count: 0,
                carried: 0,
                dead_letter: None,
                payload: Bytes::new(),
            })),
        ]
    }

    #[test]
    fn every_kind_round_trips() {
        for entry in every_kind() {
            let mut out = Vec::new();
            encode_entry(&entry, &mut out);
            match frame_at(&out) {
                Frame::Valid { entry: back, len } => {
                    assert_eq!(back, entry);
                    assert_eq!(len, out.len());
                }
                Frame::Bad(why) => panic!("{entry:?} did not decode: {why}"),
            }
            if let Entry::Op(record) = &entry {
                let mut op = Vec::new();
                encode_op(record, &mut op);
                assert_eq!(op, out, "both encoders write the same frame");
            }
        }
    }

    /// Records as written before arrival times and retention were logged
    /// still decode, with the arrival time unknown (0) and no retention.
    #[test]
    fn records_of_the_earlier_format_still_decode() {
        let body = |bytes: Vec<u8>| decode_body(&bytes).expect("an earlier record decodes");
        let mut sent = vec![SENT];
        sent.extend(7u32.to_le_bytes());
        sent.extend(9u64.to_le_bytes());
        sent.extend(123u64.to_le_bytes());
        sent.extend(b"hi");
        let expected = Record::Sent { queue: 7, id: 9, at: 0, deliver_at: 123, payload: Bytes::from_static(b"hi") };
        assert_eq!(body(sent), Entry::Op(expected));

        let mut moved = vec![MOVED];
        moved.extend(1u32.to_le_bytes());
        moved.extend(2u32.to_le_bytes());
        moved.extend(4u64.to_le_bytes());
        moved.extend(3u32.to_le_bytes());
        moved.push(0);
        let expected = Record::Moved { from: 1, to: 2, id: 4, at: 0, carried: 3, dead_letter: None };
        assert_eq!(body(moved), Entry::Op(expected));

        let mut restored = vec![RESTORED];
        restored.extend(7u32.to_le_bytes());
        restored.extend(3u64.to_le_bytes());
        restored.extend(99u64.to_le_bytes());
        restored.extend(2u32.to_le_bytes());
        restored.extend(1u32.to_le_bytes());
        restored.push(0);
        restored.extend(b"p");
        let Entry::Restored(m) = body(restored) else { panic!("a restored message") };
        assert_eq!((m.id, m.arrived, m.deliver_at, m.count, m.carried), (3, 0, 99, 2, 1));

        // A queue created before retention existed: the record ends after
        // the config.
        let mut created = Vec::new();
        encode_op(
            &Record::QueueCreated {
                queue: 1,
                name: "q".into(),
                config: Box::new(QueueConfig::default().retention(Duration::from_secs(60))),
            },
            &mut created,
        );
        let mut old = created[FRAME_HEADER..].to_vec();
        let flag_at = old.len() - 9;
        assert_eq!(old[flag_at], 1, "the retention's presence flag");
        old.truncate(flag_at);
        let Entry::Op(Record::QueueCreated { config, .. }) = body(old) else { panic!("a queue creation") };
        assert_eq!(*config, QueueConfig::default());
    }

    #[test]
    fn every_flipped_bit_and_every_cut_is_caught() {
        for entry in every_kind() {
            let mut out = Vec::new();
            encode_entry(&entry, &mut out);
            for cut in 0..out.len() {
                assert!(matches!(frame_at(&out[..cut]), Frame::Bad(_)), "cut at {cut} of {entry:?}");
            }
            for bit in 0..out.len() * 8 {
                let mut flipped = out.clone();
                flipped[bit / 8] ^= 1 << (bit % 8);
                assert!(matches!(frame_at(&flipped), Frame::Bad(_)), "bit {bit} of {entry:?}");
            }
        }
    }

    #[test]
    fn arbitrary_bodies_never_panic() {
        // A deterministic stream of bodies: every prefix of every encoded
        // body, and pseudo-random bytes behind each record type.
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for entry in every_kind() {
            let mut out = Vec::new();
            encode_entry(&entry, &mut out);
            let body = &out[FRAME_HEADER..];
            for cut in 0..body.len() {
                let _ = decode_body(&body[..cut]);
            }
        }
        for _ in 0..20_000 {
            let len = (next() % 96) as usize;
            let mut body: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if let Some(first) = body.first_mut() {
                *first = (*first % 15) + 1;
            }
            let _ = decode_body(&body);
        }
    }
}
