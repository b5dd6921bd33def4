//! Segment files of the durable Raft log: a versioned header, then frames
//! (`record.rs`), nothing after them.
//!
//! Invariant: a segment holds a header and whole, valid frames, except
//! after a crash, when the newest segment may end in a torn tail (a write
//! cut short, or a last frame that fails its CRC). `scan` tells that apart
//! from damage: bad bytes with no valid frame after them in the newest
//! segment are a torn tail, reported with their length; bad bytes anywhere
//! else, or followed by a valid frame, are damage, an error naming the
//! offset. A sealed segment was synced whole before the next one was
//! started, so it may not have a torn tail.

use std::io;
use std::path::{Path, PathBuf};

use crate::durable::record::{FRAME_HEADER, FRAME_MAGIC, Frame, LogRecord, frame_at};

/// The header's magic bytes.
const MAGIC: &[u8; 8] = b"LQRAFTLG";
/// The format version this code writes and reads.
const VERSION: u32 = 1;
/// Bytes of the header: magic, version, flags (zero), segment number, CRC
/// of the bytes before it, padding.
pub(crate) const HEADER: usize = 32;

/// The file name of segment `number`.
pub(crate) fn file_name(number: u64) -> String {
    format!("log-{number:016x}.seg")
}

/// The number in a segment file name, if it is one.
fn parse_name(name: &str) -> Option<u64> {
    let hex = name.strip_prefix("log-")?.strip_suffix(".seg")?;
    if hex.len() != 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// The header of segment `number`.
pub(crate) fn header(number: u64) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[16..24].copy_from_slice(&number.to_le_bytes());
    let crc = crc32c::crc32c(&h[..24]);
    h[24..28].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Checks a segment's header; the error says what is wrong.
fn check_header(bytes: &[u8], number: u64) -> Result<(), String> {
    if bytes.len() < HEADER {
        return Err(format!("{} bytes, shorter than a segment header", bytes.len()));
    }
    if &bytes[..8] != MAGIC {
        return Err("not a leaseq Raft log segment (bad magic)".into());
    }
    let crc = u32::from_le_bytes([bytes[24], bytes[25], bytes[26], bytes[27]]);
    if crc32c::crc32c(&bytes[..24]) != crc {
        return Err("segment header fails its checksum".into());
    }
    let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if version != VERSION {
        return Err(format!("segment format version {version}; this leaseq reads version {VERSION}"));
    }
    let mut stored = [0u8; 8];
    stored.copy_from_slice(&bytes[16..24]);
    let stored = u64::from_le_bytes(stored);
    if stored != number {
        return Err(format!("header names segment {stored}, the file name {number}"));
    }
    Ok(())
}

/// The segment files in `dir`, (number, path), oldest first.
pub(crate) fn list(dir: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
    let mut segments = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if let Some(number) = name.to_str().and_then(parse_name) {
            segments.push((number, entry.path()));
        }
    }
    segments.sort();
    Ok(segments)
}

/// What a scan of one segment found.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Scan {
    /// Where the valid frames end (the next write goes here).
    pub(crate) end: usize,
    /// Bytes of a torn tail after `end`, cut off.
    pub(crate) torn: usize,
    /// Whether the first record is a checkpoint.
    pub(crate) starts_with_checkpoint: bool,
    /// The highest index of an entry record in the segment.
    pub(crate) max_index: Option<u64>,
}

/// Damage that recovery may not repair.
#[derive(Debug)]
pub(crate) struct Damage {
    /// Where in the file.
    pub(crate) offset: u64,
    /// What is wrong there.
    pub(crate) reason: String,
}

/// Reads the frames of segment `number`'s bytes in order, handing each
/// record to `apply`. `newest` says whether it is the newest segment, the
/// only one that may have a torn tail.
pub(crate) fn scan(bytes: &[u8], number: u64, newest: bool, mut apply: impl FnMut(LogRecord)) -> Result<Scan, Damage> {
    check_header(bytes, number).map_err(|reason| Damage { offset: 0, reason })?;
    let mut scan = Scan { end: HEADER, ..Scan::default() };
    let mut pos = HEADER;
    while pos < bytes.len() {
        let why = match frame_at(&bytes[pos..]) {
            Frame::Valid { record, len } => {
                if pos == HEADER {
                    scan.starts_with_checkpoint = matches!(record, LogRecord::Checkpoint { .. });
                }
                if let LogRecord::Entry(entry) = &record {
                    scan.max_index = scan.max_index.max(Some(entry.log_id.index));
                }
                apply(record);
                pos += len;
                scan.end = pos;
                continue;
            }
            Frame::Bad(why) => why,
        };
        if let Some(next) = next_frame(bytes, pos + 1) {
            return Err(Damage {
                offset: pos as u64,
                reason: format!("{why}, with a valid record {} bytes further on", next - pos),
            });
        }
        if !newest {
            return Err(Damage {
                offset: pos as u64,
                reason: format!("{why}: {} damaged bytes at the end of a sealed segment", bytes.len() - pos),
            });
        }
        scan.torn = bytes.len() - pos;
        return Ok(scan);
    }
    Ok(scan)
}

