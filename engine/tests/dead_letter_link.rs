//! `Queue::set_dead_letter`: a queue's dead-letter queue and `max_receives`
//! change while it serves; the change applies to the messages already there
//! at their next expiry or release, a refused change changes nothing, links
//! never form a cycle, and a durable engine keeps the link across restarts
//! and compactions, even one pointing at a queue created after its source.

use std::path::PathBuf;
use std::time::Duration;

use leaseq::{Engine, Error, LeaseError, ManualClock, Queue, QueueConfig, ReceiveOptions, SyncPolicy};

const LEASE: Duration = Duration::from_secs(10);

fn config() -> QueueConfig {
    QueueConfig::default().visibility_timeout(LEASE)
}

/// Receives the one message there, then lets its lease run out.
fn fail_once(clock: &ManualClock, queue: &Queue) -> u32 {
    let got = queue.receive(1).unwrap();
    assert_eq!(got.len(), 1, "expected one ready message");
    clock.advance(LEASE + Duration::from_secs(1));
    got[0].delivery_count
}

fn link_of(queue: &Queue) -> (Option<String>, Option<u32>) {
    let config = queue.config();
    assert_eq!(config.dead_letter_queue, queue.dead_letter_queue(), "config and accessor agree");
    (config.dead_letter_queue, config.max_receives)
}

#[test]
fn a_link_set_later_moves_messages_already_failing() {
    let clock = ManualClock::new();
    let engine = Engine::builder().clock(clock.clone()).build();
    let jobs = engine.create_queue("jobs", config()).unwrap();
    let dlq = engine.create_queue("jobs-dlq", QueueConfig::default()).unwrap();
    jobs.send(&b"poison"[..]).unwrap();
    for expected in 1..=3 {
        assert_eq!(fail_once(&clock, &jobs), expected);
    }
    assert_eq!(dlq.stats().ready, 0, "no link yet: it stays");
    // A ceiling below the count already reached applies at the next failure.
    jobs.set_dead_letter(Some("jobs-dlq"), Some(2)).unwrap();
    assert_eq!(link_of(&jobs), (Some("jobs-dlq".into()), Some(2)));
    assert_eq!(fail_once(&clock, &jobs), 4);
    assert_eq!(jobs.stats().ready + jobs.stats().in_flight, 0, "{:?}", jobs.stats());
    let moved = dlq.receive(1).unwrap();
    assert_eq!(&moved[0].payload[..], b"poison");
    let record = moved[0].dead_letter.as_ref().expect("a dead-letter record");
    assert_eq!(record.source_queue, "jobs");
    assert_eq!(record.delivery_count, 4);
    // Only the attempt after the link was set was remembered.
    assert_eq!(record.attempts.len(), 1, "{record:?}");
    assert_eq!(record.attempts[0].delivery, 4);
    assert_eq!(jobs.stats().dead_lettered, 1);
}

#[test]
fn unlinking_keeps_failures_on_the_queue_and_frees_the_target() {
    let clock = ManualClock::new();
    let engine = Engine::builder().clock(clock.clone()).build();
    let dlq = engine.create_queue("dlq", QueueConfig::default()).unwrap();
    let jobs = engine.create_queue("jobs", config().dead_letter_queue("dlq").max_receives(1)).unwrap();
    assert_eq!(
        engine.delete_queue("dlq").unwrap_err(),
        Error::QueueInUse { name: "dlq".into(), used_by: "jobs".into() }
    );
    jobs.send(&b"m"[..]).unwrap();
    jobs.set_dead_letter(None, None).unwrap();
    assert_eq!(link_of(&jobs), (None, None));
    assert_eq!(fail_once(&clock, &jobs), 1);
    assert_eq!(fail_once(&clock, &jobs), 2, "no ceiling now: it came back");
    let held = jobs.receive(1).unwrap();
    assert_eq!(jobs.dead_letter(&held[0].receipt, "bad"), Err(LeaseError::NoDeadLetterQueue));
    assert_eq!(dlq.stats().ready, 0);
    // A target without a ceiling takes explicit dead-letters only.
    jobs.set_dead_letter(Some("dlq"), None).unwrap();
    jobs.dead_letter(&held[0].receipt, "bad").unwrap();
    assert_eq!(dlq.stats().ready, 1);
    jobs.set_dead_letter(None, None).unwrap();
    engine.delete_queue("dlq").unwrap();
}

