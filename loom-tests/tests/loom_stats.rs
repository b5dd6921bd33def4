//! Stats read while messages move (issue model 8).
//!
//! One thread sends, one receives and acks, one reads `stats()`. Inside the
//! engine, every gauge (ready, delayed, in flight) is an inflow counter minus
//! an outflow counter, and under `cfg(loom)` the engine asserts that the
//! outflow it read never exceeds the inflow (a negative gauge); here the model
//! asserts that no figure in the concurrent snapshot exceeds what happened,
//! and that the final figures are exact.
#![cfg(loom)]

use loom::thread;
use loom_tests::{Bound, Fixture, Outcomes, config, model, try_receive};

#[test]
fn stats_read_concurrently_stay_within_what_happened() {
    static SEEN: Outcomes = Outcomes::new();
    model("stats/concurrent_read", Bound::Preemptions(3), || {
        let fixture = Fixture::new(config(1, 1));
        let sender = {
            let queue = fixture.queue.clone();
            thread::spawn(move || queue.send(&b"m"[..]).is_ok())
        };
        let consumer = {
            let queue = fixture.queue.clone();
            thread::spawn(move || try_receive(&queue).map(|d| queue.ack(&d.receipt).is_ok()))
        };
        let reader = {
            let queue = fixture.queue.clone();
            thread::spawn(move || queue.stats())
        };
        assert!(sender.join().unwrap(), "the queue had room");
        let consumed = consumer.join().unwrap();
        let seen = reader.join().unwrap();

        // One message was sent, received at most once, acked at most once.
        assert!(seen.sent <= 1 && seen.received <= 1 && seen.acked <= 1, "{seen:?}");
        assert!(seen.ready <= 1 && seen.in_flight <= 1 && seen.delayed == 0, "{seen:?}");
        assert_eq!((seen.expired, seen.released, seen.stale_acks), (0, 0, 0), "{seen:?}");

        SEEN.saw(match (consumed.is_some(), seen.sent, seen.acked) {
            (false, ..) => "consumer found nothing",
            (true, 0, _) => "read before the send",
            (true, 1, 0) => "read mid-way",
            (true, _, _) => "read after the ack",
        });
        let done = fixture.queue.stats();
        let received = u64::from(consumed.is_some());
        assert_eq!(consumed, consumed.and(Some(true)), "the consumer's ack was refused");
        assert_eq!((done.sent, done.received, done.acked), (1, received, received), "{done:?}");
        assert_eq!((done.ready, done.in_flight), (1 - received, 0), "{done:?}");
    });
    SEEN.assert_exactly(&["consumer found nothing", "read after the ack", "read before the send", "read mid-way"]);
}
