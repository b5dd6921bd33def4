//! The async writes (`send_async`, `send_batch_async`, `ack_async`,
//! `ack_batch_async`, `extend_async`, `release_async`): the work is done when
//! the method is called, the future waits for its record without blocking
//! the thread, and it resolves to what the blocking method returns. A sent
//! message is receivable only once its record is accepted; a failed record
//! hands the payload back and publishes nothing; a dropped send future still
//! finishes its send. Groups are held by a test sink (a replicated engine),
//! so every step is deterministic.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::Duration;

#[path = "common/held_sink.rs"]
mod held_sink;
use held_sink::{CountingWaker, Held, HeldSink, block_on, poll_once};

use leaseq::{Engine, Error, LeaseError, Queue, QueueConfig, ReceiveOptions, SendOptions, SyncPolicy};

/// A replicated engine whose groups wait for the test, with one queue that
/// has already made its first send (which reserves ids: a record of its
/// own) and received it.
fn held_queue() -> (Arc<Held>, Engine, Queue) {
    let held = Arc::new(Held::default());
    held.accept_all.store(true, Ordering::SeqCst);
    let engine = Engine::builder().replicated(HeldSink(held.clone())).start().unwrap();
    let q = engine.create_queue("q", QueueConfig::default()).unwrap();
    q.send(&b"warm-up"[..]).unwrap();
    let warm = q.receive(10).unwrap();
    q.ack(&warm[0].receipt).unwrap();
    held.accept_all.store(false, Ordering::SeqCst);
    (held, engine, q)
}

#[test]
fn a_sent_message_is_receivable_only_once_its_record_is_accepted() {
    let (held, _engine, q) = held_queue();
    let waker = CountingWaker::new();
    let mut sending = q.send_async(&b"a"[..], SendOptions::default());
    assert!(poll_once(&mut sending, &waker).is_pending());
    let group = held.nth_started(1);
    assert!(q.receive(10).unwrap().is_empty(), "a message was receivable before its record was accepted");
    assert_eq!(q.stats().ready, 0);
    assert!(poll_once(&mut sending, &waker).is_pending());

    group.give(Ok(()));
    waker.wait_woken();
    let Poll::Ready(Ok(id)) = poll_once(&mut sending, &waker) else { panic!("the send did not resolve to its id") };
    held.accept_all.store(true, Ordering::SeqCst);
    let got = q.receive(10).unwrap();
    assert_eq!((got.len(), got[0].id, &got[0].payload[..]), (1, id, &b"a"[..]));
}

#[test]
fn a_failed_record_hands_the_payload_back_and_publishes_nothing() {
    let (held, _engine, q) = held_queue();
    let waker = CountingWaker::new();
    let mut sending = q.send_async(&b"lost"[..], SendOptions::default());
    assert!(poll_once(&mut sending, &waker).is_pending());
    held.nth_started(1).give(Err("no quorum".into()));
    waker.wait_woken();
    match poll_once(&mut sending, &waker) {
        Poll::Ready(Err(Error::Storage { payload: Some(payload), .. })) => assert_eq!(&payload[..], b"lost"),
        other => panic!("expected a storage error with the payload, got {other:?}"),
    }
    let stats = q.stats();
    assert_eq!((stats.ready, stats.in_flight, stats.delayed), (0, 0, 0));
    // The engine refuses writes after a failed group, as the blocking send does.
    assert!(matches!(block_on(q.send_async(&b"next"[..], SendOptions::default())), Err(Error::Storage { .. })));
}

#[test]
fn a_dropped_send_future_still_publishes_its_message() {
    let (held, _engine, q) = held_queue();
    let waker = CountingWaker::new();
    let mut sending = q.send_async(&b"kept"[..], SendOptions::default());
    assert!(poll_once(&mut sending, &waker).is_pending());
    let group = held.nth_started(1);
    let giver = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        group.give(Ok(()));
    });
    // The drop waits for the record, then publishes.
    drop(sending);
    giver.join().unwrap();
    held.accept_all.store(true, Ordering::SeqCst);
    let got = q.receive(10).unwrap();
    assert_eq!(got.iter().map(|d| &d.payload[..]).collect::<Vec<_>>(), vec![&b"kept"[..]]);
}

