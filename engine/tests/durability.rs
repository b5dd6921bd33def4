//! Durable engines: every queue state survives a restart, a torn log tail is
//! cut off and reported, damage in the middle is a clear error, a data dir
//! opens in one engine at a time, and a full disk refuses sends while the
//! engine keeps serving what it holds. The kill -9 loops are in
//! `durability_crash.rs`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use leaseq::{
    Backoff, Engine, Error, LateAck, LeaseError, ManualClock, MessageId, QueueConfig, ReceiveOptions, Repair,
    SyncPolicy,
};

/// A fresh directory under the target dir (removed at the start, kept after
/// a failure for a look).
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("leaseq-durability-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Small segments keep the files these tests rewrite small.
const SEGMENT: u64 = 256 << 10;

fn open(dir: &Path) -> Engine {
    Engine::builder().clock(ManualClock::new()).data_dir(dir).segment_bytes(SEGMENT).open().expect("open the data dir")
}

fn open_with(dir: &Path, policy: SyncPolicy) -> Engine {
    Engine::builder().clock(ManualClock::new()).data_dir(dir).sync(policy).open().expect("open the data dir")
}

/// Every message of `queue` by id: (payload, delivery count of the receive
/// that returned it), received with a long lease (so the caller should not
/// reuse the engine for checks that need them ready).
fn drain(engine: &Engine, queue: &str) -> BTreeMap<u64, (Vec<u8>, u32)> {
    let q = engine.queue(queue).unwrap();
    let mut all = BTreeMap::new();
    loop {
        let got = q.receive_with(1024, ReceiveOptions::new().visibility(Duration::from_secs(3600))).unwrap();
        if got.is_empty() {
            return all;
        }
        for d in got {
            assert!(all.insert(d.id.as_u64(), (d.payload.to_vec(), d.delivery_count)).is_none(), "duplicate");
        }
    }
}

/// The data dir's segment files, oldest first.
fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut all: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    all.sort();
    all
}

fn jobs_config() -> QueueConfig {
    QueueConfig::default()
        .visibility_timeout(Duration::from_secs(30))
        .max_receives(5)
        .dead_letter_queue("dlq")
        .late_ack(LateAck::Reject)
        .backoff(Backoff::Fixed(Duration::from_secs(1)))
        .max_messages(1000)
        .shards(2)
}

