//! Dead-lettering at the retry ceiling racing a late ack (issue model 6).
//!
//! With `max_receives = 1` the first attempt is the last: when its lease runs
//! out the message moves to the dead-letter queue. Invariant: exactly one of
//! {the ack succeeds, the message is on the dead-letter queue} happens; the
//! message is never redelivered on its own queue, and a failed ack is `Stale`
//! (the message has left the slot).
#![cfg(loom)]

use loom_tests::{Bound, DeadLetterReason, Fixture, LeaseError, Outcomes, config, model, try_receive};

#[test]
fn expiry_at_ceiling_vs_late_ack() {
    static SEEN: Outcomes = Outcomes::new();
    model("dead_letter/ceiling_vs_late_ack", Bound::Exhaustive, || {
        let fixture = Fixture::new(config(1, 1).max_receives(1).dead_letter_queue("dlq"));
        let id = fixture.send(b"m");
        let d = fixture.receive_one();

        let (acked, redelivered) = fixture.race_ack_with_expiry(d.receipt);
        assert!(redelivered.is_none(), "redelivered past the retry ceiling");

        let dlq = fixture.dead_letters.as_ref().expect("configured");
        let dead = try_receive(dlq);
        match (&acked, &dead) {
            (Ok(()), None) => SEEN.saw("acked"),
            (Err(LeaseError::Stale), Some(dead)) => {
                assert_eq!(dead.id, id, "the dead letter keeps the message id");
                let record = dead.dead_letter.as_ref().expect("a dead letter carries its record");
                assert_eq!(record.reason, DeadLetterReason::Expired);
                assert_eq!(record.delivery_count, 1);
                SEEN.saw("dead-lettered");
            }
            other => panic!("ack and dead-lettering must have exactly one winner, got {other:?}"),
        }
        let stats = fixture.queue.stats();
        assert_eq!(stats.acked + stats.dead_lettered, 1, "{stats:?}");
        assert!(fixture.drain().is_empty(), "the message stayed on its queue");
    });
    SEEN.assert_exactly(&["acked", "dead-lettered"]);
}
