//! Receivers racing for ready messages, across shards (issue model 4).
//!
//! Invariant: a ready message is handed to exactly one receiver per attempt;
//! a receiver that loses the race gets nothing or another message, never the
//! same one. With two shards the receivers' home shards differ in some
//! executions, so one of them reaches the message by stealing.
#![cfg(loom)]

use loom::thread;
use loom_tests::{Bound, Fixture, Outcomes, config, model, try_receive};

fn spawn_receiver(fixture: &Fixture) -> thread::JoinHandle<Option<leaseq::Delivery>> {
    let queue = fixture.queue.clone();
    thread::spawn(move || try_receive(&queue))
}

#[test]
fn two_receivers_one_message() {
    static SEEN: Outcomes = Outcomes::new();
    model("receive/two_receivers_one_message", Bound::Exhaustive, || {
        let fixture = Fixture::new(config(2, 2));
        let id = fixture.send(b"m");
        let first = spawn_receiver(&fixture);
        let second = spawn_receiver(&fixture);
        let (first, second) = (first.join().unwrap(), second.join().unwrap());
        SEEN.saw(if first.is_some() { "first receiver won" } else { "second receiver won" });
        let got: Vec<_> = [first, second].into_iter().flatten().collect();

        assert_eq!(got.len(), 1, "one ready message, {} deliveries", got.len());
        assert_eq!((got[0].id, got[0].delivery_count), (id, 1));
        let stats = fixture.queue.stats();
        assert_eq!((stats.received, stats.ready, stats.in_flight), (1, 0, 1));
    });
    SEEN.assert_exactly(&["first receiver won", "second receiver won"]);
}

#[test]
fn two_receivers_two_messages_on_two_shards() {
    model("receive/two_receivers_two_shards", Bound::Exhaustive, || {
        let fixture = Fixture::new(config(2, 2));
        // One slot per shard: the second send lands on the other shard.
        let ids = [fixture.send(b"m0"), fixture.send(b"m1")];
        let first = spawn_receiver(&fixture);
        let second = spawn_receiver(&fixture);
        let (first, second) = (first.join().unwrap(), second.join().unwrap());

        let (first, second) = (first.expect("two ready messages"), second.expect("two ready messages"));
        assert_ne!(first.id, second.id, "one message delivered twice");
        for d in [&first, &second] {
            assert!(ids.contains(&d.id));
            assert_eq!(d.delivery_count, 1);
        }
        assert_eq!(fixture.queue.stats().received, 2);
    });
}
