//! The snapshot file: the latest snapshot's meta and data in one
//! checksummed file, replaced whole.
//!
//! Invariant: `snapshot.bin` is either absent or a whole snapshot written
//! by `write` (through `fs::replace_atomically`): a 32-byte header (magic,
//! version, meta length, data length, CRC32C over the lengths, meta and
//! data), the meta (bincode) and the data. `read` returns it only if all of
//! that checks, and otherwise a `ClusterError::Corrupt` naming the file.

use std::io;
use std::path::Path;

use openraft::{BasicNode, SnapshotMeta};

use crate::durable::fs::replace_atomically;
use crate::error::ClusterError;
use crate::types::NodeId;

/// The snapshot's file name.
pub(crate) const FILE: &str = "snapshot.bin";
const MAGIC: &[u8; 8] = b"LQRAFTSN";
const VERSION: u32 = 1;
const HEADER: usize = 32;

/// A snapshot's meta and data.
pub(crate) type Meta = SnapshotMeta<NodeId, BasicNode>;

fn checksum(lengths: &[u8], meta: &[u8], data: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c_append(crc32c::crc32c(lengths), meta), data)
}

/// Makes `meta` and `data` the dir's snapshot, durably, before returning.
pub(crate) fn write(dir: &Path, meta: &Meta, data: &[u8]) -> io::Result<()> {
    let meta = bincode::serialize(meta).map_err(io::Error::other)?;
    let meta_len = u32::try_from(meta.len()).map_err(io::Error::other)?;
    let mut header = [0u8; HEADER];
    header[..8].copy_from_slice(MAGIC);
    header[8..12].copy_from_slice(&VERSION.to_le_bytes());
    header[12..16].copy_from_slice(&meta_len.to_le_bytes());
    header[16..24].copy_from_slice(&(data.len() as u64).to_le_bytes());
    let crc = checksum(&header[12..24], &meta, data);
    header[24..28].copy_from_slice(&crc.to_le_bytes());
    replace_atomically(dir, FILE, &[&header, &meta, data])
}

/// The dir's snapshot, if it has one. A leftover temporary file (a write
/// cut short) is removed: the snapshot before it is still in place.
pub(crate) fn read(dir: &Path) -> Result<Option<(Meta, Vec<u8>)>, ClusterError> {
    let path = dir.join(FILE);
    let tmp = dir.join(format!("{FILE}.tmp"));
    match std::fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(ClusterError::io(format!("removing {}", tmp.display()), e)),
    }
    let mut bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ClusterError::io(format!("reading {}", path.display()), e)),
    };
    let bad = |offset: u64, reason: String| ClusterError::Corrupt { path: path.clone(), offset, reason };
    if bytes.len() < HEADER {
        return Err(bad(0, format!("{} bytes, shorter than a snapshot header", bytes.len())));
    }
    if &bytes[..8] != MAGIC {
        return Err(bad(0, "not a leaseq Raft snapshot (bad magic)".into()));
    }
    let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if version != VERSION {
        return Err(bad(8, format!("snapshot format version {version}; this leaseq reads version {VERSION}")));
    }
    if bytes[28..HEADER] != [0; 4] {
        return Err(bad(28, "the snapshot header's reserved bytes are not zero".into()));
    }
    let meta_len = u32::from_le_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]) as usize;
    let mut data_len = [0u8; 8];
    data_len.copy_from_slice(&bytes[16..24]);
    let data_len = u64::from_le_bytes(data_len);
    let expected = (HEADER as u64).saturating_add(meta_len as u64).saturating_add(data_len);
    if expected != bytes.len() as u64 {
        return Err(bad(12, format!("the header says {expected} bytes, the file has {}", bytes.len())));
    }
    let (meta, data) = bytes[HEADER..].split_at(meta_len);
    let crc = u32::from_le_bytes([bytes[24], bytes[25], bytes[26], bytes[27]]);
    if checksum(&bytes[12..24], meta, data) != crc {
        return Err(bad(HEADER as u64, "the snapshot fails its checksum".into()));
    }
    let meta: Meta = bincode::deserialize(meta).map_err(|e| bad(HEADER as u64, format!("the snapshot's meta: {e}")))?;
    let data = bytes.split_off(HEADER + meta_len);
    Ok(Some((meta, data)))
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, LogId, StoredMembership};

    use super::*;

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("leaseq-snapshot-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_snapshot_reads_back_and_any_flipped_bit_is_an_error() {
        let dir = temp_dir("flip");
        assert!(read(&dir).unwrap().is_none());
        let meta = Meta {
            last_log_id: Some(LogId::new(CommittedLeaderId::new(2, 1), 9)),
            last_membership: StoredMembership::default(),
            snapshot_id: "2-9-1".into(),
        };
        write(&dir, &meta, b"state frames").unwrap();
        assert_eq!(read(&dir).unwrap(), Some((meta, b"state frames".to_vec())));
        let good = std::fs::read(dir.join(FILE)).unwrap();
        for bit in 0..good.len() * 8 {
            let mut flipped = good.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            std::fs::write(dir.join(FILE), &flipped).unwrap();
            assert!(matches!(read(&dir), Err(ClusterError::Corrupt { .. })), "bit {bit}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
