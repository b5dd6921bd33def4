//! Segment files: a versioned header, then frames, then zeros up to the
//! preallocated end.
//!
//! Invariant: a segment's bytes are a header, valid frames, and then only
//! zeros, except after a crash, when the last write may have left a torn
//! tail in the newest segment. `scan` tells the two kinds of damage apart:
//! bad bytes with no valid frame anywhere after them are a torn tail (cut
//! off and reported); bad bytes followed by a valid frame are damage in the
//! middle, an error that names the file and offset (skipped only on request,
//! and reported). A frame is found only with its marker, a plausible length
//! and a matching CRC32C over length and body, so a valid frame is not found
//! in garbage by chance (odds about 2^-48 per offset).

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use crate::log::record::{Entry, FRAME_HEADER, FRAME_MAGIC, Frame, frame_at};

/// The header's magic bytes.
const MAGIC: &[u8; 8] = b"LEASEQWL";
/// The format version this code writes and reads.
pub(crate) const VERSION: u32 = 1;
/// Bytes of the header (magic, version, flags, index, CRC, padding).
pub(crate) const HEADER: usize = 32;

/// The file name of segment `index`.
pub(crate) fn file_name(index: u64) -> String {
    format!("wal-{index:016x}.seg")
}

/// The index in a segment file name, if it is one.
pub(crate) fn parse_name(name: &str) -> Option<u64> {
    let hex = name.strip_prefix("wal-")?.strip_suffix(".seg")?;
    if hex.len() != 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// The header of segment `index`.
pub(crate) fn header(index: u64) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[16..24].copy_from_slice(&index.to_le_bytes());
    let crc = crc32c::crc32c(&h[..24]);
    h[24..28].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Checks a segment's header; the error says what is wrong.
pub(crate) fn check_header(bytes: &[u8], index: u64) -> Result<(), String> {
    if bytes.len() < HEADER {
        return Err(format!("{} bytes, shorter than a segment header", bytes.len()));
    }
    if &bytes[..8] != MAGIC {
        return Err("not a leaseq log segment (bad magic)".into());
    }
    let crc = u32::from_le_bytes(bytes[24..28].try_into().expect("4 bytes"));
    if crc32c::crc32c(&bytes[..24]) != crc {
        return Err("segment header fails its checksum".into());
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(format!("segment format version {version}; this leaseq reads version {VERSION}"));
    }
    let stored = u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes"));
    if stored != index {
        return Err(format!("header names segment {stored}, the file name {index}"));
    }
    Ok(())
}

/// The segment files of a data dir, and what else of ours is there.
pub(crate) struct Listing {
    /// (index, path), oldest first.
    pub(crate) segments: Vec<(u64, PathBuf)>,
    /// Temporary files of an unfinished compaction.
    pub(crate) leftovers: Vec<PathBuf>,
}

/// Segment files in `dir`, oldest first, and leftover temporary files.
pub(crate) fn list(dir: &Path) -> io::Result<Listing> {
    let mut segments = Vec::new();
    let mut leftovers = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(index) = parse_name(name) {
            segments.push((index, entry.path()));
        } else if name.starts_with("wal-") && name.ends_with(".tmp") {
            leftovers.push(entry.path());
        }
    }
    segments.sort();
    Ok(Listing { segments, leftovers })
}

/// What a scan of one segment found.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    /// Where the valid frames end (the next write goes here).
    pub(crate) end: usize,
    /// Bytes of a torn tail after `end` (non-zero bytes cut off).
    pub(crate) torn: usize,
    /// Damage skipped under repair: (offset, bytes).
    pub(crate) skipped: Vec<(u64, u64)>,
    /// Frames read.
    pub(crate) frames: u64,
}

/// Damage in the middle of a segment (or anywhere in a sealed one).
#[derive(Debug)]
pub(crate) struct Damage {
    pub(crate) offset: u64,
    pub(crate) reason: String,
}