#[test]
fn every_queue_state_survives_a_restart() {
    let dir = scratch("states");
    let (ready, in_flight, delayed, dead, acked);
    {
        let engine = open(&dir);
        assert_eq!(engine.sync_policy(), Some(SyncPolicy::Always));
        engine.create_queue("dlq", QueueConfig::default()).unwrap();
        let jobs = engine.create_queue("jobs", jobs_config()).unwrap();
        engine.create_queue("gone", QueueConfig::default()).unwrap().send(&b"x"[..]).unwrap();
        engine.delete_queue("gone").unwrap();
        let purged = engine.create_queue("purged", QueueConfig::default()).unwrap();
        purged.send(&b"p"[..]).unwrap();
        purged.purge().unwrap();

        ready = jobs.send(&b"ready"[..]).unwrap();
        let first = jobs.receive(1).unwrap().remove(0);
        assert_eq!(first.id, ready);
        jobs.release(&first.receipt, Duration::ZERO).unwrap();
        in_flight = jobs.send(&b"in flight"[..]).unwrap();
        dead = jobs.send(&b"dead"[..]).unwrap();
        acked = jobs.send(&b"acked"[..]).unwrap();
        // Receives in FIFO order: `ready` (second delivery), then the others.
        let got = jobs.receive(4).unwrap();
        let ids: Vec<MessageId> = got.iter().map(|d| d.id).collect();
        assert_eq!(ids, vec![ready, in_flight, dead, acked]);
        jobs.release(&got[0].receipt, Duration::ZERO).unwrap();
        jobs.dead_letter(&got[2].receipt, "bad input").unwrap();
        jobs.ack(&got[3].receipt).unwrap();
        delayed = jobs.send_with(&b"delayed"[..], Duration::from_secs(600)).unwrap();
        let report = engine.recovery().expect("a durable engine has a report");
        assert_eq!(report.messages, 0);
    }
    let engine = open(&dir);
    let report = engine.recovery().unwrap().clone();
    assert_eq!(engine.list_queues(), vec!["dlq", "jobs", "purged"]);
    assert_eq!(report.queues, 3);
    assert_eq!(report.messages, 4, "{report:?}");
    assert_eq!(report.torn_bytes, 0);
    let jobs = engine.queue("jobs").unwrap();
    assert_eq!(jobs.config(), jobs_config(), "config intact");
    assert_eq!(jobs.dead_letter_queue().as_deref(), Some("dlq"), "dead-letter link intact");
    assert_eq!(jobs.stats().delayed, 1, "the delayed message is still delayed");
    let got = drain(&engine, "jobs");
    // Counts are those of this receive: recovered count + 1. The in-flight
    // message's attempt ended with the process.
    let expect: BTreeMap<u64, (Vec<u8>, u32)> =
        [(ready.as_u64(), (b"ready".to_vec(), 3)), (in_flight.as_u64(), (b"in flight".to_vec(), 2))].into();
    assert_eq!(got, expect);
    let dlq = engine.queue("dlq").unwrap();
    let dead_letter = dlq.receive(10).unwrap();
    assert_eq!(dead_letter.len(), 1);
    assert_eq!(dead_letter[0].id, dead);
    let record = dead_letter[0].dead_letter.as_ref().expect("the dead-letter record survives");
    assert_eq!(record.source_queue, "jobs");
    assert_eq!(record.reason, leaseq::DeadLetterReason::Explicit("bad input".into()));
    assert_eq!(dead_letter[0].fencing_token, 2, "deliveries carried across the move and the restart");
    assert!(drain(&engine, "purged").is_empty());
    let _ = (acked, delayed);
    // New ids never repeat one handed out before the restart.
    let new = jobs.send(&b"new"[..]).unwrap();
    assert!(new.as_u64() > delayed.as_u64().max(acked.as_u64()), "{new:?}");
    drop(engine);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_receipt_from_before_a_restart_completes_nothing() {
    let dir = scratch("receipts");
    let receipt = {
        let engine = open(&dir);
        let q = engine.create_queue("q", QueueConfig::default()).unwrap();
        q.send(&b"m"[..]).unwrap();
        q.receive(1).unwrap().remove(0).receipt
    };
    let engine = open(&dir);
    let q = engine.queue("q").unwrap();
    assert!(matches!(q.ack(&receipt), Err(LeaseError::InvalidReceipt(_))));
    let again = q.receive(1).unwrap();
    assert_eq!(again[0].delivery_count, 2);
    q.ack(&again[0].receipt).unwrap();
    // Queue handles keep their engine open: close both.
    drop((q, engine));
    let engine = open(&dir);
    assert!(engine.queue("q").unwrap().receive(1).unwrap().is_empty(), "the ack survived");
}

#[test]
fn a_data_dir_opens_in_one_engine_at_a_time() {
    let dir = scratch("lock");
    let first = open(&dir);
    match Engine::builder().data_dir(&dir).open() {
        Err(Error::DataDirLocked { path }) => assert_eq!(path, dir),
        other => panic!("a second open gave {other:?}"),
    }
    drop(first);
    let again = open(&dir);
    drop(again);
}

/// A real clock whose readings on the driver thread stall while `stall` is
/// set: it holds the driver in the middle of its tick.
#[derive(Debug, Clone, Default)]
struct StallingClock {
    stall: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl leaseq::Clock for StallingClock {
    fn now(&self) -> leaseq::Nanos {
        if std::thread::current().name() == Some("leaseq-driver") {
            while self.stall.load(std::sync::atomic::Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let since = std::time::UNIX_EPOCH.elapsed().unwrap_or_default();
        leaseq::Nanos(u64::try_from(since.as_nanos()).unwrap_or(u64::MAX))
    }
}

/// The driver thread never holds the engine, so dropping the last handle
/// closes the engine on the dropping thread and the data dir is unlocked
/// when the drop returns, even while the driver is in the middle of a tick.
/// (Before, the driver held a handle for each tick; a drop that landed then
/// left the close to the driver thread, and an open right after the drop
/// got `DataDirLocked`.)
#[test]
fn the_data_dir_is_unlocked_when_the_last_handle_is_dropped() {
    let dir = scratch("unlock-on-drop");
    let clock = StallingClock::default();
    let engine = Engine::builder().clock(clock.clone()).data_dir(&dir).segment_bytes(SEGMENT).open().unwrap();
    engine.create_queue("q", QueueConfig::default()).unwrap().send(&b"kept"[..]).unwrap();
    // Stall the driver inside its next tick, then drop the only handle.
    clock.stall.store(true, std::sync::atomic::Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(150));
    let release = {
        let stall = clock.stall.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            stall.store(false, std::sync::atomic::Ordering::SeqCst);
        })
    };
    drop(engine);
    match Engine::builder().data_dir(&dir).segment_bytes(SEGMENT).open() {
        Ok(engine) => assert_eq!(engine.queue("q").unwrap().stats().ready, 1),
        Err(e) => panic!("the data dir was still locked after the last handle was dropped: {e}"),
    }
    release.join().unwrap();
}

#[test]
fn redrive_and_counts_survive_and_recreated_names_do_not_inherit() {
    let dir = scratch("redrive");
    {
        let engine = open(&dir);
        engine.create_queue("dlq", QueueConfig::default()).unwrap();
        let jobs = engine.create_queue("jobs", jobs_config()).unwrap();
        for i in 0..10u8 {
            jobs.send(vec![i]).unwrap();
        }
        for d in jobs.receive(10).unwrap() {
            jobs.dead_letter(&d.receipt, "x").unwrap();
        }
        assert_eq!(engine.redrive("dlq", "jobs", 4).unwrap(), 4);
        engine.create_queue("temp", QueueConfig::default()).unwrap().send(&b"old"[..]).unwrap();
        engine.delete_queue("temp").unwrap();
        engine.create_queue("temp", QueueConfig::default()).unwrap().send(&b"new"[..]).unwrap();
    }
    let engine = open(&dir);
    let jobs = drain(&engine, "jobs");
    let dlq = drain(&engine, "dlq");
    assert_eq!((jobs.len(), dlq.len()), (4, 6));
    assert!(jobs.values().all(|(_, count)| *count == 1), "redrive reset the counts: {jobs:?}");
    let temp = drain(&engine, "temp");
    assert_eq!(temp.values().map(|(p, _)| p.clone()).collect::<Vec<_>>(), vec![b"new".to_vec()]);
}

#[test]
fn a_message_at_the_retry_ceiling_moves_to_the_dead_letter_queue_at_open() {
    let dir = scratch("ceiling");
    let config = jobs_config().max_receives(2);
    let id = {
        let engine = open(&dir);
        engine.create_queue("dlq", QueueConfig::default()).unwrap();
        let jobs = engine.create_queue("jobs", config.clone()).unwrap();
        let id = jobs.send(&b"poison"[..]).unwrap();
        let first = jobs.receive(1).unwrap().remove(0);
        jobs.release(&first.receipt, Duration::ZERO).unwrap();
        let second = jobs.receive(1).unwrap().remove(0);
        assert_eq!(second.delivery_count, 2);
        id
        // The process "dies" holding the second delivery.
    };
    let engine = open(&dir);
    assert_eq!(engine.recovery().unwrap().dead_lettered, 1);
    assert!(engine.queue("jobs").unwrap().receive(1).unwrap().is_empty());
    let dead = engine.queue("dlq").unwrap().receive(1).unwrap().remove(0);
    assert_eq!(dead.id, id);
    assert_eq!(dead.dead_letter.as_ref().unwrap().delivery_count, 2);
    drop(engine);
    // The move itself was recorded: it happens once.
    let engine = open(&dir);
    assert_eq!(engine.recovery().unwrap().dead_lettered, 0);
    assert_eq!(drain(&engine, "dlq").len(), 1);
}

/// A message at the ceiling that stayed on its queue because the dead-letter
/// queue was full must not take, at open, the room the dead-letter queue's
/// own messages need (they arrived later in the log). The first recovery
/// moved messages in log order and failed here with "the log holds more
/// messages for queue 'dlq' than its max_messages".
#[test]
fn a_move_at_open_never_takes_the_room_of_the_dead_letter_queues_own_messages() {
    let dir = scratch("ceiling-full");
    let clock = ManualClock::new();
    let open_here = |clock: &ManualClock| {
        Engine::builder().clock(clock.clone()).data_dir(&dir).segment_bytes(SEGMENT).open().expect("open")
    };
    let jobs_config = jobs_config().max_receives(1).backoff(Backoff::None);
    let poison = {
        let engine = open_here(&clock);
        let dlq = engine.create_queue("dlq", QueueConfig::default().max_messages(2)).unwrap();
        let jobs = engine.create_queue("jobs", jobs_config).unwrap();
        let poison = jobs.send(&b"poison"[..]).unwrap();
        dlq.send(&b"d1"[..]).unwrap();
        dlq.send(&b"d2"[..]).unwrap();
        let only = jobs.receive(1).unwrap().remove(0);
        assert_eq!(only.delivery_count, 1);
        // The lease runs out at the ceiling; the full dead-letter queue keeps
        // the message on jobs.
        clock.advance(Duration::from_secs(31));
        assert_eq!(jobs.stats().dead_letter_overflow, 1);
        assert_eq!(jobs.stats().ready, 1);
        engine.flush().unwrap();
        poison
    };
    let engine = open_here(&clock);
    let report = engine.recovery().unwrap().clone();
    assert_eq!((report.messages, report.dead_lettered), (3, 0));
    let on_dlq: Vec<Vec<u8>> = drain(&engine, "dlq").into_values().map(|(p, _)| p).collect();
    assert_eq!(on_dlq, vec![b"d1".to_vec(), b"d2".to_vec()]);
    let on_jobs = drain(&engine, "jobs");
    assert_eq!(on_jobs.keys().copied().collect::<Vec<_>>(), vec![poison.as_u64()]);
}

/// Writes `n` messages to a fresh data dir and returns the path of its only
/// segment and the byte offset where the last record starts.
fn log_with_messages(dir: &Path, n: u8) -> (PathBuf, u64, u64) {
    let engine = open(dir);
    let q = engine.create_queue("q", QueueConfig::default()).unwrap();
    for i in 0..n - 1 {
        q.send(vec![i; 40]).unwrap();
    }
    let before = engine.log_stats().unwrap().bytes;
    q.send(vec![n - 1; 40]).unwrap();
    let stats = engine.log_stats().unwrap();
    drop(engine);
    let segment = segments(dir)[0].clone();
    // The segment holds its header and preamble, then every record written.
    let start = stats.log_bytes - stats.bytes;
    (segment, start + before, start + stats.bytes)
}

#[test]
fn a_torn_last_record_is_cut_off_at_every_offset_and_reported() {
    let dir = scratch("torn");
    let (segment, last, end) = log_with_messages(&dir, 5);
    let pristine = std::fs::read(&segment).unwrap();
    for cut in last..end {
        let mut bytes = pristine.clone();
        bytes[cut as usize..].fill(0);
        std::fs::write(&segment, &bytes).unwrap();
        let engine = open(&dir);
        let report = engine.recovery().unwrap().clone();
        let got = drain(&engine, "q");
        assert_eq!(got.len(), 4, "cut at {cut}: every earlier record kept");
        assert!(got.values().all(|(p, _)| p[0] < 4));
        let nonzero = pristine[last as usize..cut as usize].iter().rposition(|&b| b != 0).map_or(0, |p| p + 1);
        assert_eq!(report.torn_bytes, nonzero as u64, "cut at {cut}");
        let line = report.to_string();
        assert_eq!(line.contains(&format!("cut a torn last write of {nonzero} bytes")), nonzero > 0, "{line}");
        assert!(!report.lost_records() && !line.contains("SKIPPED"), "{line}");
        drop(engine);
    }
    for bit in (last * 8..end * 8).step_by(3) {
        let mut bytes = pristine.clone();
        bytes[(bit / 8) as usize] ^= 1 << (bit % 8);
        std::fs::write(&segment, &bytes).unwrap();
        let engine = open(&dir);
        assert!(engine.recovery().unwrap().torn_bytes > 0, "bit {bit}");
        assert_eq!(drain(&engine, "q").len(), 4, "bit {bit}");
        drop(engine);
    }
}

#[test]
fn damage_before_the_end_is_an_error_naming_file_and_offset() {
    let dir = scratch("corrupt");
    let engine = open(&dir);
    let q = engine.create_queue("q", QueueConfig::default()).unwrap();
    let mut starts = Vec::new();
    for i in 0..6u8 {
        starts.push(engine.log_stats().unwrap().bytes);
        q.send(vec![i; 40]).unwrap();
    }
    // Records follow the segment's header and preamble.
    let stats = engine.log_stats().unwrap();
    let start = stats.log_bytes - stats.bytes;
    let starts: Vec<u64> = starts.into_iter().map(|at| start + at).collect();
    drop((q, engine));
    let segment = segments(&dir)[0].clone();
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[starts[2] as usize + 20] ^= 0x10;
    std::fs::write(&segment, &bytes).unwrap();
    match Engine::builder().clock(ManualClock::new()).data_dir(&dir).open() {
        Err(Error::CorruptLog { file, offset, .. }) => {
            assert_eq!((file, offset), (segment.clone(), starts[2]));
        }
        other => panic!("damage gave {other:?}"),
    }
    let engine = Engine::builder().clock(ManualClock::new()).data_dir(&dir).repair(Repair::SkipDamaged).open().unwrap();
    let report = engine.recovery().unwrap().clone();
    assert_eq!(report.damaged.len(), 1);
    assert_eq!(report.damaged[0].offset, starts[2]);
    assert_eq!(report.damaged[0].bytes, starts[3] - starts[2]);
    let payloads: Vec<u8> = drain(&engine, "q").values().map(|(p, _)| p[0]).collect();
    assert_eq!(payloads, vec![0, 1, 3, 4, 5], "only the damaged record is lost");
    assert!(report.lost_records());
    let line = report.to_string();
    let skipped =
        format!("SKIPPED {} damaged bytes at byte {} of {}", starts[3] - starts[2], starts[2], segment.display());
    assert!(line.starts_with("1 queues and 5 messages from "), "{line}");
    assert!(line.contains(&skipped), "{line}");
}

/// Fills a data dir's first segment past half, so that the writer reserves
/// the next one (its spare: a header and zeros), and closes it; returns the
/// payloads sent, the first segment, and the bytes of its last record.
fn log_with_a_spare(dir: &Path) -> (Vec<Vec<u8>>, PathBuf, Vec<u8>) {
    let engine = open(dir);
    let q = engine.create_queue("q", QueueConfig::default()).unwrap();
    let mut sent = Vec::new();
    let mut last = (0, 0);
    while segments(dir).len() < 2 {
        assert!(sent.len() < 1000, "no spare segment reserved");
        let payload = vec![sent.len() as u8 | 1; 1000];
        let before = engine.log_stats().unwrap().bytes;
        q.send(payload.clone()).unwrap();
        engine.flush().unwrap();
        last = (32 + before, 32 + engine.log_stats().unwrap().bytes);
        sent.push(payload);
    }
    drop((q, engine));
    let files = segments(dir);
    assert_eq!(files.len(), 2, "one segment with data and its spare");
    let bytes = std::fs::read(&files[0]).unwrap();
    let record = bytes[last.0 as usize..last.1 as usize].to_vec();
    (sent, files[0].clone(), record)
}

/// A kill -9 can land inside the writer's `pwrite` and leave part of a
/// group in the segment it was filling while its spare already exists: that
/// is a torn tail (reported and cut off), not damage in a sealed segment.
#[test]
fn a_torn_write_before_the_spare_segment_is_a_torn_tail() {
    let dir = scratch("torn-before-spare");
    let (sent, first, record) = log_with_a_spare(&dir);
    let mut bytes = std::fs::read(&first).unwrap();
    bytes.extend_from_slice(&record[..record.len() / 2]);
    std::fs::write(&first, &bytes).unwrap();
    let engine = open(&dir);
    let report = engine.recovery().unwrap().clone();
    assert_eq!(report.torn_bytes, (record.len() / 2) as u64);
    assert!(report.damaged.is_empty());
    let q = engine.queue("q").unwrap();
    q.send(b"after".to_vec()).unwrap();
    drop((q, engine));
    // The cut was made durable: the next open finds no torn bytes.
    let engine = open(&dir);
    assert_eq!(engine.recovery().unwrap().torn_bytes, 0);
    let mut got: Vec<Vec<u8>> = drain(&engine, "q").into_values().map(|(p, _)| p).collect();
    let mut want = sent;
    want.push(b"after".to_vec());
    got.sort();
    want.sort();
    assert_eq!(got, want, "every whole record kept, nothing twice");
}

/// Damage at the end of a segment that a later segment's data follows is
/// still damage, not a torn tail.
#[test]
fn damage_at_the_end_of_a_sealed_segment_is_still_an_error() {
    let dir = scratch("damaged-sealed");
    let (_, first, record) = log_with_a_spare(&dir);
    // The spare becomes the current segment at the open: write to it.
    let engine = open(&dir);
    let q = engine.queue("q").unwrap();
    for _ in 0..5 {
        q.send(vec![7; 1000]).unwrap();
    }
    drop((q, engine));
    let files = segments(&dir);
    assert_eq!(files.len(), 2);
    assert!(std::fs::metadata(&files[1]).unwrap().len() > 5000, "the second segment holds the new records");
    let mut bytes = std::fs::read(&first).unwrap();
    bytes.extend_from_slice(&record[..record.len() / 2]);
    std::fs::write(&first, &bytes).unwrap();
    match Engine::builder().clock(ManualClock::new()).data_dir(&dir).segment_bytes(SEGMENT).open() {
        Err(Error::CorruptLog { file, .. }) => assert_eq!(file, first),
        other => panic!("damage in a sealed segment gave {other:?}"),
    }
}

/// A crash between creating a segment file and writing its header leaves a
/// file of zeros that never held a record: recovery removes it.
#[test]
fn a_segment_file_cut_short_before_its_header_is_removed() {
    let dir = scratch("unfinished-reservation");
    let (sent, _, _) = log_with_a_spare(&dir);
    let name = |index: u64| dir.join(format!("wal-{index:016x}.seg"));
    std::fs::write(name(3), vec![0u8; 4096]).unwrap();
    let engine = open(&dir);
    assert_eq!(engine.recovery().unwrap().torn_bytes, 0);
    assert!(!name(3).exists(), "the empty reservation was removed");
    assert_eq!(drain(&engine, "q").len(), sent.len());
}

#[test]
fn compaction_keeps_the_live_state_and_bounds_the_log() {
    let dir = scratch("compact");
    let segment = 64 << 10;
    let mut live = BTreeMap::new();
    {
        let engine = Engine::builder()
            .clock(ManualClock::new())
            .data_dir(&dir)
            .sync(SyncPolicy::Never)
            .segment_bytes(segment)
            .open()
            .unwrap();
        let keep = engine.create_queue("keep", QueueConfig::default()).unwrap();
        let churn = engine.create_queue("churn", QueueConfig::default()).unwrap();
        // Metadata written before the churn must survive the compaction that
        // drops the segment it was logged in.
        keep.set_metadata(&b"kept through compaction"[..]).unwrap();
        // Churn: a thousand rounds of 19 sends and 19 acks beside one kept
        // message leave 1,000 live messages and ~40,000 records behind.
        for round in 0..1_000u32 {
            let id = keep.send(round.to_le_bytes().to_vec()).unwrap();
            live.insert(id.as_u64(), round.to_le_bytes().to_vec());
            assert!(churn.send_batch((0..19u32).map(|i| i.to_le_bytes().to_vec())).iter().all(Result::is_ok));
            let got = churn.receive(19).unwrap();
            assert_eq!(got.len(), 19);
            let receipts: Vec<_> = got.iter().map(|d| d.receipt).collect();
            assert!(churn.ack_batch(&receipts).iter().all(Result::is_ok));
        }
        engine.flush().unwrap();
        // The writer compacts after the group that made it due, once that
        // group's callers are answered: wait for it.
        let started = std::time::Instant::now();
        let bounded = |s: &leaseq::LogStats| s.compactions > 0 && s.log_bytes <= 2 * s.live_bytes + 3 * segment;
        while !bounded(&engine.log_stats().unwrap()) && started.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(5));
        }
        let stats = engine.log_stats().unwrap();
        assert!(stats.compactions > 0, "{stats:?}");
        assert!(
            stats.log_bytes <= 2 * stats.live_bytes + 3 * segment,
            "log {} bytes for {} live bytes: {stats:?}",
            stats.log_bytes,
            stats.live_bytes
        );
    }
    let on_disk: u64 = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum();
    assert!(on_disk < 6 * segment + 200_000, "{on_disk} bytes on disk");
    let engine = open(&dir);
    assert!(drain(&engine, "churn").is_empty());
    assert_eq!(&engine.queue("keep").unwrap().metadata()[..], b"kept through compaction");
    assert!(engine.queue("churn").unwrap().metadata().is_empty());
    let got = drain(&engine, "keep");
    assert_eq!(got.len(), live.len());
    for (id, payload) in &live {
        assert_eq!(&got[id].0, payload);
    }
}