#[test]
fn a_batch_is_one_group_published_together() {
    let (held, _engine, q) = held_queue();
    let waker = CountingWaker::new();
    let mut sending = q.send_batch_async([&b"x"[..], &b"y"[..], &b"z"[..]]);
    assert!(poll_once(&mut sending, &waker).is_pending());
    held.nth_started(1);
    assert_eq!(q.stats().ready, 0);
    // The replicator may split the batch's records over groups: none is
    // published until the last one's group is in.
    let results = loop {
        held.settle_all(Ok(()));
        if let Poll::Ready(results) = poll_once(&mut sending, &waker) {
            break results;
        }
        assert_eq!(q.stats().ready, 0, "part of a batch was published before all of it was accepted");
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(results.len(), 3);
    assert!(results.iter().all(Result::is_ok));
    held.accept_all.store(true, Ordering::SeqCst);
    let got = q.receive(10).unwrap();
    assert_eq!(got.len(), 3);

    // Acked as one batch: applied at once, resolved once the group is in.
    held.accept_all.store(false, Ordering::SeqCst);
    let receipts: Vec<_> = got.iter().map(|d| d.receipt).collect();
    let started = held.started_count();
    let mut acking = q.ack_batch_async(&receipts);
    let waker = CountingWaker::new();
    assert!(poll_once(&mut acking, &waker).is_pending());
    assert_eq!(q.stats().in_flight, 0, "the acks were not applied when the call returned");
    held.nth_started(started + 1);
    let acked = loop {
        held.settle_all(Ok(()));
        if let Poll::Ready(acked) = poll_once(&mut acking, &waker) {
            break acked;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(acked, vec![Ok(()), Ok(()), Ok(())]);
}

#[test]
fn lease_calls_resolve_after_their_record_and_report_its_failure() {
    let (held, _engine, q) = held_queue();
    held.accept_all.store(true, Ordering::SeqCst);
    for payload in [&b"ack"[..], &b"extend"[..], &b"release"[..], &b"fail"[..]] {
        q.send(payload).unwrap();
    }
    let got = q.receive_with(10, ReceiveOptions::default().visibility(Duration::from_secs(30))).unwrap();
    let by = |p: &[u8]| got.iter().find(|d| &d.payload[..] == p).unwrap().receipt;
    held.accept_all.store(false, Ordering::SeqCst);

    let mut acking = q.ack_async(&by(b"ack"));
    let mut extending = q.extend_async(&by(b"extend"), Duration::from_secs(90));
    let mut releasing = q.release_async(&by(b"release"), Duration::ZERO);
    let waker = CountingWaker::new();
    assert!(poll_once(&mut acking, &waker).is_pending());
    assert!(poll_once(&mut extending, &waker).is_pending());
    assert!(poll_once(&mut releasing, &waker).is_pending());
    // Applied already: the released message is ready, the acked one gone.
    let stats = q.stats();
    assert_eq!((stats.ready, stats.in_flight), (1, 2));
    // The three records may share groups; settle whatever was started.
    held.nth_started(1);
    let (mut acked, mut extended, mut released) = (None, None, None);
    while acked.is_none() || extended.is_none() || released.is_none() {
        held.settle_all(Ok(()));
        if acked.is_none() {
            acked = ready(poll_once(&mut acking, &waker));
        }
        if extended.is_none() {
            extended = ready(poll_once(&mut extending, &waker));
        }
        if released.is_none() {
            released = ready(poll_once(&mut releasing, &waker));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(acked, Some(Ok(())));
    assert!(matches!(extended, Some(Ok(_))));
    assert_eq!(released, Some(Ok(())));
    // A refused call is refused at once, with nothing to wait for.
    assert_eq!(block_on(q.ack_async(&by(b"ack"))), Err(LeaseError::Stale));

    let started = held.started_count();
    let mut failing = q.ack_async(&by(b"fail"));
    assert!(poll_once(&mut failing, &waker).is_pending());
    held.nth_started(started + 1).give(Err("no quorum".into()));
    assert!(matches!(block_on(failing), Err(LeaseError::Storage { .. })));
}

#[test]
fn without_a_log_every_future_is_ready_and_matches_the_blocking_call() {
    let engine = Engine::new();
    let q = engine.create_queue("q", QueueConfig::default().max_payload(8)).unwrap();
    let waker = CountingWaker::new();
    let Poll::Ready(Ok(id)) = poll_once(&mut q.send_async(&b"one"[..], SendOptions::default()), &waker) else {
        panic!("an in-memory send was not ready at once")
    };
    assert!(matches!(
        block_on(q.send_async(&b"far too large"[..], SendOptions::default())),
        Err(Error::MessageTooLarge { size: 13, max: 8 })
    ));
    let delayed = SendOptions::from(Duration::from_secs(100 * 365 * 24 * 3600));
    assert!(matches!(block_on(q.send_async(&b"late"[..], delayed)), Err(Error::DelayTooLong { .. })));
    let oversized = vec![&b"m"[..]; leaseq::MAX_BATCH + 1];
    let refused = block_on(q.send_batch_async(oversized));
    assert!(refused.iter().all(|r| matches!(r, Err(Error::InvalidBatchSize { .. }))));
    assert_eq!(q.stats().ready, 1, "a refused call changed the queue");

    let got = q.receive(1).unwrap();
    assert_eq!(got[0].id, id);
    let Poll::Ready(acked) = poll_once(&mut q.ack_async(&got[0].receipt), &waker) else {
        panic!("an in-memory ack was not ready at once")
    };
    assert_eq!(acked, Ok(()));
    assert_eq!(block_on(q.ack_async(&got[0].receipt)), Err(LeaseError::Stale));
    engine.delete_queue("q").unwrap();
    assert!(matches!(block_on(q.send_async(&b"x"[..], SendOptions::default())), Err(Error::QueueDeleted { .. })));
}

#[test]
fn many_sends_in_flight_from_one_thread_share_syncs() {
    let dir = std::env::temp_dir().join(format!("leaseq-async-writes-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let engine = Engine::builder().data_dir(&dir).sync(SyncPolicy::Always).open().unwrap();
    let q = engine.create_queue("q", QueueConfig::default()).unwrap();
    let before = engine.log_stats().unwrap().syncs;
    // One thread, 200 sends in flight at once: with the blocking send that
    // is 200 syncs one after another; here the records share group commits.
    let sending: Vec<_> = (0..200u32).map(|i| q.send_async(i.to_be_bytes(), SendOptions::default())).collect();
    let ids: Vec<_> = sending.into_iter().map(|f| block_on(f).unwrap()).collect();
    let syncs = engine.log_stats().unwrap().syncs - before;
    assert!(syncs < 100, "200 sends in flight took {syncs} syncs");
    assert_eq!(q.stats().ready, 200);
    drop((q, engine));

    // And they are durable: a reopened engine has every one.
    let engine = Engine::builder().data_dir(&dir).open().unwrap();
    let q = engine.queue("q").unwrap();
    let mut got = Vec::new();
    while let Ok(batch) = q.receive(leaseq::MAX_BATCH) {
        if batch.is_empty() {
            break;
        }
        got.extend(batch.into_iter().map(|d| d.id));
    }
    got.sort();
    let mut want = ids;
    want.sort();
    assert_eq!(got, want);
    drop((q, engine));
    let _ = std::fs::remove_dir_all(&dir);
}

fn ready<T>(poll: Poll<T>) -> Option<T> {
    match poll {
        Poll::Ready(out) => Some(out),
        Poll::Pending => None,
    }
}
