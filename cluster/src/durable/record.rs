//! The records of the durable Raft log and their framing on disk.
//!
//! Invariant: a frame is `marker (u16) | body length (u32) | CRC32C (u32) |
//! body`, little-endian, the CRC taken over the length bytes and the body;
//! the body is a kind byte and that record's bincode. A frame is accepted
//! only whole, with its marker, a matching CRC and a body that decodes, so
//! a torn or flipped frame is never read as a record (and a valid frame is
//! found in garbage by chance with odds about 2^-48 per offset).

use openraft::{Entry, LogId, Vote};
use serde::Serialize;

use crate::types::{NodeId, TypeConfig};

/// The marker every frame starts with ("RL").
pub(crate) const FRAME_MAGIC: u16 = 0x4C52;
/// Bytes before a frame's body.
pub(crate) const FRAME_HEADER: usize = 10;
/// Largest body a frame may declare; a longer one is damage, not a record.
pub(crate) const MAX_BODY: usize = 1 << 30;

const ENTRY: u8 = 1;
const VOTE: u8 = 2;
const COMMITTED: u8 = 3;
const TRUNCATED: u8 = 4;
const PURGED: u8 = 5;
const CHECKPOINT: u8 = 6;

/// One durable change to the log, in the order it was made.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum LogRecord {
    /// An appended entry (it replaces one at the same index).
    Entry(Entry<TypeConfig>),
    /// The vote now is this.
    Vote(Vote<NodeId>),
    /// The committed id now is this.
    Committed(Option<LogId<NodeId>>),
    /// Every entry at or after this index is gone.
    TruncatedFrom(u64),
    /// Every entry at or before this id is gone.
    PurgedUpTo(LogId<NodeId>),
    /// The vote, committed id and purge point as they stood when a segment
    /// was started: the first record of every segment, so deleting older
    /// segments never loses them.
    Checkpoint {
        /// The vote.
        vote: Option<Vote<NodeId>>,
        /// The committed id.
        committed: Option<LogId<NodeId>>,
        /// The purge point.
        purged: Option<LogId<NodeId>>,
    },
}

