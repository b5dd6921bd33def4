//! The lean baseline: the lease queue a user would write instead of adopting
//! the engine, when all they need is send, receive with a lease, and ack.
//!
//! It carries none of the engine's contract beyond that: no statistics, no
//! message ids, no receipt integrity tag, no late-ack accounting, no
//! delivery counts, no delays, one `parking_lot::Mutex` around everything.
//!
//! Invariant: a receipt `(slot, generation)` completes only the attempt it
//! was handed out for. A slot's generation bumps when an attempt starts
//! (receive) and when it ends (ack or an applied expiry), so a receipt of an
//! earlier attempt, or of a slot freed and reused since, never matches.
//! Deadline entries in the heap are cancelled lazily the same way: an entry
//! whose generation no longer matches its slot is dropped when it surfaces.
//! Expiry is applied by each receive, before it takes ready messages, so a
//! lapsed lease is redelivered in FIFO order behind what was already ready.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use bytes::Bytes;
use leaseq::{Clock, SystemClock};
use parking_lot::Mutex;

/// One message's place in the slab.
#[derive(Debug)]
struct Slot {
    generation: u32,
    /// Between a receive and the ack or the applied expiry.
    in_flight: bool,
    payload: Bytes,
}

#[derive(Debug, Default)]
struct Inner {
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// `(slot, generation)` of ready messages, oldest first.
    ready: VecDeque<(u32, u32)>,
    /// `(deadline, slot, generation)` of leases, earliest first.
    deadlines: BinaryHeap<Reverse<(u64, u32, u32)>>,
}

/// Proof of one delivery attempt: the slot and its generation, nothing else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeanReceipt {
    slot: u32,
    generation: u32,
}

/// One delivery attempt.
#[derive(Debug, Clone)]
pub struct LeanDelivery {
    /// What acks this attempt.
    pub receipt: LeanReceipt,
    /// The payload.
    pub payload: Bytes,
    /// When the lease runs out (clock nanoseconds).
    pub deadline: u64,
}

/// The lean Mutex queue.
#[derive(Debug)]
pub struct LeanQueue<C: Clock = SystemClock> {
    inner: Mutex<Inner>,
    clock: C,
    capacity: usize,
    visibility: u64,
}

impl<C: Clock> LeanQueue<C> {
    /// A queue of at most `capacity` messages whose receives lease for
    /// `visibility`, on `clock` (`SystemClock::std()` reads `Instant`, as a
    /// hand-written queue would).
    pub fn new(clock: C, capacity: usize, visibility: Duration) -> Self {
        LeanQueue {
            inner: Mutex::new(Inner::default()),
            clock,
            capacity,
            visibility: u64::try_from(visibility.as_nanos()).unwrap_or(u64::MAX),
        }
    }

    /// Sends one message; hands the payload back when the queue is full.
    pub fn send(&self, payload: Bytes) -> Result<(), Bytes> {
        let mut inner = self.inner.lock();
        let index = match inner.free.pop() {
            Some(index) => index,
            None if inner.slots.len() < self.capacity => {
                inner.slots.push(Slot { generation: 0, in_flight: false, payload: Bytes::new() });
                (inner.slots.len() - 1) as u32
            }
            None => return Err(payload),
        };
        let slot = &mut inner.slots[index as usize];
        slot.payload = payload;
        let generation = slot.generation;
        inner.ready.push_back((index, generation));
        Ok(())
    }

    /// Appends up to `max` ready messages to `out`, each leased for the
    /// queue's visibility, after applying the leases that ran out; returns
    /// how many.
    pub fn receive_into(&self, max: usize, out: &mut Vec<LeanDelivery>) -> usize {
        let now = self.clock.now_relaxed().0;
        let deadline = now.saturating_add(self.visibility);
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        Self::expire(inner, now);
        let mut taken = 0;
        while taken < max {
            let Some((index, generation)) = inner.ready.pop_front() else { break };
            let slot = &mut inner.slots[index as usize];
            // Every ready entry is live: a generation changes only on receive,
            // ack and expiry, and each of those pops or never pushed it.
            debug_assert!(slot.generation == generation && !slot.in_flight);
            slot.generation = slot.generation.wrapping_add(1);
            slot.in_flight = true;
            let receipt = LeanReceipt { slot: index, generation: slot.generation };
            inner.deadlines.push(Reverse((deadline, index, receipt.generation)));
            out.push(LeanDelivery { receipt, payload: slot.payload.clone(), deadline });
            taken += 1;
        }
        taken
    }

