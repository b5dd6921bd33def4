//! The lease state machine: one `AtomicU64` per message slot.
//!
//! The word packs a generation (high 56 bits) and a state (low 8 bits). Every
//! transition is a compare-exchange that first *claims* the word (moves it to
//! `Claimed`, keeping the generation), then does its work on the slot's plain
//! fields with exclusive access, then *publishes* the next state with a Release
//! store. Invariants:
//!
//! * Only the thread holding the claim touches the slot's non-atomic fields;
//!   claim (Acquire) and publish (Release) order those accesses between owners.
//! * The generation increases whenever an attempt starts (receive) or ends
//!   (ack, release, expiry, dead-letter, purge), so a receipt, a ready-queue
//!   entry or a timer entry naming an older generation can never match again:
//!   a stale receipt fails its compare-exchange instead of touching a newer
//!   delivery.
//! * `Ready`/`Delayed` carry `EXPIRED` when they were entered by the lease of
//!   generation `g - 1` running out; only then may that attempt's receipt still
//!   ack (the late-ack rule), because nobody else has received the message.
//!
//! The transition table is in docs/design.md; each `try_*` function below is
//! one row of its "claim" column.

use crate::sync::{AtomicU64, Ordering, busy_wait};

/// Loom builds read the mutant name loom-tests/ci.sh sets (see
/// `loom-tests/mutant-rustc.sh`), so cargo rebuilds this crate when the
/// mutant changes. Normal builds never look at it.
#[cfg(loom)]
const _MUTANT: Option<&str> = option_env!("LEASEQ_MUTANT");

/// What a slot holds right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Phase {
    /// Unoccupied, on the free list.
    Free = 0,
    /// Eligible for receive; exactly one ready-queue entry names this generation.
    Ready = 1,
    /// Waiting in the timing wheel until its delay passes.
    Delayed = 2,
    /// Leased to a consumer until its deadline.
    InFlight = 3,
    /// A transition is in progress; the claimer owns the slot's fields.
    Claimed = 4,
}

const PHASE_MASK: u64 = 0x7;
/// Set on `Ready`/`Delayed` entered because the previous attempt's lease ran out.
const EXPIRED: u64 = 0x8;
const GEN_SHIFT: u32 = 8;
/// Generations are 56 bits; at a billion transitions a second one slot needs
/// two years to wrap, far longer than any receipt is held.
pub(crate) const GEN_MASK: u64 = (1 << 56) - 1;

/// A decoded state word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Word(u64);

impl Word {
    pub(crate) fn new(generation: u64, phase: Phase) -> Self {
        Word(((generation & GEN_MASK) << GEN_SHIFT) | phase as u64)
    }

    fn expired(generation: u64, phase: Phase) -> Self {
        Word(Self::new(generation, phase).0 | EXPIRED)
    }

    pub(crate) fn generation(self) -> u64 {
        self.0 >> GEN_SHIFT
    }

    pub(crate) fn phase(self) -> Phase {
        match self.0 & PHASE_MASK {
            0 => Phase::Free,
            1 => Phase::Ready,
            2 => Phase::Delayed,
            3 => Phase::InFlight,
            _ => Phase::Claimed,
        }
    }

    /// Entered by expiry of the previous attempt (late ack still possible).
    pub(crate) fn after_expiry(self) -> bool {
        self.0 & EXPIRED != 0
    }
}

/// `g + 1` within the generation space.
pub(crate) fn next_generation(generation: u64) -> u64 {
    generation.wrapping_add(1) & GEN_MASK
}

/// The state word of one slot.
#[derive(Debug)]
pub(crate) struct LeaseWord {
    word: AtomicU64,
}

/// Exclusive ownership of a slot's fields, taken by a successful claim.
///
/// It must end in `publish`; if it is dropped instead (an early return, a
/// panic), the word goes back to what it was before the claim, so a slot can
/// never stay claimed.
#[derive(Debug)]
#[must_use = "a claim must be published or it reverts"]
pub(crate) struct Claim<'a> {
    lease: &'a LeaseWord,
    before: Word,
    done: bool,
}

impl Claim<'_> {
    /// The word as it was when claimed.
    pub(crate) fn before(&self) -> Word {
        self.before
    }

    /// Ends the transition in `next`.
    pub(crate) fn publish(mut self, next: Word) {
        self.done = true;
        // Release: the fields written under the claim are visible to the next
        // thread that claims (Acquire) or reads this word.
        #[cfg(not(leaseq_mutant = "relaxed_publish"))]
        let order = Ordering::Release;
        // Mutant (loom-tests only): the next owner no longer sees our writes.
        #[cfg(leaseq_mutant = "relaxed_publish")]
        let order = Ordering::Relaxed;
        self.lease.word.store(next.0, order);
    }

    /// Puts the word back as it was: the transition did not happen.
    pub(crate) fn revert(self) {
        // Drop does the work.
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.lease.word.store(self.before.0, Ordering::Release);
        }
    }
}

