//! A map from message ids to values, laid out for the way the engine hands
//! ids out: in dense blocks (one per shard), so a live id usually shares a
//! 64-id page with its neighbours. An insert or remove is then one small
//! hash lookup of the page and a store into its slot: no probing among
//! neighbours and no rehash that moves every value as the map grows (the
//! writer applies every record to its replica: without one it ran 1.5-1.6x
//! faster under `SyncPolicy::Never`; figures in docs/durability.md and
//! `bench/examples/id_maps.rs`).
//!
//! Invariants:
//!
//! * An id is in at most one place: slot `id % 64` of page `id / 64`, or
//!   `sparse`. `len` counts both; a page's `live` counts its full slots,
//!   and a page with none is freed at once.
//! * Space follows the entries: a page costs 64 slots however few it holds,
//!   so once the pages' slots pass `SWEEP_RATIO` times the entries (plus a
//!   fixed slack), `sweep` moves the entries of pages holding fewer than
//!   `KEEP_PAGE_AT` into `sparse` and frees those pages. After a sweep the
//!   slots are at most `PAGE / KEEP_PAGE_AT` times the entries, so the next
//!   sweep needs the entries to halve or that many pages to be added: each
//!   sweep's walk over the pages is paid for by as many operations.

use std::collections::HashMap;
use std::fmt;

use crate::log::replica::IdHash;

const PAGE_BITS: u32 = 6;
const PAGE: usize = 1 << PAGE_BITS;
/// A page holding fewer entries than this is dissolved by a sweep.
const KEEP_PAGE_AT: u32 = 16;
/// Slots per entry beyond which a sweep runs (twice what a sweep leaves).
const SWEEP_RATIO: usize = 2 * PAGE / KEEP_PAGE_AT as usize;
/// Slots allowed beyond that ratio (small tables never sweep; the unit
/// tests' tables are small, and sweep).
const SLACK_SLOTS: usize = if cfg!(test) { 2 * PAGE } else { 64 * PAGE };

#[derive(Clone)]
struct Page<V> {
    live: u32,
    slots: [Option<V>; PAGE],
}

impl<V> Page<V> {
    fn boxed() -> Box<Self> {
        Box::new(Page { live: 0, slots: std::array::from_fn(|_| None) })
    }
}

/// See the module docs.
#[derive(Clone)]
pub(crate) struct IdTable<V> {
    pages: HashMap<u64, Box<Page<V>>, IdHash>,
    sparse: HashMap<u64, V, IdHash>,
    len: usize,
}

impl<V> Default for IdTable<V> {
    fn default() -> Self {
        IdTable { pages: HashMap::default(), sparse: HashMap::default(), len: 0 }
    }
}

fn split(id: u64) -> (u64, usize) {
    (id >> PAGE_BITS, (id & (PAGE as u64 - 1)) as usize)
}

impl<V> IdTable<V> {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn get(&self, id: u64) -> Option<&V> {
        let (page, slot) = split(id);
        self.pages.get(&page).and_then(|p| p.slots[slot].as_ref()).or_else(|| self.sparse.get(&id))
    }

    pub(crate) fn get_mut(&mut self, id: u64) -> Option<&mut V> {
        let (page, slot) = split(id);
        match self.pages.get_mut(&page).and_then(|p| p.slots[slot].as_mut()) {
            Some(value) => Some(value),
            None => self.sparse.get_mut(&id),
        }
    }

    /// Inserts or replaces; returns the value replaced.
    pub(crate) fn insert(&mut self, id: u64, value: V) -> Option<V> {
        if !self.sparse.is_empty() {
            if let Some(old) = self.sparse.get_mut(&id) {
                return Some(std::mem::replace(old, value));
            }
        }
        let (page, slot) = split(id);
        let mut added_page = false;
        let page = self.pages.entry(page).or_insert_with(|| {
            added_page = true;
            Page::boxed()
        });
        let old = page.slots[slot].replace(value);
        if old.is_none() {
            page.live += 1;
            self.len += 1;
        }
        if added_page {
            self.sweep_if_sparse();
        }
        old
    }

    pub(crate) fn remove(&mut self, id: u64) -> Option<V> {
        let (page_at, slot) = split(id);
        if let Some(page) = self.pages.get_mut(&page_at) {
            if let Some(value) = page.slots[slot].take() {
                page.live -= 1;
                if page.live == 0 {
                    self.pages.remove(&page_at);
                }
                self.len -= 1;
                self.sweep_if_sparse();
                return Some(value);
            }
        }
        let value = self.sparse.remove(&id)?;
        self.len -= 1;
        Some(value)
    }