/// Reads the frames of a segment's bytes, handing each entry to `apply`.
/// `last` says whether this segment may end in a torn write (the newest
/// segment holding data: only the spare reserved ahead of it, which holds
/// none, may follow it); `repair` skips damage instead of stopping.
pub(crate) fn scan(
    bytes: &[u8],
    index: u64,
    last: bool,
    repair: bool,
    mut apply: impl FnMut(Entry),
) -> Result<Scan, Damage> {
    check_header(bytes, index).map_err(|reason| Damage { offset: 0, reason })?;
    let mut scan = Scan { end: HEADER, ..Scan::default() };
    // Past the last non-zero byte there is only the preallocated reserve:
    // found once from the end, so the reserve costs one pass, not a search
    // for frames.
    // (A frame may end in zero bytes, so frames are read from the whole
    // file; only the loop and the search stop at `data_end`.)
    let data_end = last_nonzero(bytes).map_or(HEADER, |at| (at + 1).max(HEADER));
    let mut pos = HEADER;
    while pos < data_end {
        let rest = &bytes[pos..];
        let why = match frame_at(rest) {
            Frame::Valid { entry, len } => {
                apply(entry);
                scan.frames += 1;
                pos += len;
                scan.end = pos;
                continue;
            }
            Frame::Bad(why) => why,
        };
        let next_valid = next_frame(bytes, pos + 1, data_end);
        match next_valid {
            None => {
                // Nothing valid after this point: the end of the data, and
                // whatever non-zero bytes lie here are a torn tail.
                let torn = last_nonzero(rest).map_or(0, |at| at + 1);
                if torn > 0 && !last && !repair {
                    return Err(Damage {
                        offset: pos as u64,
                        reason: format!("{why}: {torn} damaged bytes at the end of a segment that was sealed"),
                    });
                }
                if torn > 0 && !last {
                    scan.skipped.push((pos as u64, torn as u64));
                } else {
                    scan.torn = torn;
                }
                return Ok(scan);
            }
            Some(next) => {
                if !repair {
                    return Err(Damage {
                        offset: pos as u64,
                        reason: format!("{why}, with a valid record {} bytes further on", next - pos),
                    });
                }
                scan.skipped.push((pos as u64, (next - pos) as u64));
                pos = next;
            }
        }
    }
    Ok(scan)
}

/// The offset of the next valid frame starting in `from..limit`.
fn next_frame(bytes: &[u8], from: usize, limit: usize) -> Option<usize> {
    let marker = FRAME_MAGIC.to_le_bytes();
    let mut at = from;
    while at < limit && at + FRAME_HEADER <= bytes.len() {
        // A marker starting before `limit` may end one byte after it.
        let window = &bytes[at..(limit + 1).min(bytes.len())];
        let found = window.windows(2).position(|w| w == marker)?;
        at += found;
        if matches!(frame_at(&bytes[at..]), Frame::Valid { .. }) {
            return Some(at);
        }
        at += 1;
    }
    None
}

fn last_nonzero(bytes: &[u8]) -> Option<usize> {
    bytes.iter().rposition(|&b| b != 0)
}

/// Reserves `len` bytes of disk for `file` (so that writes inside never
/// meet a full disk). File systems without preallocation get a plain
/// length: the space is then claimed as it is written.
pub(crate) fn preallocate(file: &File, len: u64) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let len = libc::off_t::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: `fallocate` on an open file descriptor we own, with no
        // pointers: its only effect is on that file.
        let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) };
        if rc == 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::EOPNOTSUPP) {
            return Err(error);
        }
    }
    file.set_len(len)
}

/// Asks the OS to start writing `len` bytes of `file` at `offset` to the
/// disk, without waiting for them. A hint only: the sync that makes them
/// durable still follows, and finds less to wait for. An error here would
/// surface in that sync, so it is ignored.
pub(crate) fn start_writeback(file: &File, offset: u64, len: u64) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let (Ok(offset), Ok(len)) = (libc::off64_t::try_from(offset), libc::off64_t::try_from(len)) else {
            return;
        };
        // SAFETY: `sync_file_range` on an open file descriptor we own, with
        // no pointers: it only schedules writeback of that file's pages.
        let _ = unsafe { libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE) };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, offset, len);
}

