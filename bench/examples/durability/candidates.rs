//! The log crates considered instead of leaseq's own segment format,
//! measured on the load that decides it: concurrent callers each appending
//! one 100-byte record at a time and waiting until it is durable (what
//! every `send` under `SyncPolicy::Always` needs from its log).
//!
//! okaywal (0.3) is the candidate with the same shape as leaseq's log
//! (segments, CRC32C, multi-threaded group commit, checkpoints that recycle
//! segments); fjall (2) is a log-structured key-value store whose journal
//! would hold the messages as keys (each insert persisted with
//! `PersistMode::SyncAll` before the call returns). Their figures are a log
//! or a store alone; leaseq's, beside them, are whole durable sends (queue
//! work included), so a ratio above one is a lead the log format earns
//! despite carrying more.

use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::Instant;

/// Records per second when `callers` threads each append and commit
/// `per_caller` records to an okaywal log in `dir`.
pub fn okaywal_appends(dir: &Path, callers: usize, per_caller: usize, payload: &[u8]) -> f64 {
    let _ = std::fs::remove_dir_all(dir);
    let log = okaywal::WriteAheadLog::recover(dir, okaywal::LogVoid).expect("okaywal opens");
    let barrier = Arc::new(Barrier::new(callers));
    let payload = payload.to_vec();
    let threads: Vec<_> = (0..callers)
        .map(|_| {
            let (log, barrier, payload) = (log.clone(), barrier.clone(), payload.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let started = Instant::now();
                for _ in 0..per_caller {
                    let mut entry = log.begin_entry().expect("begin an entry");
                    entry.write_chunk(&payload).expect("write a chunk");
                    entry.commit().expect("commit (fsync)");
                }
                (started, Instant::now())
            })
        })
        .collect();
    let spans: Vec<(Instant, Instant)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let start = spans.iter().map(|s| s.0).min().unwrap();
    let end = spans.iter().map(|s| s.1).max().unwrap();
    let _ = log.shutdown();
    let _ = std::fs::remove_dir_all(dir);
    (callers * per_caller) as f64 / (end - start).as_secs_f64()
}

/// Records per second when `callers` threads each insert and persist
/// (`SyncAll`) `per_caller` keys (a caller number and a counter, so keys
/// arrive in order per caller as message ids would) into a fjall partition
/// in `dir`.
pub fn fjall_inserts(dir: &Path, callers: usize, per_caller: usize, payload: &[u8]) -> f64 {
    let _ = std::fs::remove_dir_all(dir);
    let keyspace = fjall::Config::new(dir).open().expect("fjall opens");
    let items = keyspace.open_partition("q", fjall::PartitionCreateOptions::default()).expect("a partition");
    let barrier = Arc::new(Barrier::new(callers));
    let payload = payload.to_vec();
    let threads: Vec<_> = (0..callers as u64)
        .map(|caller| {
            let (keyspace, items, barrier, payload) =
                (keyspace.clone(), items.clone(), barrier.clone(), payload.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let started = Instant::now();
                for n in 0..per_caller as u64 {
                    let key = (caller << 40 | n).to_be_bytes();
                    items.insert(key, &payload).expect("insert");
                    keyspace.persist(fjall::PersistMode::SyncAll).expect("persist (fsync)");
                }
                (started, Instant::now())
            })
        })
        .collect();
    let spans: Vec<(Instant, Instant)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let start = spans.iter().map(|s| s.0).min().unwrap();
    let end = spans.iter().map(|s| s.1).max().unwrap();
    drop((items, keyspace));
    let _ = std::fs::remove_dir_all(dir);
    (callers * per_caller) as f64 / (end - start).as_secs_f64()
}
