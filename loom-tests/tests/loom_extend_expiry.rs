//! Extension racing the expiry of the same lease (issue model 3).
//!
//! One message is in flight until `VISIBILITY`. One thread extends the lease;
//! the other moves the clock to the original deadline and receives, which
//! applies the due expiry timer. Invariant: an extension that returns
//! `Ok(deadline)` keeps the message from everyone until `deadline`, and the
//! lease then really does run out at `deadline` (the expiry timer, fired
//! early, re-schedules itself rather than vanish); a refused extension is
//! `Expired` (judged by the clock) or `Stale` (the message was already
//! delivered again) and the message is redelivered exactly once.
#![cfg(loom)]

use std::time::Duration;

use loom::thread;
use loom_tests::{Bound, Fixture, LeaseError, Outcomes, VISIBILITY, config, model, try_receive};

#[test]
fn extend_vs_expiry() {
    static SEEN: Outcomes = Outcomes::new();
    model("extend_vs_expiry", Bound::Exhaustive, || {
        let fixture = Fixture::new(config(1, 1));
        let id = fixture.send(b"m");
        let first = fixture.receive_one();

        let extender = {
            let queue = fixture.queue.clone();
            thread::spawn(move || queue.extend(&first.receipt, 2 * VISIBILITY))
        };
        let expirer = {
            let fixture = fixture.clone();
            thread::spawn(move || {
                fixture.advance(VISIBILITY);
                try_receive(&fixture.queue)
            })
        };
        let extended = extender.join().unwrap();
        let redelivered = expirer.join().unwrap();

        match (&extended, &redelivered) {
            (Ok(deadline), None) => {
                // Extended before the clock moved: now + 2 * VISIBILITY from 0.
                assert_eq!(deadline.as_nanos(), 20, "the extension counts from the clock it saw");
                let now = fixture.clock_now();
                assert!(now < 20);
                // Nobody gets it before the new deadline...
                fixture.advance(Duration::from_nanos(19 - now));
                assert!(try_receive(&fixture.queue).is_none(), "delivered before the extended deadline");
                // ...and it does come back at that deadline.
                fixture.advance(Duration::from_nanos(1));
                let again = try_receive(&fixture.queue).expect("the extended lease must still expire");
                assert_eq!((again.id, again.delivery_count), (id, 2));
                SEEN.saw("extended");
            }
            // Refused by the clock, or (once the message was delivered again)
            // as stale; either way the lease is over and the message is back.
            (Err(refused @ (LeaseError::Expired | LeaseError::Stale)), Some(again)) => {
                SEEN.saw(if *refused == LeaseError::Expired { "refused as expired" } else { "refused as stale" });
                assert_eq!((again.id, again.delivery_count), (id, 2));
                fixture.queue.ack(&again.receipt).expect("the redelivery holds the only live lease");
                assert_eq!(fixture.drain().len(), 0, "one message, delivered once more, then gone");
            }
            // The extension saw the moved clock but the expiry had not run yet.
            (Err(LeaseError::Expired), None) => panic!("expiry at the deadline must redeliver to the receiver"),
            other => panic!("extend and expiry must have exactly one winner, got {other:?}"),
        }
    });
    SEEN.assert_exactly(&["extended", "refused as expired", "refused as stale"]);
}