/// Cleaning drops the oldest segments once it has rewritten the live
/// messages homed there; a restart still finds every message in its place
/// in the arrival order, with its delivery count and dead-letter record.
#[test]
fn cleaning_drops_old_segments_and_keeps_each_message_in_its_place() {
    let dir = scratch("clean");
    let segment = 64 << 10;
    let open_here = || {
        Engine::builder()
            .clock(ManualClock::new())
            .data_dir(&dir)
            .sync(SyncPolicy::Never)
            .segment_bytes(segment)
            .open()
            .unwrap()
    };
    let mut kept = Vec::new();
    let dead_lettered;
    {
        let engine = open_here();
        engine.create_queue("keep-dlq", QueueConfig::default()).unwrap();
        let keep = engine.create_queue("keep", QueueConfig::default().dead_letter_queue("keep-dlq")).unwrap();
        let churn = engine.create_queue("churn", QueueConfig::default()).unwrap();
        // History in the first segment: a message dead-lettered, and three
        // received and released (their counts live in Received records).
        dead_lettered = keep.send(&b"poison"[..]).unwrap();
        let d = keep.receive(1).unwrap().pop().unwrap();
        keep.dead_letter(&d.receipt, "bad").unwrap();
        for round in 0..600u32 {
            let id = keep.send(round.to_le_bytes().to_vec()).unwrap();
            kept.push((id, round));
            if round == 2 {
                for d in keep.receive(3).unwrap() {
                    keep.release(&d.receipt, Duration::ZERO).unwrap();
                }
            }
            assert!(churn.send_batch((0..19u32).map(|i| vec![i as u8; 60])).iter().all(Result::is_ok));
            let receipts: Vec<_> = churn.receive(19).unwrap().iter().map(|d| d.receipt).collect();
            assert!(churn.ack_batch(&receipts).iter().all(Result::is_ok));
        }
        engine.flush().unwrap();
        let started = std::time::Instant::now();
        let bound = |s: &leaseq::LogStats| s.live_bytes + (s.live_bytes / 2).max(segment) + 2 * segment;
        while engine.log_stats().unwrap().log_bytes > bound(&engine.log_stats().unwrap())
            && started.elapsed() < Duration::from_secs(20)
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        let stats = engine.log_stats().unwrap();
        assert!(stats.segments_cleaned > 0 && stats.rewritten_bytes > 0, "{stats:?}");
        assert!(stats.log_bytes <= bound(&stats), "{stats:?}");
    }
    let files = segments(&dir);
    assert!(!files.iter().any(|f| f.ends_with(format!("wal-{:016x}.seg", 1))), "the first segment was dropped");
    let engine = open_here();
    assert_eq!(engine.recovery().unwrap().messages, kept.len() as u64 + 1);
    let keep = engine.queue("keep").unwrap();
    let mut order = Vec::new();
    loop {
        let got = keep.receive_with(100, ReceiveOptions::new().visibility(Duration::from_secs(3600))).unwrap();
        if got.is_empty() {
            break;
        }
        order.extend(got.into_iter().map(|d| (d.id, d.delivery_count, d.payload.to_vec())));
    }
    let expected: Vec<(MessageId, u32, Vec<u8>)> =
        kept.iter().map(|(id, round)| (*id, if *round < 3 { 2 } else { 1 }, round.to_le_bytes().to_vec())).collect();
    assert_eq!(order.len(), expected.len(), "every message once");
    if let Some(at) = order.iter().zip(&expected).position(|(got, want)| got != want) {
        panic!("position {at}: got {:?}, expected {:?} (arrival order and delivery counts)", order[at], expected[at]);
    }
    let dlq = engine.queue("keep-dlq").unwrap().receive(10).unwrap();
    assert_eq!(dlq.len(), 1);
    assert_eq!(dlq[0].id, dead_lettered);
    assert_eq!(dlq[0].dead_letter.as_ref().map(|r| r.source_queue.as_str()), Some("keep"));
    assert!(drain(&engine, "churn").is_empty());
}