    /// Applies every lease whose deadline is at or before `now`: the message
    /// is ready again, behind those already ready.
    fn expire(inner: &mut Inner, now: u64) {
        while let Some(&Reverse((deadline, index, generation))) = inner.deadlines.peek() {
            if deadline > now {
                return;
            }
            inner.deadlines.pop();
            let slot = &mut inner.slots[index as usize];
            if slot.generation != generation || !slot.in_flight {
                continue; // acked (and maybe reused) since: lazily cancelled
            }
            slot.generation = slot.generation.wrapping_add(1);
            slot.in_flight = false;
            inner.ready.push_back((index, slot.generation));
        }
    }

    /// Acks one attempt: true when it was the slot's current attempt (a
    /// lease that ran out but was not yet redelivered still acks).
    pub fn ack(&self, receipt: &LeanReceipt) -> bool {
        let mut inner = self.inner.lock();
        let Some(slot) = inner.slots.get_mut(receipt.slot as usize) else { return false };
        if !slot.in_flight || slot.generation != receipt.generation {
            return false;
        }
        slot.generation = slot.generation.wrapping_add(1);
        slot.in_flight = false;
        // Dropped outside the lock would be kinder to contenders; a user's
        // first queue does not bother, and a static payload costs nothing.
        slot.payload = Bytes::new();
        inner.free.push(receipt.slot);
        true
    }

    /// Messages held (ready or in flight).
    pub fn len(&self) -> usize {
        let inner = self.inner.lock();
        inner.slots.len() - inner.free.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leaseq::ManualClock;

    fn queue() -> (ManualClock, LeanQueue<ManualClock>) {
        let clock = ManualClock::new();
        (clock.clone(), LeanQueue::new(clock, 4, Duration::from_secs(10)))
    }

    fn one(q: &LeanQueue<ManualClock>) -> Option<LeanDelivery> {
        let mut out = Vec::new();
        q.receive_into(1, &mut out);
        out.pop()
    }

    #[test]
    fn messages_come_out_in_send_order() {
        let (_, q) = queue();
        for p in ["a", "b", "c"] {
            q.send(Bytes::from_static(p.as_bytes())).unwrap();
        }
        let mut out = Vec::new();
        assert_eq!(q.receive_into(8, &mut out), 3);
        let order: Vec<&[u8]> = out.iter().map(|d| &d.payload[..]).collect();
        assert_eq!(order, [b"a", b"b", b"c"]);
        assert!(out.iter().all(|d| q.ack(&d.receipt)));
        assert!(q.is_empty());
    }

    #[test]
    fn a_receipt_acks_once_and_a_reused_slot_refuses_it() {
        let (_, q) = queue();
        q.send(Bytes::from_static(b"a")).unwrap();
        let first = one(&q).unwrap();
        assert!(q.ack(&first.receipt));
        assert!(!q.ack(&first.receipt), "acked twice");
        q.send(Bytes::from_static(b"b")).unwrap();
        let second = one(&q).unwrap();
        assert_eq!(second.receipt.slot, first.receipt.slot, "the slot is reused");
        assert!(!q.ack(&first.receipt), "the old receipt completed the new attempt");
        assert!(q.ack(&second.receipt));
    }

    #[test]
    fn a_lapsed_lease_is_redelivered_and_its_receipt_goes_stale() {
        let (clock, q) = queue();
        q.send(Bytes::from_static(b"a")).unwrap();
        q.send(Bytes::from_static(b"b")).unwrap();
        let a = one(&q).unwrap();
        assert_eq!(a.deadline, clock.now().0 + 10_000_000_000);
        assert!(one(&q).is_some_and(|b| &b.payload[..] == b"b"));
        assert!(one(&q).is_none(), "nothing ready while both are leased");
        clock.advance(Duration::from_secs(10));
        let again = one(&q).expect("the lapsed lease is ready again");
        assert_eq!(&again.payload[..], b"a");
        assert!(!q.ack(&a.receipt), "the lapsed attempt acked the redelivery");
        assert!(q.ack(&again.receipt));
    }

    #[test]
    fn an_acked_lease_is_cancelled_and_a_full_queue_refuses() {
        let (clock, q) = queue();
        for _ in 0..4 {
            q.send(Bytes::from_static(b"x")).unwrap();
        }
        assert!(q.send(Bytes::from_static(b"y")).is_err(), "capacity 4");
        let acked = one(&q).unwrap();
        let lapsed = one(&q).unwrap();
        assert!(q.ack(&acked.receipt));
        clock.advance(Duration::from_secs(60));
        let mut out = Vec::new();
        assert_eq!(q.receive_into(8, &mut out), 3, "two never received and one lapsed; the acked one stays gone");
        assert_eq!(out.last().unwrap().receipt.slot, lapsed.receipt.slot, "the lapsed one queues behind the ready");
        assert_eq!(q.len(), 3);
    }
}
