//! Release racing a receive on another shard and the lease's expiry (issue
//! model 5).
//!
//! Invariant: a release either ends the attempt (the message is ready again,
//! once) or is refused because the attempt already ended (`Expired` by the
//! clock, `Stale` after a redelivery); the message is never both released and
//! expired, never delivered twice for one attempt, and never lost.
#![cfg(loom)]

use loom::thread;
use loom_tests::{Bound, Fixture, LeaseError, Outcomes, VISIBILITY, config, model, try_receive};

/// The releaser's message sits on the main thread's home shard; the receiver's
/// home is that shard or the other one (then it steals).
#[test]
fn release_vs_stealing_receive() {
    static SEEN: Outcomes = Outcomes::new();
    model("release/vs_stealing_receive", Bound::Exhaustive, || {
        let fixture = Fixture::new(config(2, 2));
        let id = fixture.send(b"m");
        let d = fixture.receive_one();

        let releaser = {
            let queue = fixture.queue.clone();
            thread::spawn(move || queue.release(&d.receipt, std::time::Duration::ZERO))
        };
        let receiver = {
            let queue = fixture.queue.clone();
            thread::spawn(move || try_receive(&queue))
        };
        assert_eq!(releaser.join().unwrap(), Ok(()), "the lease was held and the clock did not move");
        let stolen = receiver.join().unwrap();

        let stats = fixture.queue.stats();
        assert_eq!(stats.released, 1);
        match stolen {
            Some(again) => {
                SEEN.saw("received the released message");
                assert_eq!((again.id, again.delivery_count), (id, 2));
                assert_eq!((stats.ready, stats.in_flight), (0, 1));
                fixture.queue.ack(&again.receipt).expect("the receiver holds the only lease");
                assert!(fixture.drain().is_empty());
            }
            None => {
                SEEN.saw("looked before the release");
                assert_eq!((stats.ready, stats.in_flight), (1, 0), "released but not ready");
                let left = fixture.drain();
                assert_eq!(left.len(), 1, "the released message was lost");
                assert_eq!((left[0].id, left[0].delivery_count), (id, 2));
            }
        }
    });
    SEEN.assert_exactly(&["looked before the release", "received the released message"]);
}

/// One thread releases; the other moves the clock to the deadline and
/// receives (applying the expiry). Exactly one of them ends the attempt; the
/// receiver gets the message unless a release still in progress had not yet
/// made it ready (then the release succeeded and the message is ready after).
#[test]
fn release_vs_expiry() {
    static SEEN: Outcomes = Outcomes::new();
    model("release/vs_expiry", Bound::Exhaustive, || {
        let fixture = Fixture::new(config(1, 1));
        let id = fixture.send(b"m");
        let d = fixture.receive_one();

        let releaser = {
            let queue = fixture.queue.clone();
            thread::spawn(move || queue.release(&d.receipt, std::time::Duration::ZERO))
        };
        let expirer = {
            let fixture = fixture.clone();
            thread::spawn(move || {
                fixture.advance(VISIBILITY);
                try_receive(&fixture.queue)
            })
        };
        let released = releaser.join().unwrap();
        let again = match expirer.join().unwrap() {
            Some(again) => again,
            None => {
                // The receive ran while the release held the lease or had not
                // yet queued the message: a linearisable "empty" only if the
                // release then succeeded and left the message ready.
                assert_eq!(released, Ok(()), "expired but not redelivered to the receiver");
                SEEN.saw("looked while the release was in progress");
                assert_eq!(fixture.queue.stats().ready, 1, "released but not ready");
                fixture.receive_one()
            }
        };

        assert!(
            matches!(released, Ok(()) | Err(LeaseError::Expired | LeaseError::Stale)),
            "unexpected release result {released:?}"
        );
        assert_eq!((again.id, again.delivery_count), (id, 2));
        let stats = fixture.queue.stats();
        assert_eq!(stats.released + stats.expired, 1, "the attempt ended twice: {stats:?}");
        assert_eq!(stats.released, u64::from(released.is_ok()));
        SEEN.saw(match released {
            Ok(()) => "released",
            Err(LeaseError::Expired) => "expired, release refused as expired",
            Err(_) => "expired, release refused as stale",
        });
        fixture.queue.ack(&again.receipt).expect("the receiver holds the only lease");
        assert!(fixture.drain().is_empty(), "one message, one copy");
    });
    SEEN.assert_exactly(&[
        "expired, release refused as expired",
        "expired, release refused as stale",
        "looked while the release was in progress",
        "released",
    ]);
}