/// Appends `record`'s frame to `out`.
///
/// # Errors
///
/// If bincode cannot encode it (these types always encode; the error is
/// passed on rather than trusted away).
pub(crate) fn encode(record: &LogRecord, out: &mut Vec<u8>) -> Result<(), bincode::Error> {
    let start = out.len();
    out.extend_from_slice(&[0; FRAME_HEADER]);
    let encoded = match record {
        LogRecord::Entry(entry) => body(ENTRY, entry, out),
        LogRecord::Vote(vote) => body(VOTE, vote, out),
        LogRecord::Committed(committed) => body(COMMITTED, committed, out),
        LogRecord::TruncatedFrom(index) => body(TRUNCATED, index, out),
        LogRecord::PurgedUpTo(log_id) => body(PURGED, log_id, out),
        LogRecord::Checkpoint { vote, committed, purged } => body(CHECKPOINT, &(vote, committed, purged), out),
    };
    if let Err(e) = encoded {
        out.truncate(start);
        return Err(e);
    }
    let len = out.len() - start - FRAME_HEADER;
    if len > MAX_BODY {
        out.truncate(start);
        return Err(Box::new(bincode::ErrorKind::SizeLimit));
    }
    let len = (len as u32).to_le_bytes();
    let crc = crc32c::crc32c_append(crc32c::crc32c(&len), &out[start + FRAME_HEADER..]);
    out[start..start + 2].copy_from_slice(&FRAME_MAGIC.to_le_bytes());
    out[start + 2..start + 6].copy_from_slice(&len);
    out[start + 6..start + 10].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

fn body(kind: u8, value: &impl Serialize, out: &mut Vec<u8>) -> Result<(), bincode::Error> {
    out.push(kind);
    bincode::serialize_into(out, value)
}

/// What the bytes at an offset hold.
#[derive(Debug)]
pub(crate) enum Frame {
    /// A whole record, `len` bytes with its header.
    Valid {
        /// The record.
        record: LogRecord,
        /// Its frame's length.
        len: usize,
    },
    /// Not a record, and why.
    Bad(&'static str),
}

/// Reads the frame at the start of `buf`.
pub(crate) fn frame_at(buf: &[u8]) -> Frame {
    if buf.len() < FRAME_HEADER {
        return Frame::Bad("cut short inside a frame header");
    }
    if u16::from_le_bytes([buf[0], buf[1]]) != FRAME_MAGIC {
        return Frame::Bad("no frame marker");
    }
    let len_bytes = [buf[2], buf[3], buf[4], buf[5]];
    let len = u32::from_le_bytes(len_bytes) as usize;
    if len > MAX_BODY {
        return Frame::Bad("frame length above the largest record");
    }
    if len == 0 {
        return Frame::Bad("empty frame");
    }
    if buf.len() - FRAME_HEADER < len {
        return Frame::Bad("cut short inside a record");
    }
    let body = &buf[FRAME_HEADER..FRAME_HEADER + len];
    let crc = u32::from_le_bytes([buf[6], buf[7], buf[8], buf[9]]);
    if crc32c::crc32c_append(crc32c::crc32c(&len_bytes), body) != crc {
        return Frame::Bad("checksum mismatch");
    }
    match decode(body[0], &body[1..]) {
        Some(record) => Frame::Valid { record, len: FRAME_HEADER + len },
        None => Frame::Bad("a record that does not decode"),
    }
}

fn decode(kind: u8, bytes: &[u8]) -> Option<LogRecord> {
    let record = match kind {
        ENTRY => LogRecord::Entry(bincode::deserialize(bytes).ok()?),
        VOTE => LogRecord::Vote(bincode::deserialize(bytes).ok()?),
        COMMITTED => LogRecord::Committed(bincode::deserialize(bytes).ok()?),
        TRUNCATED => LogRecord::TruncatedFrom(bincode::deserialize(bytes).ok()?),
        PURGED => LogRecord::PurgedUpTo(bincode::deserialize(bytes).ok()?),
        CHECKPOINT => {
            let (vote, committed, purged) = bincode::deserialize(bytes).ok()?;
            LogRecord::Checkpoint { vote, committed, purged }
        }
        _ => return None,
    };
    Some(record)
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, EntryPayload};

    use super::*;
    use crate::types::Request;

    fn log_id(term: u64, index: u64) -> LogId<NodeId> {
        LogId::new(CommittedLeaderId::new(term, 1), index)
    }

    fn records() -> Vec<LogRecord> {
        let request = Request { term: 2, frames: vec![7; 40] };
        vec![
            LogRecord::Checkpoint { vote: None, committed: Some(log_id(1, 3)), purged: None },
            LogRecord::Entry(Entry { log_id: log_id(2, 4), payload: EntryPayload::Normal(request) }),
            LogRecord::Entry(Entry { log_id: log_id(2, 5), payload: EntryPayload::Blank }),
            LogRecord::Vote(Vote::new(3, 2)),
            LogRecord::Committed(Some(log_id(2, 5))),
            LogRecord::TruncatedFrom(5),
            LogRecord::PurgedUpTo(log_id(2, 4)),
        ]
    }

    #[test]
    fn every_record_round_trips() {
        for record in records() {
            let mut bytes = Vec::new();
            encode(&record, &mut bytes).unwrap();
            match frame_at(&bytes) {
                Frame::Valid { record: read, len } => {
                    assert_eq!(read, record);
                    assert_eq!(len, bytes.len());
                }
                Frame::Bad(why) => panic!("{record:?}: {why}"),
            }
        }
    }

    #[test]
    fn a_cut_or_flipped_frame_is_bad() {
        let mut bytes = Vec::new();
        encode(&records()[1], &mut bytes).unwrap();
        for cut in 0..bytes.len() {
            assert!(matches!(frame_at(&bytes[..cut]), Frame::Bad(_)), "cut at {cut}");
        }
        for bit in 0..bytes.len() * 8 {
            let mut flipped = bytes.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert!(matches!(frame_at(&flipped), Frame::Bad(_)), "bit {bit}");
        }
    }
}