#[test]
fn a_refused_change_changes_nothing() {
    let engine = Engine::new();
    let a = engine.create_queue("a", QueueConfig::default()).unwrap();
    let b = engine.create_queue("b", QueueConfig::default().dead_letter_queue("a").max_receives(3)).unwrap();
    engine.create_queue("small", QueueConfig::default().max_payload(16)).unwrap();
    let c = engine.create_queue("c", QueueConfig::default().dead_letter_queue("b").max_receives(3)).unwrap();
    let before = (link_of(&a), link_of(&b), link_of(&c));
    let invalid = |e: Error, field: &str| matches!(e, Error::InvalidConfig { field: f, .. } if f == field);
    assert_eq!(
        b.set_dead_letter(Some("nope"), Some(2)).unwrap_err(),
        Error::DeadLetterQueueNotFound { name: "nope".into() }
    );
    assert_eq!(
        b.set_dead_letter(Some("b"), Some(2)).unwrap_err(),
        Error::DeadLetterCycle { path: vec!["b".into(), "b".into()] }
    );
    // a -> c would close a -> c -> b -> a.
    assert_eq!(
        a.set_dead_letter(Some("c"), Some(2)).unwrap_err(),
        Error::DeadLetterCycle { path: vec!["a".into(), "c".into(), "b".into(), "a".into()] }
    );
    assert!(invalid(b.set_dead_letter(Some("a"), Some(0)).unwrap_err(), "max_receives"));
    assert!(invalid(b.set_dead_letter(None, Some(2)).unwrap_err(), "max_receives"));
    assert!(matches!(b.set_dead_letter(Some("bad name!"), Some(2)).unwrap_err(), Error::InvalidQueueName { .. }));
    let e = b.set_dead_letter(Some("small"), Some(2)).unwrap_err();
    assert!(invalid(e.clone(), "dead_letter_queue") && e.to_string().contains("max_payload"), "{e}");
    assert_eq!((link_of(&a), link_of(&b), link_of(&c)), before);
    // A deleted queue takes no link.
    let gone = engine.create_queue("gone", QueueConfig::default()).unwrap();
    engine.delete_queue("gone").unwrap();
    assert_eq!(gone.set_dead_letter(Some("a"), Some(1)).unwrap_err(), Error::QueueDeleted { name: "gone".into() });
    // Re-pointing along the chain is fine: c -> a directly.
    c.set_dead_letter(Some("a"), Some(5)).unwrap();
    assert_eq!(link_of(&c), (Some("a".into()), Some(5)));
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("leaseq-dead-letter-link-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn open(dir: &PathBuf, clock: &ManualClock, segment: u64) -> Engine {
    Engine::builder()
        .clock(clock.clone())
        .data_dir(dir)
        .sync(SyncPolicy::Never)
        .segment_bytes(segment)
        .open()
        .expect("open the data dir")
}

/// The source is created before its target, so a restore in creation order
/// would meet the link before the queue it names.
#[test]
fn a_link_to_a_later_queue_survives_restarts_and_compaction() {
    let dir = scratch("restart");
    let segment = 64 << 10;
    let clock = ManualClock::new();
    {
        let engine = open(&dir, &clock, segment);
        let jobs = engine.create_queue("jobs", config()).unwrap();
        engine.create_queue("late-dlq", QueueConfig::default()).unwrap();
        jobs.set_dead_letter(Some("late-dlq"), Some(2)).unwrap();
        jobs.send(&b"poison"[..]).unwrap();
        assert_eq!(fail_once(&clock, &jobs), 1);
        engine.flush().unwrap();
    }
    let clock = ManualClock::new();
    {
        let engine = open(&dir, &clock, segment);
        let jobs = engine.queue("jobs").unwrap();
        assert_eq!(link_of(&jobs), (Some("late-dlq".into()), Some(2)), "the link survived a restart");
        // Churn until the log compacts and drops the segment that logged
        // the link, so only a rewritten queue table can carry it.
        let churn = engine.create_queue("churn", QueueConfig::default()).unwrap();
        for _ in 0..1_000 {
            assert!(churn.send_batch((0..19u32).map(|i| i.to_le_bytes().to_vec())).iter().all(Result::is_ok));
            let receipts: Vec<_> = churn.receive(19).unwrap().iter().map(|d| d.receipt).collect();
            assert!(churn.ack_batch(&receipts).iter().all(Result::is_ok));
        }
        engine.flush().unwrap();
        let started = std::time::Instant::now();
        while engine.log_stats().unwrap().compactions == 0 && started.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(engine.log_stats().unwrap().compactions > 0, "{:?}", engine.log_stats());
    }
    let clock = ManualClock::new();
    let engine = open(&dir, &clock, segment);
    let jobs = engine.queue("jobs").unwrap();
    assert_eq!(link_of(&jobs), (Some("late-dlq".into()), Some(2)), "the link survived compaction");
    assert_eq!(
        engine.delete_queue("late-dlq").unwrap_err(),
        Error::QueueInUse { name: "late-dlq".into(), used_by: "jobs".into() }
    );
    // Its delivery count survived too: the next failure is at the ceiling.
    let got = jobs.receive_with(1, ReceiveOptions::new()).unwrap();
    assert_eq!(got[0].delivery_count, 2);
    clock.advance(LEASE + Duration::from_secs(1));
    let dlq = engine.queue("late-dlq").unwrap();
    assert_eq!(&dlq.receive(1).unwrap()[0].payload[..], b"poison");
    // Unlinking is durable as well.
    jobs.set_dead_letter(None, None).unwrap();
    drop((jobs, dlq));
    drop(engine);
    let engine = open(&dir, &ManualClock::new(), segment);
    assert_eq!(link_of(&engine.queue("jobs").unwrap()), (None, None));
    engine.delete_queue("late-dlq").unwrap();
}
