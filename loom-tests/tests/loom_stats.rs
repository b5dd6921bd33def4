//! Stats read while messages move (issue model 8).
//!
//! One thread sends, one receives and acks, one reads `stats()`. Inside the
//! engine, every gauge (ready, delayed, in flight) is an inflow counter minus
//! an outflow counter, and under `cfg(loom)` the engine asserts that the
//! outflow it read never exceeds the inflow (a negative gauge); here the model
//! asserts that no figure in the concurrent snapshot exceeds what happened,
//! and that the final figures are exact. The clock stands at 1000 s and never
//! moves, so the oldest-ready age, if any, is zero: a freed slot's free-list
//! link (it shares the send time's word) read as a send time would show as an
//! age of about 1000 s.
#![cfg(loom)]

use loom::thread;
use loom_tests::{Bound, Fixture, Outcomes, config, model, try_receive};

#[test]
fn stats_read_concurrently_stay_within_what_happened() {
    static SEEN: Outcomes = Outcomes::new();
    model("stats/concurrent_read", Bound::Preemptions(3), || {
        let fixture = Fixture::new(config(1, 1));
        fixture.advance(std::time::Duration::from_secs(1000));
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
        assert!(seen.oldest_ready_age.is_none_or(|age| age.is_zero()), "{seen:?}");

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

/// The oldest-ready age scans slots without owning them, and a freed slot
/// keeps its free-list link in the word that holds a ready message's send
/// time. With one message acked (its slot freed) while `stats()` scans and
/// another still ready, the age must come from the ready one: zero, as the
/// clock never moves; the link read as a send time would show as about
/// 1000 s. The scan runs on the spawned thread so that loom lets its reads
/// of the freed slot see the ack's writes in any mix of old and new values.
/// (Caught when `Slot::ready_sent_at` skips its second look at the lease
/// word, or does not check that the slot is ready.)
#[test]
fn the_oldest_ready_age_never_reads_a_free_list_link() {
    static SEEN: Outcomes = Outcomes::new();
    model("stats/ready_age_vs_free", Bound::Exhaustive, || {
        let fixture = Fixture::new(config(2, 1));
        fixture.advance(std::time::Duration::from_secs(1000));
        assert!(fixture.queue.send(&b"a"[..]).is_ok() && fixture.queue.send(&b"b"[..]).is_ok());
        let reader = {
            let queue = fixture.queue.clone();
            thread::spawn(move || queue.stats())
        };
        let a = try_receive(&fixture.queue).expect("a is ready");
        assert_eq!(fixture.queue.ack(&a.receipt), Ok(()));
        let seen = reader.join().unwrap();
        assert!(seen.ready >= 1, "b stays ready: {seen:?}");
        assert_eq!(seen.oldest_ready_age, Some(std::time::Duration::ZERO), "{seen:?}");
        SEEN.saw(if seen.acked == 1 { "read after the ack" } else { "read before the ack" });
    });
    SEEN.assert_exactly(&["read after the ack", "read before the ack"]);
}