/// Why a claim did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The word names another generation or phase; carries what was seen.
    Mismatch(Word),
}

impl LeaseWord {
    /// A slot that has never held a message.
    pub(crate) fn new() -> Self {
        Self { word: AtomicU64::new(Word::new(0, Phase::Free).0) }
    }

    /// The current word. Acquire, so that a reader who sees a published phase
    /// also sees the fields its publisher wrote.
    pub(crate) fn load(&self) -> Word {
        Word(self.word.load(Ordering::Acquire))
    }

    /// The current word once no transition is in progress on it: waits out a
    /// claim (a few instructions long) instead of reporting `Claimed`.
    ///
    /// Whoever judges a ready entry, a timer entry or a receipt by the word
    /// must use this, not `load`: a claim may be reverted (a refused ack,
    /// extend or release), so seeing `Claimed` says nothing about where the
    /// message will be, and dropping an entry because of it loses the entry
    /// for good (a message left `Ready` with no ready entry, or a lease with no
    /// expiry timer).
    pub(crate) fn load_settled(&self) -> Word {
        let mut spins = 0;
        loop {
            let word = self.load();
            // The mutant (loom-tests only) is the bug loom found: judging an
            // entry by a word that is mid-transition.
            if word.phase() != Phase::Claimed || cfg!(leaseq_mutant = "unsettled_load") {
                return word;
            }
            busy_wait(&mut spins);
        }
    }

    /// Publishes a word on a slot whose ownership came from outside the word
    /// (the free list hands a `Free` slot to exactly one sender).
    pub(crate) fn publish_owned(&self, next: Word) {
        self.word.store(next.0, Ordering::Release);
    }

    /// Claims the word if it is exactly `expected`, waiting out other claims of
    /// the same generation (they are a few instructions long).
    fn claim_exact(&self, accept: impl Fn(Word) -> bool) -> Result<Claim<'_>, Refusal> {
        let mut spins = 0;
        let mut current = self.load();
        loop {
            if current.phase() == Phase::Claimed {
                // Someone is mid-transition; it publishes within a few
                // instructions (a claim never blocks or allocates unboundedly).
                busy_wait(&mut spins);
                current = self.load();
                continue;
            }
            if !accept(current) {
                return Err(Refusal::Mismatch(current));
            }
            let claimed = Word::new(current.generation(), Phase::Claimed);
            // AcqRel on success: Acquire takes ownership of the fields the last
            // publisher wrote; Release is not needed for the fields (the claimer
            // writes them later and publishes with Release) but keeps the claim
            // itself ordered after our earlier loads for the loom model.
            // Acquire on failure: we re-examine the word we saw.
            #[cfg(not(leaseq_mutant = "cas_as_store"))]
            let swapped = self.word.compare_exchange_weak(current.0, claimed.0, Ordering::AcqRel, Ordering::Acquire);
            // Mutant (loom-tests only): the claim as a load-then-store, so two
            // threads that saw the same word can both believe they own it.
            #[cfg(leaseq_mutant = "cas_as_store")]
            let swapped = {
                self.word.store(claimed.0, Ordering::Release);
                Ok::<u64, u64>(current.0)
            };
            match swapped {
                Ok(_) => {
                    return Ok(Claim { lease: self, before: current, done: false });
                }
                Err(actual) => current = Word(actual),
            }
        }
    }

    /// Receive: claims `Ready(generation)`.
    pub(crate) fn try_claim_ready(&self, generation: u64) -> Result<Claim<'_>, Refusal> {
        self.claim_exact(|w| w.phase() == Phase::Ready && w.generation() == generation)
    }

    /// Ack, extend, release, dead-letter, expiry: claims `InFlight(generation)`.
    pub(crate) fn try_claim_in_flight(&self, generation: u64) -> Result<Claim<'_>, Refusal> {
        self.claim_exact(|w| w.phase() == Phase::InFlight && w.generation() == generation)
    }

    /// Maturing a delayed message: claims `Delayed(generation)`.
    pub(crate) fn try_claim_delayed(&self, generation: u64) -> Result<Claim<'_>, Refusal> {
        self.claim_exact(|w| w.phase() == Phase::Delayed && w.generation() == generation)
    }

    /// A late ack by the attempt `generation` whose lease expired: claims the
    /// `Ready`/`Delayed` word that expiry left, if nobody received it since.
    pub(crate) fn try_claim_expired_attempt(&self, generation: u64) -> Result<Claim<'_>, Refusal> {
        let successor = next_generation(generation);
        self.claim_exact(|w| {
            matches!(w.phase(), Phase::Ready | Phase::Delayed) && w.after_expiry() && w.generation() == successor
        })
    }

    /// Purge: claims any occupied, unclaimed word.
    pub(crate) fn try_claim_occupied(&self) -> Result<Claim<'_>, Refusal> {
        self.claim_exact(|w| matches!(w.phase(), Phase::Ready | Phase::Delayed | Phase::InFlight))
    }
}