/// Cleaning never leaves a gap in the segments, so a missing one is damage:
/// a clear error, or with repair read past and reported.
#[test]
fn a_segment_missing_from_the_middle_of_the_log_is_an_error() {
    let dir = scratch("gap");
    {
        let engine = Engine::builder()
            .clock(ManualClock::new())
            .data_dir(&dir)
            .sync(SyncPolicy::Never)
            .segment_bytes(64 << 10)
            .open()
            .unwrap();
        let q = engine.create_queue("q", QueueConfig::default()).unwrap();
        for i in 0..3_000u32 {
            q.send(vec![i as u8; 100]).unwrap();
        }
    }
    let files = segments(&dir);
    assert!(files.len() >= 3, "{files:?}");
    std::fs::remove_file(&files[1]).unwrap();
    match Engine::builder().clock(ManualClock::new()).data_dir(&dir).open() {
        Err(Error::CorruptLog { file, reason, .. }) => {
            assert_eq!(file, files[2]);
            assert!(reason.contains("missing"), "{reason}");
        }
        other => panic!("a gap gave {other:?}"),
    }
    let engine = Engine::builder().clock(ManualClock::new()).data_dir(&dir).repair(Repair::SkipDamaged).open().unwrap();
    assert_eq!(engine.recovery().unwrap().missing_segments, vec![files[1].clone()]);
    let left = drain(&engine, "q").len();
    assert!(left > 0 && left < 3_000, "{left} messages");
}