/// The offset of the next valid frame at or after `from`.
fn next_frame(bytes: &[u8], from: usize) -> Option<usize> {
    let marker = FRAME_MAGIC.to_le_bytes();
    let mut at = from;
    while at + FRAME_HEADER <= bytes.len() {
        let found = bytes[at..].windows(2).position(|w| w == marker)?;
        at += found;
        if matches!(frame_at(&bytes[at..]), Frame::Valid { .. }) {
            return Some(at);
        }
        at += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::durable::record::encode;

    /// Segment 3: a checkpoint, then `count` truncate records (small,
    /// distinct), and where each frame starts.
    fn segment(count: u64) -> (Vec<u8>, Vec<usize>) {
        let mut bytes = header(3).to_vec();
        let mut starts = vec![bytes.len()];
        encode(&LogRecord::Checkpoint { vote: None, committed: None, purged: None }, &mut bytes).unwrap();
        for index in 0..count {
            starts.push(bytes.len());
            encode(&LogRecord::TruncatedFrom(1000 + index), &mut bytes).unwrap();
        }
        (bytes, starts)
    }

    fn read(bytes: &[u8], newest: bool) -> Result<(usize, Scan), Damage> {
        let mut records = 0;
        let scan = scan(bytes, 3, newest, |_| records += 1)?;
        Ok((records, scan))
    }

    #[test]
    fn names_round_trip() {
        assert_eq!(parse_name(&file_name(0xabc)), Some(0xabc));
        assert_eq!(parse_name("log-1.seg"), None);
        assert_eq!(parse_name("snapshot.bin"), None);
    }

    #[test]
    fn a_whole_segment_reads_back() {
        let (bytes, _) = segment(4);
        let (records, scan) = read(&bytes, false).unwrap();
        assert_eq!(records, 5);
        assert_eq!(scan, Scan { end: bytes.len(), torn: 0, starts_with_checkpoint: true, max_index: None });
    }

    #[test]
    fn a_torn_last_record_is_cut_off_wherever_it_tears() {
        let (bytes, starts) = segment(4);
        let last = *starts.last().unwrap();
        for cut in last..bytes.len() {
            let (records, scan) = read(&bytes[..cut], true).unwrap();
            assert_eq!((records, scan.end, scan.torn), (4, last, cut - last), "cut at {cut}");
        }
        for bit in last * 8..bytes.len() * 8 {
            let mut flipped = bytes.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            let (records, scan) = read(&flipped, true).unwrap();
            assert_eq!((records, scan.end, scan.torn), (4, last, bytes.len() - last), "bit {bit}");
        }
    }

    #[test]
    fn damage_before_a_valid_record_or_in_a_sealed_segment_is_an_error() {
        let (bytes, starts) = segment(4);
        for bit in (starts[2] * 8..starts[3] * 8).step_by(3) {
            let mut flipped = bytes.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            let damage = read(&flipped, true).unwrap_err();
            assert_eq!(damage.offset, starts[2] as u64, "bit {bit}: {}", damage.reason);
        }
        let damage = read(&bytes[..bytes.len() - 1], false).unwrap_err();
        assert_eq!(damage.offset, *starts.last().unwrap() as u64);
        assert!(damage.reason.contains("sealed"), "{}", damage.reason);
    }

    #[test]
    fn a_bad_header_is_named() {
        let (mut bytes, _) = segment(1);
        bytes[9] ^= 1;
        let damage = read(&bytes, true).unwrap_err();
        assert_eq!(damage.offset, 0);
        assert!(damage.reason.contains("checksum"), "{}", damage.reason);
        assert!(check_header(&header(4), 3).unwrap_err().contains("names segment 4"));
    }
}
