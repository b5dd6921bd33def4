//! Ack racing the expiry of the same lease (issue model 1).
//!
//! One message is in flight with receipt `r`. One thread acks `r`; the other
//! moves the clock to the lease's deadline and receives, which applies the
//! due expiry and may redeliver the message to itself. Invariant: exactly one
//! of {the ack succeeds, the message is delivered again} happens, never both
//! and never neither; an ack after the deadline succeeds only while nobody
//! received the message again (the late-ack rule) and is refused as
//! `Expired` under `LateAck::Reject`.
#![cfg(loom)]

use loom::thread;
use loom_tests::{Bound, Fixture, LateAck, LeaseError, Outcomes, VISIBILITY, config, model, try_receive};

fn ack_vs_expiry(late_ack: LateAck, seen: &Outcomes) {
    let fixture = Fixture::new(config(1, 1).late_ack(late_ack));
    let id = fixture.send(b"m");
    let first = fixture.receive_one();

    let (acked, redelivered) = fixture.race_ack_with_expiry(first.receipt);

    match (&acked, &redelivered) {
        (Ok(()), None) if fixture.queue.stats().late_acks == 1 => seen.saw("acked late"),
        (Ok(()), None) => seen.saw("acked on time"),
        (Err(LeaseError::Stale), Some(d)) => {
            assert_eq!((d.id, d.delivery_count), (id, 2), "the redelivery is the same message's second attempt");
            seen.saw("redelivered, ack stale");
        }
        (Err(LeaseError::Expired), Some(_)) if late_ack == LateAck::Reject => seen.saw("redelivered, late ack refused"),
        other => panic!("ack and expiry must have exactly one winner, got {other:?}"),
    }
    let stats = fixture.queue.stats();
    assert_eq!(stats.acked, u64::from(acked.is_ok()));
    assert_eq!(stats.received, 1 + u64::from(redelivered.is_some()));
    let left = fixture.drain();
    assert_eq!(left.len(), usize::from(redelivered.is_some()), "an acked message never comes back");
}

#[test]
fn ack_vs_expiry_late_ack_accepted() {
    static SEEN: Outcomes = Outcomes::new();
    model("ack_vs_expiry/accept", Bound::Exhaustive, || ack_vs_expiry(LateAck::AcceptIfNotRedelivered, &SEEN));
    SEEN.assert_exactly(&["acked late", "acked on time", "redelivered, ack stale"]);
}

#[test]
fn ack_vs_expiry_late_ack_rejected() {
    static SEEN: Outcomes = Outcomes::new();
    model("ack_vs_expiry/reject", Bound::Exhaustive, || ack_vs_expiry(LateAck::Reject, &SEEN));
    SEEN.assert_exactly(&["acked on time", "redelivered, ack stale", "redelivered, late ack refused"]);
}

/// The lease expired into a backoff delay (`Delayed|EXPIRED`); a late ack
/// races the delay's end (the maturing timer) and a receive. Invariant:
/// exactly one of {the late ack succeeds, the message is delivered again}.
#[test]
fn late_ack_vs_backoff_maturing() {
    static SEEN: Outcomes = Outcomes::new();
    model("ack_vs_expiry/late_ack_vs_backoff", Bound::Exhaustive, || {
        let backoff = std::time::Duration::from_nanos(5);
        let fixture = Fixture::new(config(1, 1).backoff(leaseq::Backoff::Fixed(backoff)));
        let id = fixture.send(b"m");
        let first = fixture.receive_one();
        fixture.advance(VISIBILITY);
        let stats = fixture.queue.stats();
        assert_eq!((stats.expired, stats.delayed), (1, 1), "expired into its backoff");

        let acker = {
            let queue = fixture.queue.clone();
            thread::spawn(move || queue.ack(&first.receipt))
        };
        let receiver = {
            let fixture = fixture.clone();
            thread::spawn(move || {
                fixture.advance(backoff);
                try_receive(&fixture.queue)
            })
        };
        let acked = acker.join().unwrap();
        let again = receiver.join().unwrap();
        match (&acked, &again) {
            (Ok(()), None) => SEEN.saw("late ack won"),
            (Err(LeaseError::Stale), Some(d)) => {
                assert_eq!((d.id, d.delivery_count), (id, 2));
                SEEN.saw("matured and redelivered");
            }
            other => panic!("late ack and redelivery must have exactly one winner, got {other:?}"),
        }
        if let Some(d) = again {
            fixture.queue.ack(&d.receipt).expect("the redelivery holds the only lease");
        }
        assert!(fixture.drain().is_empty(), "the message came back after being acked");
        assert_eq!(fixture.queue.stats().acked, 1);
    });
    SEEN.assert_exactly(&["late ack won", "matured and redelivered"]);
}
