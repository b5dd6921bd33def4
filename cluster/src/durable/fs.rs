//! Making file system changes durable.
//!
//! Invariant: a file created, renamed or deleted by this crate's durable
//! stores counts as done only after its directory was synced too
//! (`sync_dir`); a file replaced whole is written beside its final name,
//! synced, renamed over it, and then its directory synced
//! (`replace_atomically`), so a crash leaves the old file or the new one,
//! never a mix.

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

/// Makes `dir`'s entries (a created, renamed or deleted file) durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Replaces `dir/name` with `parts`, concatenated, atomically and durably
/// (through `dir/name.tmp`).
pub(crate) fn replace_atomically(dir: &Path, name: &str, parts: &[&[u8]]) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut file = File::create(&tmp)?;
    for part in parts {
        file.write_all(part)?;
    }
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, dir.join(name))?;
    sync_dir(dir)
}