/// The words each transition publishes, named after the table's rows.
pub(crate) mod next {
    use super::{Phase, Word, next_generation};

    /// send: `Free(g)` -> `Ready(g)` or `Delayed(g)`.
    pub(crate) fn sent(free: Word, delayed: bool) -> Word {
        Word::new(free.generation(), if delayed { Phase::Delayed } else { Phase::Ready })
    }

    /// receive: `Ready(g)` -> `InFlight(g + 1)`.
    pub(crate) fn received(ready: Word) -> Word {
        Word::new(next_generation(ready.generation()), Phase::InFlight)
    }

    /// delay passed: `Delayed(g)` -> `Ready(g)`, keeping the late-ack flag.
    pub(crate) fn matured(delayed: Word) -> Word {
        Word(Word::new(delayed.generation(), Phase::Ready).0 | (delayed.0 & super::EXPIRED))
    }

    /// ack, dead-letter, purge: any -> `Free(g + 1)`.
    pub(crate) fn freed(before: Word) -> Word {
        Word::new(next_generation(before.generation()), Phase::Free)
    }

    /// release: `InFlight(g)` -> `Ready(g + 1)` or `Delayed(g + 1)`.
    pub(crate) fn released(in_flight: Word, delayed: bool) -> Word {
        Word::new(next_generation(in_flight.generation()), if delayed { Phase::Delayed } else { Phase::Ready })
    }

    /// expiry: `InFlight(g)` -> `Ready|EXPIRED(g + 1)` or `Delayed|EXPIRED(g + 1)`.
    pub(crate) fn expired(in_flight: Word, delayed: bool) -> Word {
        Word::expired(next_generation(in_flight.generation()), if delayed { Phase::Delayed } else { Phase::Ready })
    }

    /// extend: `InFlight(g)` -> `InFlight(g)`.
    pub(crate) fn extended(in_flight: Word) -> Word {
        in_flight
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn word_packs_generation_and_phase() {
        for phase in [Phase::Free, Phase::Ready, Phase::Delayed, Phase::InFlight, Phase::Claimed] {
            for generation in [0, 1, 41, GEN_MASK] {
                let w = Word::new(generation, phase);
                assert_eq!(w.phase(), phase);
                assert_eq!(w.generation(), generation);
                assert!(!w.after_expiry());
            }
        }
        let e = Word::expired(9, Phase::Delayed);
        assert!(e.after_expiry());
        assert_eq!((e.phase(), e.generation()), (Phase::Delayed, 9));
        assert_eq!(next_generation(GEN_MASK), 0, "generations wrap within 56 bits");
    }

    #[test]
    fn a_full_attempt_walks_the_table() {
        let lease = LeaseWord::new();
        let free = lease.load();
        lease.publish_owned(next::sent(free, false));
        let ready = lease.load();
        assert_eq!(ready.phase(), Phase::Ready);

        let claim = lease.try_claim_ready(ready.generation()).unwrap();
        assert_eq!(lease.load().phase(), Phase::Claimed);
        claim.publish(next::received(ready));
        let in_flight = lease.load();
        assert_eq!((in_flight.phase(), in_flight.generation()), (Phase::InFlight, ready.generation() + 1));

        // A receipt of the ready generation is stale now.
        assert!(lease.try_claim_in_flight(ready.generation()).is_err());

        let claim = lease.try_claim_in_flight(in_flight.generation()).unwrap();
        claim.publish(next::expired(in_flight, false));
        let after = lease.load();
        assert!(after.after_expiry());
        // The expired attempt may still ack late; the next delivery resets that.
        lease.try_claim_expired_attempt(in_flight.generation()).unwrap().revert();
        let claim = lease.try_claim_ready(after.generation()).unwrap();
        claim.publish(next::received(after));
        assert!(lease.try_claim_expired_attempt(in_flight.generation()).is_err());
    }

    #[test]
    fn a_dropped_claim_reverts() {
        let lease = LeaseWord::new();
        lease.publish_owned(next::sent(lease.load(), true));
        let before = lease.load();
        {
            let _claim = lease.try_claim_delayed(before.generation()).unwrap();
        }
        assert_eq!(lease.load(), before);
    }

    #[test]
    fn matured_keeps_the_expiry_flag() {
        let w = next::expired(Word::new(3, Phase::InFlight), true);
        let m = next::matured(w);
        assert_eq!(m.phase(), Phase::Ready);
        assert!(m.after_expiry());
        assert_eq!(m.generation(), 4);
    }
}
