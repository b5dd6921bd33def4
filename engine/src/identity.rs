//! A message's id and its history in one word.
//!
//! Most messages have no past (no failed attempt worth remembering, no
//! deliveries on an earlier queue), so a slot keeps their id in a plain
//! 64-bit word; a message that has a past gets a `History` box, which then
//! holds the id too, and the word holds the box's address with the top bit
//! set. One word instead of an id and a pointer keeps every slot 8 bytes
//! smaller (docs/design.md, "One word for the id and the history").
//!
//! Invariant: the word is either an id below `BOXED` (no history), or
//! `BOXED | address` of a `History` this `Identity` owns (leaked from a
//! `Box`, freed exactly once: on `take_history`, on replacement or on drop),
//! whose `id` is the message's id. An id at or above `BOXED` (2^63: 292
//! years of sends at a billion a second) is kept in a box as well, so every
//! id is representable.

use crate::slot::History;

/// The tag bit: set when the rest of the word is a `History` address.
/// Addresses never have it set in user space on the targets Rust supports
/// (x86-64 and AArch64 user addresses are below 2^48; 32-bit ones below 2^32),
/// and `Identity::boxed` checks it.
const BOXED: u64 = 1 << 63;

/// A message's id, and its history once it has one. The default is id 0, no
/// history.
#[derive(Default)]
pub(crate) struct Identity {
    word: u64,
}

// SAFETY: an `Identity` is an id or an owned `Box<History>` (module
// invariant); `History` is `Send + Sync`, so moving or sharing the owner
// between threads is as safe as for the box itself.
unsafe impl Send for Identity {}
// SAFETY: as for `Send`: `&Identity` only gives out `&History`.
unsafe impl Sync for Identity {}

impl Identity {
    /// The identity of a message with id `id` and history `history`.
    #[inline]
    pub(crate) fn new(id: u64, history: Option<Box<History>>) -> Self {
        match history {
            None if id < BOXED => Identity { word: id },
            None => Self::boxed(Box::new(History { id, ..History::default() })),
            Some(mut history) => {
                history.id = id;
                Self::boxed(history)
            }
        }
    }

    #[cold]
    fn boxed(history: Box<History>) -> Self {
        let address = Box::into_raw(history).expose_provenance() as u64;
        assert_eq!(address & BOXED, 0, "a heap address with the top bit set");
        Identity { word: address | BOXED }
    }

    #[inline]
    fn history_ptr(&self) -> Option<*mut History> {
        (self.word & BOXED != 0).then(|| std::ptr::with_exposed_provenance_mut((self.word & !BOXED) as usize))
    }

    /// The message's id.
    #[inline]
    pub(crate) fn id(&self) -> u64 {
        match self.history() {
            None => self.word,
            Some(history) => history.id,
        }
    }

    /// The message's history, if it has one.
    #[inline]
    pub(crate) fn history(&self) -> Option<&History> {
        // SAFETY: a tagged word is the address of a live `History` this
        // identity owns (module invariant), borrowed here for as long as
        // `self` is.
        self.history_ptr().map(|history| unsafe { &*history })
    }

    /// The message's history, created empty (holding the id) if it had none.
    pub(crate) fn history_mut(&mut self) -> &mut History {
        if self.word & BOXED == 0 {
            *self = Self::boxed(Box::new(History { id: self.word, ..History::default() }));
        }
        let history = self.history_ptr().expect("boxed just above");
        // SAFETY: the word is the address of a live `History` this identity
        // owns (module invariant), borrowed mutably for as long as `self` is.
        unsafe { &mut *history }
    }

    /// Takes the history out, leaving the id (which goes back into the word,
    /// or into a fresh box if it is too large for it).
    pub(crate) fn take_history(&mut self) -> Option<Box<History>> {
        let history = self.reclaim()?;
        // The old word is cleared, so this assignment drops nothing.
        *self = Identity::new(history.id, None);
        Some(history)
    }

    /// Takes ownership of the box back, if there is one, and clears the word
    /// to a plain id of 0, so nothing can reach the box through it again.
    fn reclaim(&mut self) -> Option<Box<History>> {
        let history = self.history_ptr()?;
        self.word = 0;
        // SAFETY: the word was the address of a `History` leaked from a box
        // this identity owns, and it was cleared above, so the box is taken
        // back exactly once.
        Some(unsafe { Box::from_raw(history) })
    }
}

impl Drop for Identity {
    #[inline]
    fn drop(&mut self) {
        if self.word & BOXED != 0 {
            drop(self.reclaim());
        }
    }
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity").field("id", &self.id()).field("history", &self.history()).finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn an_identity_is_one_word() {
        assert_eq!(std::mem::size_of::<Identity>(), 8);
    }

    /// Ids on either side of the tag bit come back unchanged, with and
    /// without a history, through every change of representation.
    #[test]
    fn every_id_survives_every_representation() {
        for id in [0, 1, 42, BOXED - 1, BOXED, BOXED + 7, u64::MAX] {
            let plain = Identity::new(id, None);
            assert_eq!(plain.id(), id);
            assert_eq!(plain.history().map(|h| h.attempts.len()), (id >= BOXED).then_some(0));

            let mut grown = Identity::new(id, None);
            grown.history_mut().carried = 3;
            assert_eq!((grown.id(), grown.history().map(|h| h.carried)), (id, Some(3)));
            let taken = grown.take_history().expect("a history was created");
            assert_eq!((taken.id, taken.carried), (id, 3));
            assert_eq!(grown.id(), id, "the id stays after the history leaves");
            assert_eq!(grown.history().map(|h| h.carried), (id >= BOXED).then_some(0));

            let arrived = Identity::new(id, Some(Box::new(History { carried: 5, ..History::default() })));
            assert_eq!((arrived.id(), arrived.history().map(|h| h.carried)), (id, Some(5)));
        }
    }

    /// Replacing or dropping an identity frees its box: the box holds a
    /// shared dead-letter record, whose count shows the box was dropped.
    #[test]
    fn replacing_or_dropping_an_identity_frees_its_history() {
        let record = std::sync::Arc::new(crate::dead_letter::DeadLetterRecord {
            source_queue: "q".into(),
            reason: crate::dead_letter::DeadLetterReason::Expired,
            delivery_count: 1,
            attempts: Vec::new(),
            dead_lettered_at: crate::clock::Nanos(0),
        });
        let history = |record: &std::sync::Arc<crate::dead_letter::DeadLetterRecord>| {
            Some(Box::new(History { dead_letter: Some(record.clone()), ..History::default() }))
        };
        let mut identity = Identity::new(9, history(&record));
        assert_eq!((identity.id(), std::sync::Arc::strong_count(&record)), (9, 2));
        identity = Identity::new(10, history(&record));
        assert_eq!(std::sync::Arc::strong_count(&record), 2, "the replaced identity's box was freed");
        assert_eq!(identity.id(), 10);
        drop(identity);
        assert_eq!(std::sync::Arc::strong_count(&record), 1, "the dropped identity's box was freed");
    }
}
