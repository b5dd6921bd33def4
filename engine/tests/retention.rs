//! Retention (`QueueConfig::retention`, `Queue::set_retention`): a message
//! that outlived its queue's retention is never delivered again and is
//! counted in `retention_dropped`, whatever state it was in; one in flight
//! keeps its lease until it ends. All on a `ManualClock`, so every boundary
//! is exact.

use std::path::PathBuf;
use std::time::Duration;

use leaseq::{Clock, Engine, Error, LeaseError, ManualClock, Queue, QueueConfig, ReceiveOptions, SyncPolicy};

const RETENTION: Duration = Duration::from_secs(60);
const NANO: Duration = Duration::from_nanos(1);

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn setup(config: QueueConfig) -> (ManualClock, Engine, Queue) {
    let clock = ManualClock::new();
    let engine = Engine::builder().clock(clock.clone()).default_shards(2).build();
    let queue = engine.create_queue("jobs", config).unwrap();
    (clock, engine, queue)
}

fn kept() -> QueueConfig {
    QueueConfig::default().retention(RETENTION)
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("leaseq-retention-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn a_ready_message_lives_exactly_its_retention() {
    let (clock, _engine, q) = setup(kept());
    q.send("old").unwrap();
    clock.advance(secs(30));
    q.send("young").unwrap();
    clock.advance(RETENTION - secs(30) - NANO);
    let s = q.stats();
    assert_eq!((s.ready, s.retention_dropped), (2, 0), "one nanosecond before the end both are here");
    assert_eq!(s.oldest_ready_age, Some(RETENTION - NANO));
    clock.advance(NANO);
    let got = q.receive(10).unwrap();
    assert_eq!(got.len(), 1, "the old one is gone at its retention");
    assert_eq!(&got[0].payload[..], b"young");
    let s = q.stats();
    assert_eq!((s.ready, s.in_flight, s.retention_dropped, s.sent), (0, 1, 1, 2));
}

#[test]
fn stats_drop_what_nobody_received() {
    let (clock, _engine, q) = setup(kept());
    for i in 0..100u32 {
        q.send(i.to_be_bytes().to_vec()).unwrap();
    }
    clock.advance(RETENTION);
    let s = q.stats();
    assert_eq!((s.ready, s.retention_dropped, s.oldest_ready_age), (0, 100, None));
    assert!(q.receive(10).unwrap().is_empty());
}

#[test]
fn an_in_flight_message_keeps_its_lease_and_goes_when_it_ends() {
    let (clock, _engine, q) = setup(kept());
    q.send("acked").unwrap();
    q.send("expires").unwrap();
    q.send("released").unwrap();
    clock.advance(RETENTION - secs(1));
    let options = ReceiveOptions::default().visibility(secs(30));
    let got = q.receive_with(3, options).unwrap();
    assert_eq!(got.len(), 3);
    clock.advance(secs(10));
    let s = q.stats();
    assert_eq!((s.in_flight, s.retention_dropped), (3, 0), "leases in force outlast the retention");
    let by_payload = |p: &[u8]| got.iter().find(|d| &d.payload[..] == p).unwrap();
    q.ack(&by_payload(b"acked").receipt).expect("the ack of a lease in force works past the retention");
    q.release(&by_payload(b"released").receipt, Duration::ZERO).unwrap();
    assert_eq!(q.stats().retention_dropped, 1, "a released message past its retention is dropped");
    clock.advance(secs(30));
    let s = q.stats();
    assert_eq!((s.in_flight, s.ready, s.expired, s.released, s.acked), (0, 0, 1, 1, 1));
    assert_eq!(s.retention_dropped, 2, "the expired one is dropped instead of redelivered");
    assert!(q.receive(10).unwrap().is_empty());
    // Its receipt is stale now: the message is gone.
    assert_eq!(q.ack(&by_payload(b"expires").receipt), Err(LeaseError::Stale));
}

#[test]
fn a_late_ack_after_the_retention_is_stale() {
    let (clock, _engine, q) = setup(kept());
    q.send("m").unwrap();
    let got = q.receive_with(1, ReceiveOptions::default().visibility(secs(10))).unwrap();
    clock.advance(secs(20));
    // Expired and ready again: a late ack would still be accepted now...
    assert_eq!(q.extend(&got[0].receipt, secs(1)), Err(LeaseError::Expired));
    clock.advance(RETENTION);
    // ...but past the retention the message is gone, met or not.
    assert_eq!(q.extend(&got[0].receipt, secs(1)), Err(LeaseError::Stale));
    assert_eq!(q.ack(&got[0].receipt), Err(LeaseError::Stale));
    let s = q.stats();
    assert_eq!((s.acked, s.retention_dropped, s.ready), (0, 1, 0));
}

#[test]
fn a_delay_that_ends_past_the_retention_delivers_nothing() {
    let (clock, _engine, q) = setup(kept().max_delay(secs(900)));
    q.send_with("late", secs(90)).unwrap();
    q.send_with("soon", secs(10)).unwrap();
    clock.advance(secs(60));
    let s = q.stats();
    assert_eq!((s.delayed, s.retention_dropped), (0, 2), "delayed messages age too");
    clock.advance(secs(60));
    assert!(q.receive(10).unwrap().is_empty());
}

#[test]
fn a_full_queue_makes_room_from_what_outlived_the_retention() {
    let (clock, _engine, q) = setup(kept().max_messages(2));
    q.send("a").unwrap();
    q.send("b").unwrap();
    assert!(matches!(q.send("c"), Err(Error::QueueFull { .. })));
    clock.advance(RETENTION);
    q.send("c").expect("the old messages hold no room");
    let s = q.stats();
    assert_eq!((s.ready, s.retention_dropped), (1, 2));
}

#[test]
fn purge_counts_only_what_was_still_there() {
    let (clock, _engine, q) = setup(kept());
    q.send("old").unwrap();
    clock.advance(secs(59));
    q.send("new").unwrap();
    clock.advance(secs(1));
    assert_eq!(q.purge().unwrap(), 1);
    let s = q.stats();
    assert_eq!((s.purged, s.retention_dropped, s.ready), (1, 1, 0));
}

#[test]
fn retention_counts_from_the_arrival_on_each_queue() {
    let clock = ManualClock::new();
    let engine = Engine::builder().clock(clock.clone()).build();
    let dlq = engine.create_queue("dlq", kept()).unwrap();
    let jobs = engine.create_queue("jobs", kept().max_receives(1).dead_letter_queue("dlq")).unwrap();
    jobs.send("poison").unwrap();
    clock.advance(secs(50));
    let got = jobs.receive(1).unwrap();
    jobs.dead_letter(&got[0].receipt, "bad").unwrap();
    clock.advance(secs(50));
    // 100 s after its send, 50 s after it arrived on the dead-letter queue.
    assert_eq!(dlq.stats().ready, 1);
    engine.redrive("dlq", "jobs", 10).unwrap();
    clock.advance(secs(59));
    assert_eq!(jobs.stats().ready, 1, "a redriven message starts a new retention here");
    clock.advance(secs(1));
    let s = jobs.stats();
    assert_eq!((s.ready, s.retention_dropped), (0, 1));
}

#[test]
fn set_retention_applies_to_what_is_there_and_never_revives() {
    let (clock, _engine, q) = setup(QueueConfig::default());
    assert_eq!(q.config().retention, None);
    q.send("a").unwrap();
    clock.advance(secs(120));
    q.send("b").unwrap();
    q.set_retention(Some(RETENTION)).unwrap();
    assert_eq!(q.config().retention, Some(RETENTION));
    let s = q.stats();
    assert_eq!((s.ready, s.retention_dropped), (1, 1), "a shorter period drops what it leaves past it");
    clock.advance(RETENTION);
    // Past the 60 s period: gone, even though nothing has looked yet...
    q.set_retention(None).unwrap();
    // ...so removing the period does not bring it back.
    assert!(q.receive(10).unwrap().is_empty());
    assert_eq!(q.stats().retention_dropped, 2);
    for bad in [Duration::ZERO, Duration::from_secs(366 * 86_400)] {
        match q.set_retention(Some(bad)) {
            Err(Error::InvalidConfig { field: "retention", .. }) => {}
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    assert_eq!(q.config().retention, None, "a refused change changes nothing");
}

#[test]
fn a_restart_keeps_each_message_s_arrival_and_its_retention() {
    let dir = scratch("restart");
    let clock = ManualClock::new();
    let open = |clock: &ManualClock| {
        Engine::builder().clock(clock.clone()).data_dir(&dir).sync(SyncPolicy::Never).open().unwrap()
    };
    let engine = open(&clock);
    let q = engine.create_queue("jobs", kept()).unwrap();
    let other = engine.create_queue("other", QueueConfig::default()).unwrap();
    other.set_retention(Some(secs(20))).unwrap();
    q.send("first").unwrap();
    other.send("x").unwrap();
    clock.advance(secs(30));
    q.send("second").unwrap();
    let now = clock.now();
    drop((q, other, engine));

    // Reopened 10 s later on the same time line: "other"'s retention (set
    // after creation) came back from the log, and its message, 40 s old, is
    // dropped at open.
    let clock = ManualClock::new();
    clock.advance_to(now);
    clock.advance(secs(10));
    let engine = open(&clock);
    let report = engine.recovery().unwrap().clone();
    assert_eq!((report.messages, report.retention_dropped), (2, 1));
    let q = engine.queue("jobs").unwrap();
    assert_eq!(engine.queue("other").unwrap().config().retention, Some(secs(20)));
    assert_eq!(q.stats().oldest_ready_age, Some(secs(40)), "ages count from the send, not the open");
    clock.advance(secs(20));
    let got = q.receive(10).unwrap();
    assert_eq!(got.len(), 1, "the first send reached its retention 60 s after it was sent");
    assert_eq!(&got[0].payload[..], b"second");
    drop((q, engine));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_open_that_drops_more_than_the_writers_backlog_holds_does_not_stall() {
    // The open's restore records every drop past the retention before the
    // log writer starts; the writer's backlog holds 131,072 records
    // (`journal.rs`, BACKLOG_CAPACITY), so this many drops overflow it.
    const MESSAGES: usize = 140_000;
    let dir = scratch("overflow");
    let clock = ManualClock::new();
    let open = |clock: &ManualClock| {
        Engine::builder().clock(clock.clone()).data_dir(&dir).sync(SyncPolicy::Never).open().unwrap()
    };
    let engine = open(&clock);
    let q = engine.create_queue("jobs", kept().max_messages(MESSAGES)).unwrap();
    for _ in 0..MESSAGES / 1000 {
        assert!(q.send_batch(vec!["x"; 1000]).iter().all(Result::is_ok));
    }
    let now = clock.now();
    drop((q, engine));

    let clock = ManualClock::new();
    clock.advance_to(now);
    clock.advance(RETENTION);
    let reopened = {
        let (dir, clock) = (dir.clone(), clock.clone());
        std::thread::spawn(move || {
            let engine = Engine::builder().clock(clock).data_dir(&dir).sync(SyncPolicy::Never).open().unwrap();
            let report = engine.recovery().unwrap().clone();
            engine.flush().unwrap();
            report
        })
    };
    let started = std::time::Instant::now();
    while !reopened.is_finished() {
        assert!(started.elapsed() < Duration::from_secs(120), "the open stalled on a full backlog");
        std::thread::sleep(Duration::from_millis(10));
    }
    let report = reopened.join().unwrap();
    assert_eq!((report.messages, report.retention_dropped), (0, MESSAGES as u64));
    // The drops were written: the next open finds nothing to replay.
    let engine = open(&clock);
    assert_eq!(engine.recovery().unwrap().messages, 0u64);
    assert_eq!(engine.queue("jobs").unwrap().stats().ready, 0);
    drop(engine);
    let _ = std::fs::remove_dir_all(&dir);
}