#[test]
fn queue_metadata_survives_a_restart_and_bad_metadata_changes_nothing() {
    let dir = scratch("metadata");
    {
        let engine = open(&dir);
        let q = engine.create_queue("q", QueueConfig::default()).unwrap();
        assert!(q.metadata().is_empty());
        q.set_metadata(&b"first"[..]).unwrap();
        q.set_metadata(&b"{\"DelaySeconds\":5}"[..]).unwrap();
        let too_big = vec![0u8; leaseq::MAX_QUEUE_METADATA + 1];
        assert!(matches!(q.set_metadata(too_big), Err(Error::InvalidConfig { field: "metadata", .. })));
        assert_eq!(&q.metadata()[..], b"{\"DelaySeconds\":5}", "a refused change changes nothing");
        let gone = engine.create_queue("gone", QueueConfig::default()).unwrap();
        gone.set_metadata(&b"x"[..]).unwrap();
        engine.delete_queue("gone").unwrap();
        assert!(matches!(gone.set_metadata(&b"y"[..]), Err(Error::QueueDeleted { .. })));
    }
    let engine = open(&dir);
    assert_eq!(&engine.queue("q").unwrap().metadata()[..], b"{\"DelaySeconds\":5}");
    // A queue created again under a deleted one's name starts without it.
    let again = engine.create_queue("gone", QueueConfig::default()).unwrap();
    assert!(again.metadata().is_empty());
}