    /// Every entry, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, &V)> + '_ {
        let paged = self.pages.iter().flat_map(|(page, p)| {
            p.slots
                .iter()
                .enumerate()
                .filter_map(move |(slot, v)| v.as_ref().map(|v| (page << PAGE_BITS | slot as u64, v)))
        });
        paged.chain(self.sparse.iter().map(|(id, v)| (*id, v)))
    }

    /// Keeps the entries for which `keep` says so.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(u64, &mut V) -> bool) {
        let mut removed = 0;
        self.pages.retain(|page, p| {
            for (slot, entry) in p.slots.iter_mut().enumerate() {
                if let Some(value) = entry {
                    if !keep(*page << PAGE_BITS | slot as u64, value) {
                        *entry = None;
                        p.live -= 1;
                        removed += 1;
                    }
                }
            }
            p.live > 0
        });
        self.sparse.retain(|id, value| {
            let kept = keep(*id, value);
            removed += usize::from(!kept);
            kept
        });
        self.len -= removed;
        self.sweep_if_sparse();
    }

    fn sweep_if_sparse(&mut self) {
        if self.pages.len() * PAGE > self.len * SWEEP_RATIO + SLACK_SLOTS {
            self.sweep();
        }
    }

    /// Dissolves the pages holding fewer than `KEEP_PAGE_AT` entries.
    fn sweep(&mut self) {
        let sparse = &mut self.sparse;
        self.pages.retain(|page, p| {
            if p.live >= KEEP_PAGE_AT {
                return true;
            }
            for (slot, entry) in p.slots.iter_mut().enumerate() {
                if let Some(value) = entry.take() {
                    sparse.insert(*page << PAGE_BITS | slot as u64, value);
                }
            }
            false
        });
    }
}

impl<V: PartialEq> PartialEq for IdTable<V> {
    /// Equal when they hold the same entries, however laid out.
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().all(|(id, value)| other.get(id) == Some(value))
    }
}

impl<V: fmt::Debug> fmt::Debug for IdTable<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64, u32),
        Remove(u64),
        Bump(u64),
        RetainEven,
    }

    /// Ids from a few dense blocks far apart, as shards take them.
    fn id() -> impl Strategy<Value = u64> {
        (0u64..4, 0u64..600).prop_map(|(block, at)| block * (1 << 16) + at)
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (id(), any::<u32>()).prop_map(|(id, v)| Op::Insert(id, v)),
            5 => id().prop_map(Op::Remove),
            2 => id().prop_map(Op::Bump),
            1 => Just(Op::RetainEven),
        ]
    }

    proptest! {
        // Few cases: these unit tests also run under valgrind in CI.
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Behaves as a `HashMap` whatever the operations, sweeps included.
        #[test]
        fn matches_a_hash_map(ops in proptest::collection::vec(op(), 1..1500)) {
            let mut table = IdTable::default();
            let mut model: HashMap<u64, u32> = HashMap::new();
            for op in ops {
                match op {
                    Op::Insert(id, v) => prop_assert_eq!(table.insert(id, v), model.insert(id, v)),
                    Op::Remove(id) => prop_assert_eq!(table.remove(id), model.remove(&id)),
                    Op::Bump(id) => {
                        if let Some(v) = table.get_mut(id) {
                            *v = v.wrapping_add(1);
                        }
                        if let Some(v) = model.get_mut(&id) {
                            *v = v.wrapping_add(1);
                        }
                    }
                    Op::RetainEven => {
                        table.retain(|_, v| *v % 2 == 0);
                        model.retain(|_, v| *v % 2 == 0);
                    }
                }
                prop_assert_eq!(table.len(), model.len());
            }
            let mut entries: Vec<(u64, u32)> = table.iter().map(|(id, v)| (id, *v)).collect();
            entries.sort_unstable();
            let mut expected: Vec<(u64, u32)> = model.into_iter().collect();
            expected.sort_unstable();
            prop_assert_eq!(entries, expected);
        }
    }

    #[test]
    fn scattered_survivors_do_not_keep_a_page_each() {
        const IDS: u64 = 1 << 16;
        let mut table = IdTable::default();
        for id in 0..IDS {
            table.insert(id, id);
        }
        // One in every 64 ids survives: a page each without sweeps.
        table.retain(|id, _| id % 64 == 0);
        assert_eq!(table.len() as u64, IDS / 64);
        assert!(
            table.pages.len() * PAGE <= table.len() * SWEEP_RATIO + SLACK_SLOTS,
            "{} pages for {} entries",
            table.pages.len(),
            table.len()
        );
        assert!(!table.sparse.is_empty(), "a sweep moved them");
        assert!((0..IDS).step_by(64).all(|id| table.get(id) == Some(&id)));
        // A layout does not make two tables unequal.
        let mut dense = IdTable::default();
        for id in (0..IDS).step_by(64) {
            dense.insert(id, id);
        }
        assert_eq!(table, dense);
    }
}