/// Makes a directory's entries (a created, renamed or deleted file) durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::Record;
    use crate::log::record::encode_op;
    use bytes::Bytes;

    fn segment(count: u64) -> (Vec<u8>, Vec<usize>) {
        let mut bytes = header(3).to_vec();
        let mut starts = Vec::new();
        for id in 0..count {
            starts.push(bytes.len());
            let payload = Bytes::from(vec![id as u8 + 1; 20 + id as usize]);
            encode_op(&Record::Sent { queue: 0, id, at: 0, deliver_at: 0, payload }, &mut bytes);
        }
        (bytes, starts)
    }

    fn ids(bytes: &[u8], last: bool, repair: bool) -> Result<(Vec<u64>, Scan), Damage> {
        let mut ids = Vec::new();
        let scan = scan(bytes, 3, last, repair, |e| {
            if let Entry::Op(Record::Sent { id, .. }) = e {
                ids.push(id);
            }
        })?;
        Ok((ids, scan))
    }

    #[test]
    fn names_round_trip() {
        assert_eq!(parse_name(&file_name(0xabc)), Some(0xabc));
        assert_eq!(parse_name("wal-1.seg"), None);
        assert_eq!(parse_name("other"), None);
    }

    #[test]
    fn a_zero_tail_is_the_end_of_data() {
        let (mut bytes, _) = segment(5);
        let end = bytes.len();
        bytes.resize(end + 4096, 0);
        let (ids, scan) = ids(&bytes, true, false).unwrap();
        assert_eq!(ids, vec![0, 1, 2, 3, 4]);
        assert_eq!((scan.end, scan.torn), (end, 0));
    }

    /// The last record cut at every offset, and with every bit flipped:
    /// every earlier record is kept and the drop reported.
    #[test]
    fn a_torn_last_record_is_cut_off_wherever_it_tears() {
        let (bytes, starts) = segment(4);
        let last = *starts.last().unwrap();
        for cut in last..bytes.len() {
            let mut torn = bytes[..cut].to_vec();
            torn.resize(bytes.len() + 100, 0);
            let (ids, scan) = ids(&torn, true, false).unwrap();
            assert_eq!(ids, vec![0, 1, 2], "cut at {cut}");
            assert_eq!(scan.end, last);
            let nonzero = bytes[last..cut].iter().rposition(|&b| b != 0).map_or(0, |p| p + 1);
            assert_eq!(scan.torn, nonzero, "cut at {cut}");
        }
        for bit in last * 8..bytes.len() * 8 {
            let mut flipped = bytes.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            let (ids, scan) = ids(&flipped, true, false).unwrap();
            assert_eq!(ids, vec![0, 1, 2], "bit {bit}");
            assert_eq!(scan.end, last);
            assert!(scan.torn > 0);
        }
    }

    #[test]
    fn damage_in_the_middle_is_an_error_unless_repaired() {
        let (bytes, starts) = segment(6);
        for bit in (starts[2] * 8..starts[3] * 8).step_by(7) {
            let mut flipped = bytes.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            let damage = ids(&flipped, true, false).unwrap_err();
            assert_eq!(damage.offset, starts[2] as u64, "bit {bit}");
            let (ids, scan) = ids(&flipped, true, true).unwrap();
            assert_eq!(ids, vec![0, 1, 3, 4, 5], "bit {bit}: repair skips only the damaged record");
            assert_eq!(scan.skipped, vec![(starts[2] as u64, (starts[3] - starts[2]) as u64)]);
        }
    }

    #[test]
    fn a_sealed_segment_may_not_be_torn() {
        let (bytes, starts) = segment(3);
        let torn = &bytes[..bytes.len() - 3];
        let damage = ids(torn, false, false).unwrap_err();
        assert_eq!(damage.offset, starts[2] as u64);
    }

    #[test]
    fn a_bad_header_is_named() {
        let (mut bytes, _) = segment(1);
        bytes[9] ^= 1;
        let damage = ids(&bytes, true, false).unwrap_err();
        assert!(damage.reason.contains("checksum"), "{}", damage.reason);
        let other = header(4);
        assert!(check_header(&other, 3).unwrap_err().contains("names segment 4"));
    }
}
