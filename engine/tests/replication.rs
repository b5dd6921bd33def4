//! Replication's seam: a leader engine hands its records to a
//! `ReplicationSink`, a `ReplicaState` applies them, and a new leader
//! started from that state holds the same queues and messages, keeps every
//! lease in force until its deadline, refuses the old leader's receipts and
//! never repeats a message id. A sink that fails fails the calls whose
//! records it refused, and the engine then refuses writes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[path = "common/held_sink.rs"]
mod held_sink;
use held_sink::{Held, HeldSink};

use leaseq::{
    Backoff, Clock, Engine, Error, LeaseError, ManualClock, QueueConfig, ReceiptError, ReceiveOptions, ReplicaState,
    ReplicationSink,
};

/// A sink that keeps what it was handed, one entry per call, and can be
/// told to refuse.
#[derive(Default)]
struct Recorder {
    calls: Mutex<Vec<Vec<u8>>>,
    refuse: AtomicBool,
}

/// The engine's handle on a shared `Recorder`.
struct Sink(Arc<Recorder>);

impl ReplicationSink for Sink {
    fn replicate(&self, frames: &[u8]) -> Result<(), String> {
        if self.0.refuse.load(Ordering::SeqCst) {
            return Err("no quorum".into());
        }
        self.0.calls.lock().unwrap().push(frames.to_vec());
        Ok(())
    }
}

