//! The timer inbox and its `next_due` hint (the wheel inbox).
//!
//! A receive schedules its lease's expiry by pushing into the shard's inbox
//! and lowering `next_due`; whoever runs due timers swaps `next_due` to
//! "never", drains the inbox into the wheel and folds the wheel's next
//! deadline back in. A lease whose slot's timer is already armed for an
//! earlier deadline queues nothing (`Slot::arm`): the armed entry's firing
//! looks at the slot and arms again. Invariant (no lost deadline): a lease
//! scheduled while another thread is draining or firing still expires on time.
#![cfg(loom)]

use std::time::Duration;

use leaseq::{MessageId, ReceiveOptions};
use loom::thread;
use loom_tests::{Bound, Fixture, Outcomes, VISIBILITY, config, model, try_receive};

#[test]
fn deadline_scheduled_during_a_drain_is_not_lost() {
    static SEEN: Outcomes = Outcomes::new();
    model("timers/schedule_vs_drain", Bound::Preemptions(3), || {
        let fixture = Fixture::new(config(2, 1));
        let first = fixture.send(b"m0");
        let second = fixture.send(b"m1");
        // m0's lease is due at VISIBILITY; the drain below fires it.
        let m0 = fixture.receive_one();
        assert_eq!(m0.id, first);

        let receiver = {
            let queue = fixture.queue.clone();
            // Schedules m1's expiry (at VISIBILITY or 2 * VISIBILITY).
            thread::spawn(move || try_receive(&queue).map(|d| (d.id, d.deadline.as_nanos())))
        };
        let drainer = {
            let fixture = fixture.clone();
            thread::spawn(move || {
                fixture.advance(VISIBILITY);
                // Applies due timers (drains the inbox) without receiving.
                fixture.queue.stats().expired
            })
        };
        let m1 = receiver.join().unwrap();
        let expired_seen = drainer.join().unwrap();
        assert!(expired_seen <= 2, "two leases, {expired_seen} expiries");

        // m1's ready entry precedes any entry m0's expiry adds (FIFO), so the
        // receiver got m1, at time 0 or at VISIBILITY.
        let (id, deadline) = m1.expect("a message was ready for the receiver");
        assert_eq!(id, second, "FIFO: m1 was ready first");
        reach_lease_end(&fixture, deadline, &SEEN);
        let stats = fixture.queue.stats();
        assert_eq!(stats.expired, 2, "a lease scheduled during a drain never expired: {stats:?}");
        assert_eq!(stats.in_flight, 0, "{stats:?}");
    });
    SEEN.assert_exactly(&["received after", "received before the clock moved"]);
}

/// A slot's timer entry is an alarm for the slot, not for one lease: A's
/// lease armed the slot at `VISIBILITY`; A is acked and B sent into the same
/// slot. One thread receives B (its lease ends at A's old deadline or later, so
/// the arm covers it and its receive queues no entry) while the other moves
/// the clock to A's old deadline, firing that entry. Invariant: B's lease
/// still expires at its own deadline. Either the firing gave up the arm before
/// B's receive armed (which then found no arm and queued its own entry), or
/// after (and then saw B in flight and armed for B's deadline).
#[test]
fn an_old_entry_firing_while_the_slot_rearms_keeps_the_new_lease() {
    static SEEN: Outcomes = Outcomes::new();
    model("timers/rearm_vs_fire", Bound::Preemptions(3), || {
        let fixture = Fixture::new(config(1, 1));
        fixture.send(b"a");
        let a = fixture.receive_one();
        fixture.queue.ack(&a.receipt).expect("A's lease is held");
        let b = fixture.send(b"b");
        receive_b_while_the_old_entry_fires(&fixture, b, VISIBILITY, VISIBILITY, &SEEN);
    });
    SEEN.assert_exactly(&["received after", "received before the clock moved"]);
}

/// The same race with the old entry filed in a bucket of the wheel (a lease
/// of several ticks, drained into the wheel before the race), where entries
/// keep only their slot and the wheel reads the slot's arm when it takes the
/// entry out to fire it. The read races B's `arm`; invariant as above: B's
/// lease expires at its own deadline, whichever value the wheel read.
#[test]
fn an_old_entry_in_a_bucket_firing_while_the_slot_rearms_keeps_the_new_lease() {
    static SEEN: Outcomes = Outcomes::new();
    model("timers/rearm_vs_bucket_fire", Bound::Preemptions(3), || {
        let lease = Duration::from_millis(4);
        let fixture = Fixture::new(
            config(2, 1)
                .visibility_timeout(lease)
                .max_visibility(Duration::from_millis(100))
                .max_lease(Duration::from_secs(1)),
        );
        fixture.send(b"a");
        fixture.send(b"c");
        let a = fixture.receive_one();
        // C's short lease falls due first: applying it drains the inbox, which
        // files A's entry in a bucket (4 ms is several wheel ticks away).
        let short = ReceiveOptions { visibility: Some(VISIBILITY), wait: None };
        let c = fixture.queue.receive_with(1, short).expect("a valid receive").pop().expect("C was ready");
        fixture.queue.ack(&c.receipt).expect("C's lease is held");
        fixture.advance(VISIBILITY);
        fixture.queue.ack(&a.receipt).expect("A's lease is held");
        // The free list is a stack: B takes A's slot, whose arm A's entry holds.
        let b = fixture.send(b"b");
        receive_b_while_the_old_entry_fires(&fixture, b, lease - VISIBILITY, lease, &SEEN);
    });
    SEEN.assert_exactly(&["received after", "received before the clock moved"]);
}

/// The race of the two rearm models: one thread receives B while another
/// moves the clock by `by` to A's old deadline, firing the entry that holds
/// B's slot's arm; then the clock moves to the end of B's lease (`lease`
/// long). Invariant: B's lease expires then, once, and B is receivable again.
fn receive_b_while_the_old_entry_fires(
    fixture: &Fixture,
    b: MessageId,
    by: Duration,
    lease: Duration,
    seen: &Outcomes,
) {
    let receiver = {
        let queue = fixture.queue.clone();
        thread::spawn(move || try_receive(&queue).map(|d| (d.id, d.deadline.as_nanos())))
    };
    let firer = {
        let fixture = fixture.clone();
        thread::spawn(move || fixture.advance(by))
    };
    let (id, deadline) = receiver.join().unwrap().expect("B was ready for the receiver");
    firer.join().unwrap();
    assert_eq!(id, b);
    // Received after the clock moved, B's lease runs from where it moved to.
    let received_after = deadline == fixture.clock_now() + lease.as_nanos() as u64;
    seen.saw(if received_after { "received after" } else { "received before the clock moved" });
    let now = fixture.clock_now();
    fixture.advance(Duration::from_nanos(deadline - now));
    let again = try_receive(&fixture.queue).map(|d| d.id);
    let stats = fixture.queue.stats();
    assert_eq!(stats.expired, 1, "B's lease did not expire at its deadline: {stats:?}");
    assert_eq!(again, Some(b), "B is receivable again once its lease is over");
}

/// Records whether the racing receive happened before or after the clock
/// moved to `VISIBILITY` (its lease then ends at `deadline`), and moves the
/// clock to that end.
fn reach_lease_end(fixture: &Fixture, deadline: u64, seen: &Outcomes) {
    seen.saw(if deadline == VISIBILITY.as_nanos() as u64 {
        "received before the clock moved"
    } else {
        "received after"
    });
    let now = fixture.clock_now();
    fixture.advance(Duration::from_nanos(deadline - now));
}
