//! Receipts of an expired attempt racing the redelivery that replaced it
//! (issue model 2).
//!
//! Invariant: a receipt names one attempt. Once the message was delivered
//! again, the old attempt's receipt is `Stale` and can neither ack nor touch
//! the new delivery; the new receipt acks; the message is removed exactly
//! once.
#![cfg(loom)]

use loom::thread;
use loom_tests::{Bound, Fixture, LeaseError, Outcomes, VISIBILITY, config, model, try_receive};

/// A's lease ran out and B already holds the message: A's and B's acks race.
#[test]
fn stale_ack_races_current_ack() {
    model("redelivery/stale_vs_current_ack", Bound::Exhaustive, || {
        let fixture = Fixture::new(config(1, 1));
        let id = fixture.send(b"m");
        let a = fixture.receive_one();
        fixture.advance(VISIBILITY);
        let b = fixture.receive_one();
        assert_eq!((b.id, b.delivery_count), (id, 2));

        let ack_a = {
            let queue = fixture.queue.clone();
            thread::spawn(move || queue.ack(&a.receipt))
        };
        let ack_b = {
            let queue = fixture.queue.clone();
            thread::spawn(move || queue.ack(&b.receipt))
        };
        assert_eq!(ack_a.join().unwrap(), Err(LeaseError::Stale), "an older attempt's receipt acked");
        assert_eq!(ack_b.join().unwrap(), Ok(()), "the current attempt's receipt was refused");

        let stats = fixture.queue.stats();
        assert_eq!((stats.acked, stats.stale_acks, stats.late_acks), (1, 1, 0));
        assert!(fixture.drain().is_empty(), "the message is gone exactly once");
    });
}

/// A's lease ran out; A acks late while B receives (applying the expiry) and
/// acks whatever it got.
#[test]
fn late_ack_races_redelivery() {
    static SEEN: Outcomes = Outcomes::new();
    model("redelivery/late_ack_vs_redelivery", Bound::Exhaustive, || {
        let fixture = Fixture::new(config(1, 1));
        let id = fixture.send(b"m");
        let a = fixture.receive_one();
        fixture.advance(VISIBILITY);

        let ack_a = {
            let queue = fixture.queue.clone();
            thread::spawn(move || queue.ack(&a.receipt))
        };
        let consumer_b = {
            let queue = fixture.queue.clone();
            thread::spawn(move || try_receive(&queue).map(|b| (b.id, b.delivery_count, queue.ack(&b.receipt))))
        };
        let a_acked = ack_a.join().unwrap();
        let b_got = consumer_b.join().unwrap();

        match (&a_acked, &b_got) {
            // A was first: a late ack, accepted because nobody received it since.
            (Ok(()), None) => {
                assert_eq!(fixture.queue.stats().late_acks, 1);
                SEEN.saw("late ack won");
            }
            // B was first: A's receipt is stale, B's acks.
            (Err(LeaseError::Stale), Some((got, 2, Ok(())))) => {
                assert_eq!(*got, id);
                SEEN.saw("redelivery won");
            }
            other => panic!("exactly one attempt may complete the message, got {other:?}"),
        }
        assert_eq!(fixture.queue.stats().acked, 1);
        assert!(fixture.drain().is_empty(), "the message is gone exactly once");
    });
    SEEN.assert_exactly(&["late ack won", "redelivery won"]);
}