impl Recorder {
    /// A follower's state: every call applied in order.
    fn state(&self) -> ReplicaState {
        let mut state = ReplicaState::new();
        for frames in self.calls.lock().unwrap().iter() {
            state.apply(frames).expect("the frames decode");
        }
        state
    }
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn leader(clock: &ManualClock, sink: &Arc<Recorder>) -> Engine {
    Engine::builder().clock(clock.clone()).replicated(Sink(sink.clone())).start().expect("start a leader")
}

/// A new leader on a clock that continues the old one's time line.
fn successor(old: &ManualClock, state: ReplicaState, sink: &Arc<Recorder>) -> (ManualClock, Engine) {
    let clock = ManualClock::new();
    clock.advance_to(old.now());
    let engine = Engine::builder().clock(clock.clone()).replicated(Sink(sink.clone())).state(state).start().unwrap();
    (clock, engine)
}

fn payloads(deliveries: &[leaseq::Delivery]) -> Vec<Vec<u8>> {
    let mut all: Vec<Vec<u8>> = deliveries.iter().map(|d| d.payload.to_vec()).collect();
    all.sort();
    all
}

#[test]
fn a_new_leader_keeps_messages_counts_and_leases() {
    let clock = ManualClock::new();
    let sink = Arc::new(Recorder::default());
    let old = leader(&clock, &sink);
    old.create_queue("dlq", QueueConfig::default()).unwrap();
    let jobs = old.create_queue("jobs", QueueConfig::default().max_receives(5).dead_letter_queue("dlq")).unwrap();
    for i in 0..10u8 {
        jobs.send(vec![i]).unwrap();
    }
    let lease = ReceiveOptions::default().visibility(secs(60));
    let got = jobs.receive_with(4, lease).unwrap();
    let by_payload: BTreeMap<u8, &leaseq::Delivery> = got.iter().map(|d| (d.payload[0], d)).collect();
    let held: Vec<u8> = by_payload.keys().copied().collect();
    let (acked, extended, released, plain) = (held[0], held[1], held[2], held[3]);
    jobs.ack(&by_payload[&acked].receipt).unwrap();
    jobs.extend(&by_payload[&extended].receipt, secs(120)).unwrap();
    jobs.release(&by_payload[&released].receipt, secs(30)).unwrap();
    let old_ids: Vec<u64> = got.iter().map(|d| d.id.as_u64()).collect();
    let before = jobs.stats();
    assert_eq!((before.ready, before.delayed, before.in_flight), (6, 1, 2));

    // The old leader is gone; a replica's state starts the new one 1 s later.
    clock.advance(secs(1));
    let state = sink.state();
    assert_eq!(state.queues(), vec!["dlq".to_string(), "jobs".to_string()]);
    assert_eq!(state.messages(), 9);
    drop((jobs, old));
    let (clock, new) = successor(&clock, state, &sink);
    let jobs = new.queue("jobs").unwrap();
    assert_eq!(new.recovery().unwrap().messages, 9);
    // The inherited leases are in flight here too, the release delayed.
    let after = jobs.stats();
    assert_eq!((after.ready, after.delayed, after.in_flight), (6, 1, 2), "the stats agree across the failover");

    // Only the six that were ready are receivable: the two leases and the
    // release delay are kept.
    let first = jobs.receive_with(100, lease).unwrap();
    assert_eq!(first.len(), 6);
    assert!(first.iter().all(|d| !held.contains(&d.payload[0])));
    // The old leader's receipts complete nothing here.
    for receipt in [&by_payload[&plain].receipt, &by_payload[&extended].receipt] {
        assert_eq!(jobs.ack(receipt), Err(LeaseError::InvalidReceipt(ReceiptError::WrongEngine)));
    }
    let ack_all = |deliveries: &[leaseq::Delivery]| deliveries.iter().for_each(|d| jobs.ack(&d.receipt).unwrap());
    ack_all(&first);
    // 30 s after the release the released one is back, its count kept.
    clock.advance(secs(28));
    assert!(jobs.receive(10).unwrap().is_empty());
    clock.advance(secs(1));
    let back = jobs.receive_with(100, lease).unwrap();
    assert_eq!(payloads(&back), vec![vec![released]]);
    assert_eq!(back[0].delivery_count, 2);
    ack_all(&back);
    // At 60 s the plain lease ends; at 120 s the extended one.
    clock.advance(secs(30));
    let back = jobs.receive_with(100, lease).unwrap();
    assert_eq!(payloads(&back), vec![vec![plain]]);
    assert_eq!(back[0].delivery_count, 2);
    ack_all(&back);
    clock.advance(secs(59));
    assert!(jobs.receive(10).unwrap().is_empty(), "the extension is kept to its end");
    clock.advance(secs(1));
    let back = jobs.receive_with(100, lease).unwrap();
    assert_eq!(payloads(&back), vec![vec![extended]]);
    ack_all(&back);
    assert_eq!(jobs.stats().acked, 9);
    // Ids continue above every id the old leader handed out.
    let id = jobs.send(vec![99]).unwrap();
    assert!(old_ids.iter().all(|&old| id.as_u64() > old), "{id:?} after {old_ids:?}");
}

/// An inherited lease ends as a lease of the new leader would: counted in
/// flight until then, and back only after the queue's backoff.
#[test]
fn an_inherited_lease_expires_with_the_queues_backoff() {
    let clock = ManualClock::new();
    let sink = Arc::new(Recorder::default());
    let old = leader(&clock, &sink);
    let q = old.create_queue("q", QueueConfig::default().backoff(Backoff::Fixed(secs(5)))).unwrap();
    q.send(b"job".to_vec()).unwrap();
    assert_eq!(q.receive_with(1, ReceiveOptions::default().visibility(secs(10))).unwrap().len(), 1);
    clock.advance(secs(2));
    let state = sink.state();
    drop((q, old));
    let (clock, new) = successor(&clock, state, &sink);
    let q = new.queue("q").unwrap();
    assert_eq!(q.stats().in_flight, 1);
    // The lease ends at 10 s; the backoff holds the message 5 s more.
    clock.advance(secs(8));
    assert!(q.receive(1).unwrap().is_empty(), "back before the backoff ended");
    assert_eq!((q.stats().in_flight, q.stats().delayed), (0, 1));
    clock.advance(secs(5));
    let back = q.receive(1).unwrap();
    assert_eq!((back.len(), back[0].delivery_count), (1, 2));
}

#[test]
fn a_snapshot_rebuilds_the_same_state() {
    let clock = ManualClock::new();
    let sink = Arc::new(Recorder::default());
    let engine = leader(&clock, &sink);
    let q = engine.create_queue("q", QueueConfig::default().retention(secs(3600))).unwrap();
    q.set_metadata(&b"settings of the application"[..]).unwrap();
    for i in 0..5u8 {
        q.send(vec![i]).unwrap();
    }
    let got = q.receive_with(2, ReceiveOptions::default().visibility(secs(10))).unwrap();
    q.ack(&got[0].receipt).unwrap();
    let state = sink.state();
    let mut rebuilt = ReplicaState::new();
    // A snapshot replaces whatever the state held before.
    rebuilt.apply(&ReplicaState::new().snapshot()).unwrap();
    rebuilt.apply(&state.snapshot()).unwrap();
    assert_eq!((rebuilt.queues(), rebuilt.messages()), (state.queues(), state.messages()));
    assert_eq!(rebuilt.snapshot(), state.snapshot(), "a snapshot of the rebuilt state is the same snapshot");
    let mut again = ReplicaState::new();
    again.apply(&rebuilt.snapshot()).unwrap();
    assert_eq!(again, rebuilt, "equal whatever number of records brought each there");
    drop((q, engine));
    let (clock, new) = successor(&clock, rebuilt, &sink);
    let q = new.queue("q").unwrap();
    assert_eq!(q.config().retention, Some(secs(3600)));
    assert_eq!(&q.metadata()[..], b"settings of the application", "metadata travels in snapshots");
    assert_eq!(q.stats().in_flight, 1, "a lease travels in snapshots as a lease");
    assert_eq!(q.receive(10).unwrap().len(), 3, "the one in flight stays hidden");
    clock.advance(secs(10));
    let back = q.receive(10).unwrap();
    assert_eq!((back.len(), back[0].delivery_count), (1, 2));
}

#[test]
fn bad_frames_are_a_clear_error_that_changes_nothing() {
    let clock = ManualClock::new();
    let sink = Arc::new(Recorder::default());
    let engine = leader(&clock, &sink);
    engine.create_queue("q", QueueConfig::default()).unwrap();
    let mut state = sink.state();
    let before = state.clone();
    let mut frames = sink.calls.lock().unwrap()[0].clone();
    let last = frames.len() - 1;
    frames[last] ^= 1;
    match state.apply(&frames) {
        Err(Error::CorruptLog { offset, .. }) => assert_eq!(offset, 0),
        other => panic!("{other:?}"),
    }
    assert_eq!(state, before);
}

#[test]
fn a_refusing_sink_fails_the_call_and_stops_the_leader() {
    let clock = ManualClock::new();
    let sink = Arc::new(Recorder::default());
    let engine = leader(&clock, &sink);
    let q = engine.create_queue("q", QueueConfig::default()).unwrap();
    q.send("kept").unwrap();
    let got = q.receive_with(1, ReceiveOptions::default().visibility(secs(60))).unwrap();
    sink.refuse.store(true, Ordering::SeqCst);
    match q.send("refused") {
        Err(Error::Storage { reason, payload }) => {
            assert!(reason.contains("no quorum"), "{reason}");
            assert_eq!(payload.as_deref(), Some(&b"refused"[..]), "the payload comes back");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(q.ack(&got[0].receipt), Err(LeaseError::Storage { .. })), "nor is an ack acknowledged");
    assert!(matches!(q.send("later"), Err(Error::Storage { .. })), "a leader that lost its quorum takes nothing more");
    // What the replicas have: the queue and the first message, leased.
    sink.refuse.store(false, Ordering::SeqCst);
    assert_eq!(sink.state().messages(), 1);
}

#[test]
fn a_last_delivery_leased_at_failover_ends_in_the_dead_letter_queue() {
    let clock = ManualClock::new();
    let sink = Arc::new(Recorder::default());
    let old = leader(&clock, &sink);
    old.create_queue("dlq", QueueConfig::default()).unwrap();
    let jobs = old.create_queue("jobs", QueueConfig::default().max_receives(2).dead_letter_queue("dlq")).unwrap();
    jobs.send("poison").unwrap();
    jobs.send("second").unwrap();
    let lease = ReceiveOptions::default().visibility(secs(60));
    // Both delivered twice: the first leases run out, "second" is released
    // at its second delivery (the ceiling: to the dead-letter queue), and
    // "poison"'s last lease is in force at failover.
    let release_second = |got: &[leaseq::Delivery]| {
        let second = got.iter().find(|d| &d.payload[..] == b"second").unwrap();
        jobs.release(&second.receipt, Duration::ZERO).unwrap();
    };
    let first = jobs.receive_with(10, lease).unwrap();
    assert!(first.len() == 2 && first.iter().all(|d| d.delivery_count == 1));
    release_second(&first);
    clock.advance(secs(61));
    let last = jobs.receive_with(10, lease).unwrap();
    assert!(last.len() == 2 && last.iter().all(|d| d.delivery_count == 2));
    release_second(&last);
    let stats = jobs.stats();
    assert_eq!((stats.in_flight, stats.dead_lettered), (1, 1), "second reached the ceiling by release");
    clock.advance(secs(1));
    let state = sink.state();
    drop((jobs, old));
    let (clock, new) = successor(&clock, state, &sink);
    let jobs = new.queue("jobs").unwrap();
    let dlq = new.queue("dlq").unwrap();
    let restored = jobs.stats();
    assert_eq!((restored.in_flight, restored.ready, restored.delayed), (1, 0, 0), "restored in flight: {restored:?}");
    assert_eq!(dlq.stats().ready, 1);
    // Hidden until its lease ends, then it expires to the dead-letter queue
    // rather than being delivered a third time.
    clock.advance(secs(58));
    assert!(jobs.receive(10).unwrap().is_empty());
    clock.advance(secs(1));
    assert!(jobs.receive(10).unwrap().is_empty(), "delivered past max_receives");
    let after = jobs.stats();
    assert_eq!((after.in_flight, after.expired, after.dead_lettered), (0, 1, 1), "{after:?}");
    let dead = dlq.receive_with(10, lease).unwrap();
    let mut bodies: Vec<&[u8]> = dead.iter().map(|d| &d.payload[..]).collect();
    bodies.sort();
    assert_eq!(bodies, vec![&b"poison"[..], &b"second"[..]]);
    let poison = dead.iter().find(|d| &d.payload[..] == b"poison").unwrap();
    assert_eq!(poison.dead_letter.as_ref().map(|r| r.delivery_count), Some(2));
}

/// A sink that panics.
struct Panicking;

impl ReplicationSink for Panicking {
    fn replicate(&self, _frames: &[u8]) -> Result<(), String> {
        panic!("a sink bug");
    }
}

#[test]
fn a_panicking_sink_fails_the_call_instead_of_hanging_it() {
    let engine = Engine::builder().replicated(Panicking).start().unwrap();
    match engine.create_queue("q", QueueConfig::default()) {
        Err(Error::Storage { reason, .. }) => assert!(reason.contains("panicked"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn groups_are_pipelined_and_after_a_failure_no_later_group_is_accepted() {
    let held = Arc::new(Held::default());
    held.accept_all.store(true, Ordering::SeqCst);
    let engine = Engine::builder().replicated(HeldSink(held.clone())).start().unwrap();
    let q = engine.create_queue("q", QueueConfig::default()).unwrap();
    // The first send also reserves a range of ids (a record of its own).
    q.send(&b"warm-up"[..]).unwrap();
    assert_eq!(q.receive(10).unwrap().len(), 1);
    held.accept_all.store(false, Ordering::SeqCst);

    // Two sends, each its own group: the second is started while the first
    // is still pending (a pipeline), and neither returns before its group
    // is settled.
    let first = {
        let q = q.clone();
        std::thread::spawn(move || q.send(&b"first"[..]))
    };
    let group_one = held.nth_started(1);
    let second = {
        let q = q.clone();
        std::thread::spawn(move || q.send(&b"second"[..]))
    };
    let group_two = held.nth_started(2);
    assert!(!first.is_finished() && !second.is_finished(), "a send returned before its group was accepted");
    // The later group succeeds first; the earlier one fails: both sends
    // fail (nothing after a failure is reported accepted), in order.
    group_two.give(Ok(()));
    std::thread::sleep(Duration::from_millis(50));
    assert!(!second.is_finished(), "a group was completed before the one started ahead of it");
    group_one.give(Err("no quorum".into()));
    assert!(matches!(first.join().unwrap(), Err(Error::Storage { .. })));
    assert!(matches!(second.join().unwrap(), Err(Error::Storage { .. })));
    // And the engine refuses from now on, without starting more groups.
    let before = held.started_count();
    assert!(matches!(q.send(&b"third"[..]), Err(Error::Storage { .. })));
    assert_eq!(held.started_count(), before, "a group was started after the failure");
    assert!(matches!(q.receive(10), Err(Error::Storage { .. }) | Ok(_)));
    assert_eq!(q.stats().ready, 0, "a failed send was published");
}

#[test]
fn a_dead_letter_link_set_later_survives_failover_and_snapshots() {
    let clock = ManualClock::new();
    let sink = Arc::new(Recorder::default());
    let old = leader(&clock, &sink);
    let jobs = old.create_queue("jobs", QueueConfig::default().visibility_timeout(secs(5))).unwrap();
    old.create_queue("later-dlq", QueueConfig::default()).unwrap();
    jobs.send(&b"poison"[..]).unwrap();
    jobs.set_dead_letter(Some("later-dlq"), Some(1)).unwrap();
    let state = sink.state();
    let mut rebuilt = ReplicaState::new();
    rebuilt.apply(&state.snapshot()).unwrap();
    drop((jobs, old));
    for (state, how) in [(state, "applied records"), (rebuilt, "a snapshot")] {
        let (clock, new) = successor(&clock, state, &sink);
        let jobs = new.queue("jobs").unwrap();
        assert_eq!(jobs.dead_letter_queue().as_deref(), Some("later-dlq"), "after {how}");
        assert_eq!(jobs.config().max_receives, Some(1), "after {how}");
        assert_eq!(jobs.receive(1).unwrap().len(), 1);
        clock.advance(secs(6));
        let moved = new.queue("later-dlq").unwrap().receive(1).unwrap();
        assert_eq!(&moved[0].payload[..], b"poison", "after {how}");
    }
}