#[test]
fn interval_and_never_policies_recover_after_a_clean_close() {
    for policy in [SyncPolicy::Interval(Duration::from_millis(5)), SyncPolicy::Never] {
        let dir = scratch(&format!("{policy:?}").replace(['(', ')', ' ', '.'], "_"));
        {
            let engine = open_with(&dir, policy);
            let q = engine.create_queue("q", QueueConfig::default()).unwrap();
            let results = q.send_batch((0..500u32).map(|i| i.to_le_bytes().to_vec()));
            assert!(results.iter().all(Result::is_ok));
            let got = q.receive(100).unwrap();
            for d in &got {
                q.ack(&d.receipt).unwrap();
            }
        }
        let engine = open_with(&dir, policy);
        assert_eq!(drain(&engine, "q").len(), 400, "{policy:?}");
    }
}

/// A full file system (a 4 MiB tmpfs mounted by the test, as root): sends
/// are refused with `Error::Storage` and change nothing, while receives and
/// acks of what the engine holds go on; nothing committed is lost; once the
/// queue is drained, cleaning frees the room and sends are accepted again.
#[test]
fn a_full_disk_refuses_sends_and_keeps_serving() {
    let dir = scratch("full");
    std::fs::create_dir_all(&dir).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=4m", "tmpfs"])
        .arg(&dir)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        println!("SKIPPED a_full_disk_refuses_sends_and_keeps_serving: mounting a tmpfs needs root");
        return;
    }
    let unmount = Unmount(dir.clone());
    let data = dir.join("data");
    let mut accepted = Vec::new();
    let refused;
    {
        let engine =
            Engine::builder().clock(ManualClock::new()).data_dir(&data).segment_bytes(256 << 10).open().unwrap();
        let q = engine.create_queue("q", QueueConfig::default().max_messages(1 << 20).max_payload(4096)).unwrap();
        let payload = vec![7u8; 2000];
        loop {
            match q.send(payload.clone()) {
                Ok(id) => accepted.push(id),
                Err(Error::Storage { reason, payload: back }) => {
                    assert_eq!(back.as_deref(), Some(&payload[..]), "the payload is handed back");
                    refused = reason;
                    break;
                }
                Err(other) => panic!("{other:?}"),
            }
            assert!(accepted.len() < 10_000, "4 MiB never filled");
        }
        assert!(accepted.len() > 100, "{} sends before the disk filled", accepted.len());
        let depth = q.stats().ready;
        assert_eq!(depth, accepted.len() as u64, "the refused send changed nothing");
        assert!(engine.log_stats().unwrap().refusing.is_some());
        // Draining still works: receive and ack a hundred.
        let got = q.receive(100).unwrap();
        for d in &got {
            q.ack(&d.receipt).unwrap();
        }
        assert_eq!(q.stats().ready, depth - 100);
        // Draining the rest leaves the oldest segments dead: cleaning drops
        // them, the spare can be reserved again, and sends are accepted.
        loop {
            let got = q.receive(100).unwrap();
            if got.is_empty() {
                break;
            }
            let receipts: Vec<_> = got.iter().map(|d| d.receipt).collect();
            assert!(q.ack_batch(&receipts).iter().all(Result::is_ok));
        }
        let started = std::time::Instant::now();
        while engine.log_stats().unwrap().refusing.is_some() && started.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let stats = engine.log_stats().unwrap();
        assert!(stats.refusing.is_none() && stats.segments_cleaned > 0, "{stats:?}");
        accepted = (0..100).map(|_| q.send(payload.clone()).expect("a send once room is back")).collect();
    }
    assert!(!refused.is_empty());
    let engine = Engine::builder().clock(ManualClock::new()).data_dir(&data).segment_bytes(256 << 10).open().unwrap();
    let got = drain(&engine, "q");
    assert_eq!(
        got.keys().copied().collect::<Vec<_>>(),
        accepted.iter().map(|id| id.as_u64()).collect::<Vec<_>>(),
        "every committed send is there, every ack holds"
    );
    drop(engine);
    drop(unmount);
}

struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Counts its wakes and unparks the thread that polls.
struct CountingWaker {
    wakes: std::sync::atomic::AtomicUsize,
    thread: std::thread::Thread,
}

impl std::task::Wake for CountingWaker {
    fn wake(self: std::sync::Arc<Self>) {
        self.wakes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.thread.unpark();
    }
}

/// Under `Always` an async receive hands its deliveries out only once their
/// delivery counts are durable, and waits for that by returning `Pending`
/// (woken by the writer's commit), not by blocking the executor's thread.
#[test]
fn an_async_receive_waits_for_its_commit_without_blocking_the_executor() {
    use std::future::Future;
    use std::task::{Context, Poll};
    let dir = scratch("async-commit");
    let engine = open_with(&dir, SyncPolicy::Always);
    let q = engine.create_queue("q", QueueConfig::default()).unwrap();
    let rounds = 20;
    let mut pending_first = 0;
    for round in 0..rounds {
        q.send(vec![round as u8]).unwrap();
        let waker = std::sync::Arc::new(CountingWaker { wakes: 0.into(), thread: std::thread::current() });
        let waker_handle = std::task::Waker::from(waker.clone());
        let mut cx = Context::from_waker(&waker_handle);
        let mut future = q.receive_async(1, ReceiveOptions::default());
        let mut polls = 0;
        let got = loop {
            polls += 1;
            match std::pin::Pin::new(&mut future).poll(&mut cx) {
                Poll::Ready(result) => break result.unwrap(),
                Poll::Pending => {
                    // Nothing else wakes this task: the message is in hand, so
                    // only the commit can. Park until it does (bounded).
                    let started = std::time::Instant::now();
                    while waker.wakes.load(std::sync::atomic::Ordering::SeqCst) < polls {
                        assert!(started.elapsed() < Duration::from_secs(10), "the commit never woke the task");
                        std::thread::park_timeout(Duration::from_millis(10));
                    }
                }
            }
        };
        if polls > 1 {
            pending_first += 1;
        }
        assert_eq!(got.len(), 1);
        assert_eq!(&got[0].payload[..], [round as u8]);
        q.ack(&got[0].receipt).unwrap();
    }
    // A sync takes at least tens of microseconds: the first poll finds the
    // count not yet durable nearly every time.
    assert!(pending_first > rounds / 2, "only {pending_first} of {rounds} first polls waited for the commit");
    drop(q);
    drop(engine);
    // The counts were durable when the deliveries were handed out, and the
    // acks after them: nothing is left.
    let engine = open_with(&dir, SyncPolicy::Always);
    assert_eq!(engine.recovery().unwrap().messages, 0);
}
