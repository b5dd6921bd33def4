//! Slot reuse and the generation (issue model 7: ABA).
//!
//! A queue with one slot: message A is in flight with receipt `a`. One thread
//! acks `a` and, in the freed slot, sends B with a delay; the other uses `a`
//! to extend and release, then moves the clock to A's old deadline and
//! receives. The generation is what tells A's receipt and ready entry from
//! B's; A's timer entry is an alarm for the slot, which B's delay (its own end
//! time) must survive. Invariant: exactly one of {the ack, the release} ends
//! A's attempt; nothing done with `a` or with A's entries ever reaches B: B is
//! not delivered before its delay (A's expiry timer, firing at A's old
//! deadline, must not mature it), and B is neither lost nor delivered twice.
#![cfg(loom)]

use std::time::Duration;

use loom::thread;
use loom_tests::{Bound, Fixture, LeaseError, Outcomes, VISIBILITY, config, model, try_receive};

const B_DELAY: Duration = Duration::from_nanos(20);

#[test]
fn old_receipt_and_entries_never_reach_the_slots_next_message() {
    static SEEN: Outcomes = Outcomes::new();
    model("slot_reuse/aba", Bound::Exhaustive, || {
        let fixture = Fixture::new(config(1, 1));
        let a_id = fixture.send(b"a");
        let a = fixture.receive_one();

        let acker = {
            let queue = fixture.queue.clone();
            thread::spawn(move || {
                let acked = queue.ack(&a.receipt);
                let b = acked.is_ok().then(|| queue.send_with(&b"b"[..], B_DELAY));
                (acked, b)
            })
        };
        let old_hand = {
            let fixture = fixture.clone();
            thread::spawn(move || {
                let extended = fixture.queue.extend(&a.receipt, VISIBILITY);
                let released = fixture.queue.release(&a.receipt, Duration::ZERO);
                fixture.advance(VISIBILITY);
                (extended, released, try_receive(&fixture.queue))
            })
        };
        let (acked, b_sent) = acker.join().unwrap();
        let (extended, released, received) = old_hand.join().unwrap();

        assert!(acked.is_ok() != released.is_ok(), "A's attempt ended {acked:?} / {released:?}");
        for refused in [&acked, &released].into_iter().filter_map(|r| r.as_ref().err()) {
            assert_eq!(*refused, LeaseError::Stale, "the other attempt already ended A's lease");
        }
        assert!(matches!(extended, Ok(_) | Err(LeaseError::Stale)), "extend: {extended:?}");
        let b_id = b_sent.map(|sent| sent.expect("the ack freed the only slot"));
        if let Some(got) = &received {
            assert_eq!(got.id, a_id, "B was delivered before its delay ended (or A's receipt reached B)");
            assert!(released.is_ok(), "A is receivable again only after its release");
        }

        // What is left: B (once, after its delay) if A was acked; else A.
        SEEN.saw(match (&b_id, &received, &extended) {
            (Some(_), _, Ok(_)) => "extended, then acked and B sent",
            (Some(_), _, Err(_)) => "acked and B sent, then old receipt refused",
            (None, Some(_), _) => "released and A received again",
            (None, None, _) => panic!("A, released before the clock moved, was not there for the same thread"),
        });
        let left: Vec<_> = fixture.drain().into_iter().map(|d| d.id).collect();
        match b_id {
            Some(b_id) => assert_eq!(left, vec![b_id], "B lost or duplicated"),
            None => assert_eq!(left, vec![a_id], "released A lost or duplicated"),
        }
    });
    SEEN.assert_exactly(&[
        "acked and B sent, then old receipt refused",
        "extended, then acked and B sent",
        "released and A received again",
    ]);
}

/// Two consumers each ack their message and send a new one into the freed
/// slot: the slab's free list (a tagged Treiber stack) is pushed and popped
/// concurrently. Invariant: every send finds a slot (one was freed for it),
/// no slot is handed to two messages, and exactly the new messages remain.
#[test]
fn concurrent_free_and_reuse_hand_each_slot_to_one_message() {
    model("slot_reuse/free_list", Bound::Preemptions(3), || {
        let fixture = Fixture::new(config(2, 1));
        fixture.send(b"a");
        fixture.send(b"b");
        let (a, b) = (fixture.receive_one(), fixture.receive_one());
        let consumers: Vec<_> = [(a, &b"c"[..]), (b, &b"d"[..])]
            .into_iter()
            .map(|(held, next)| {
                let queue = fixture.queue.clone();
                thread::spawn(move || {
                    queue.ack(&held.receipt).expect("each consumer holds its own lease");
                    queue.send(next).expect("the ack just freed a slot")
                })
            })
            .collect();
        let mut sent: Vec<_> = consumers.into_iter().map(|c| c.join().unwrap()).collect();
        assert_ne!(sent[0], sent[1]);

        let left = fixture.drain();
        let payloads: Vec<_> = left.iter().map(|d| d.payload.as_ref()).collect();
        assert_eq!(left.len(), 2, "a message was lost or duplicated: {payloads:?}");
        assert!(payloads.contains(&&b"c"[..]) && payloads.contains(&&b"d"[..]), "{payloads:?}");
        let mut ids: Vec<_> = left.iter().map(|d| d.id).collect();
        ids.sort();
        sent.sort();
        assert_eq!(ids, sent);
    });
}

/// `ack_batch` returns its slots to the free list in one push, while another
/// thread sends into the full queue: the send either finds no slot (the batch
/// had not returned them yet) or takes one of the freed slots after the
/// batch's writes (loom reports a body access not ordered by the push), and
/// once the batch returns, both slots take new messages.
#[test]
fn a_batch_of_acks_frees_its_slots_in_one_push() {
    static SEEN: Outcomes = Outcomes::new();
    model("slot_reuse/ack_batch", Bound::Preemptions(3), || {
        let fixture = Fixture::new(config(2, 1));
        fixture.send(b"a");
        fixture.send(b"b");
        let held = [fixture.receive_one().receipt, fixture.receive_one().receipt];
        // The send runs on the spawned thread, the batch on main (the other
        // way round, loom never lets the send's reads see the push; see
        // docs/loom.md).
        let sender = {
            let queue = fixture.queue.clone();
            thread::spawn(move || queue.send(&b"c"[..]).is_ok())
        };
        assert!(fixture.queue.ack_batch(&held).into_iter().all(|result| result.is_ok()), "both leases were held");
        let early = sender.join().unwrap();
        SEEN.saw(if early { "sent into a freed slot" } else { "queue still full" });
        let late = fixture.queue.send(&b"d"[..]).is_ok();
        assert!(late, "the batch has returned: a slot is free");
        if !early {
            fixture.send(b"c");
        }
        let left = fixture.drain();
        let mut payloads: Vec<_> = left.iter().map(|d| d.payload.to_vec()).collect();
        payloads.sort();
        assert_eq!(payloads, vec![b"c".to_vec(), b"d".to_vec()], "a message was lost or duplicated");
    });
    SEEN.assert_exactly(&["queue still full", "sent into a freed slot"]);
}
