//! Message identity and attempt-scoped receipts.
//!
//! Invariant: a `MessageId` is stable for a message's whole life (across
//! attempts, dead-lettering and redrive); a `Receipt` names exactly one delivery
//! attempt (slot + generation) and carries a keyed integrity tag, so a receipt
//! that was altered, made up, or issued by another engine or queue is refused
//! with a typed error before it can touch any lease.

use std::fmt;
use std::str::FromStr;

use crate::error::ReceiptError;
use crate::lease::GEN_MASK;
use crate::queue::QueueCore;

/// A message's stable identity, unique within one engine instance.
///
/// Use it for application-level deduplication and tracing; use the `Receipt`
/// to act on a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MessageId(pub(crate) u64);

impl MessageId {
    /// The id as a number (for storing in a database column).
    #[must_use]
    pub fn as_u64(self) -> u64 {
        self.0
    }

    /// Rebuilds an id from `as_u64`.
    #[must_use]
    pub fn from_u64(raw: u64) -> Self {
        MessageId(raw)
    }
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "m-{:016x}", self.0)
    }
}

/// Proof of one delivery attempt: what `ack`, `extend`, `release` and
/// `dead_letter` take.
///
/// `Display` and `FromStr` round-trip, so a receipt can cross a process
/// boundary as text.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Receipt {
    pub(crate) engine: u64,
    pub(crate) queue: u32,
    pub(crate) shard: u16,
    pub(crate) slot: u32,
    pub(crate) generation: u64,
    pub(crate) tag: u64,
}

impl fmt::Debug for Receipt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Receipt({self})")
    }
}

const PREFIX: &str = "lq1";
/// Longest text `Display` writes; longer input is refused before parsing.
const MAX_TEXT: usize = 96;

impl Receipt {
    /// The attempt generation: strictly increases with each delivery of the
    /// message while it stays on one queue. See `Delivery::fencing_token` for
    /// the value to fence external writes with.
    #[must_use]
    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub(crate) fn mint(key: &ReceiptKey, engine: u64, queue: u32, shard: u16, slot: u32, generation: u64) -> Self {
        let tag = key.tag(engine, queue, shard, slot, generation);
        Receipt { engine, queue, shard, slot, generation, tag }
    }

    pub(crate) fn verify(&self, key: &ReceiptKey) -> bool {
        key.tag(self.engine, self.queue, self.shard, self.slot, self.generation) == self.tag
    }

    /// Whether `queue` issued this receipt: the same checks (engine, queue,
    /// integrity tag) every lease operation makes first, without touching a
    /// lease. The lease keeper uses it to refuse a delivery handed to it with
    /// the wrong queue (unused under loom, which has no consumer module).
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn issued_by(&self, queue: &QueueCore) -> Result<(), ReceiptError> {
        if self.engine != queue.engine.id {
            return Err(ReceiptError::WrongEngine);
        }
        if self.queue != queue.ordinal {
            return Err(ReceiptError::WrongQueue { presented_to: queue.name.clone() });
        }
        if !self.verify(&queue.engine.key) {
            return Err(ReceiptError::Forged);
        }
        Ok(())
    }
}

impl fmt::Display for Receipt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PREFIX}.{:x}.{:x}.{:x}.{:x}.{:x}.{:x}",
            self.engine, self.queue, self.shard, self.slot, self.generation, self.tag
        )
    }
}

impl FromStr for Receipt {
    type Err = ReceiptError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let malformed = |reason| ReceiptError::Malformed { reason };
        if s.len() > MAX_TEXT {
            return Err(malformed("too long"));
        }
        let mut parts = s.split('.');
        if parts.next() != Some(PREFIX) {
            return Err(malformed("does not start with 'lq1.'"));
        }
        let mut field = |max: u64| -> Result<u64, ReceiptError> {
            let text = parts.next().ok_or(malformed("too few fields"))?;
            if text.is_empty() || text.len() > 16 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(malformed("a field is not lowercase hex"));
            }
            if text.bytes().any(|b| b.is_ascii_uppercase()) || (text.len() > 1 && text.starts_with('0')) {
                return Err(malformed("a field is not in canonical form"));
            }
            let value = u64::from_str_radix(text, 16).map_err(|_| malformed("a field is not hex"))?;
            if value > max {
                return Err(malformed("a field is out of range"));
            }
            Ok(value)
        };
        let engine = field(u64::MAX)?;
        let queue = field(u64::from(u32::MAX))? as u32;
        let shard = field(u64::from(u16::MAX))? as u16;
        let slot = field(u64::from(u32::MAX))? as u32;
        let generation = field(GEN_MASK)?;
        let tag = field(u64::MAX)?;
        if parts.next().is_some() {
            return Err(malformed("too many fields"));
        }
        Ok(Receipt { engine, queue, shard, slot, generation, tag })
    }
}

/// The per-engine secret that tags receipts.
///
/// The tag is a keyed 64-bit mix, not a cryptographic MAC: it makes an altered
/// or invented receipt fail with overwhelming probability, which is what an
/// in-process queue needs; it is not meant to resist an attacker who collects
/// many receipts.
#[derive(Clone, Copy)]
pub(crate) struct ReceiptKey {
    k0: u64,
    k1: u64,
    /// The engine this key serves and the first round of the tag for it,
    /// which depends on nothing else: computed once, not per receipt.
    engine: u64,
    engine_round: u64,
}

impl fmt::Debug for ReceiptKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ReceiptKey(..)")
    }
}

impl ReceiptKey {
    /// A fresh random key (from the standard library's per-process random
    /// hasher seeds) for the engine `engine`.
    pub(crate) fn random(engine: u64) -> Self {
        let k0 = random_u64();
        let k1 = random_u64();
        ReceiptKey { k0, k1, engine, engine_round: mix(engine ^ k0) }
    }

    fn tag(&self, engine: u64, queue: u32, shard: u16, slot: u32, generation: u64) -> u64 {
        let a = if engine == self.engine { self.engine_round } else { mix(engine ^ self.k0) };
        let b = mix(a ^ (u64::from(queue) << 32 | u64::from(slot)) ^ self.k1);
        let c = mix(b ^ generation.rotate_left(17) ^ (u64::from(shard) << 48));
        mix(c ^ self.k0.rotate_left(29))
    }
}

/// A strong 64-bit finaliser (the murmur3/splitmix family).
pub(crate) fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A random 64-bit value without a crate dependency: `RandomState` is seeded
/// from the OS once per process and varied per instance.
pub(crate) fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(0x6c65_6173_6571);
    hasher.finish()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn sample() -> (ReceiptKey, Receipt) {
        let key = ReceiptKey::random(0xdead_beef);
        (key, Receipt::mint(&key, 0xdead_beef, 7, 1, 42, 9))
    }

    /// The first round cached for the key's own engine gives the same tags
    /// as computing it, so receipts do not depend on which path minted them.
    #[test]
    fn the_cached_engine_round_changes_no_tag() {
        let key = ReceiptKey::random(0xdead_beef);
        let uncached = ReceiptKey { engine: !key.engine, ..key };
        for (queue, shard, slot, generation) in [(7, 1, 42, 9), (0, 0, 0, 0), (u32::MAX, 255, 1 << 20, 1 << 50)] {
            assert_eq!(
                key.tag(0xdead_beef, queue, shard, slot, generation),
                uncached.tag(0xdead_beef, queue, shard, slot, generation)
            );
        }
    }

    #[test]
    fn display_and_parse_round_trip() {
        let (key, receipt) = sample();
        let text = receipt.to_string();
        assert!(text.starts_with("lq1.deadbeef.7.1.2a.9."), "{text}");
        let parsed: Receipt = text.parse().unwrap();
        assert_eq!(parsed, receipt);
        assert!(parsed.verify(&key));
    }

    #[test]
    fn any_altered_field_fails_verification() {
        let (key, r) = sample();
        let variants = [
            Receipt { engine: r.engine ^ 1, ..r },
            Receipt { queue: r.queue + 1, ..r },
            Receipt { shard: r.shard + 1, ..r },
            Receipt { slot: r.slot + 1, ..r },
            Receipt { generation: r.generation + 1, ..r },
            Receipt { tag: r.tag ^ 1, ..r },
        ];
        for v in variants {
            assert!(!v.verify(&key), "{v} verified");
        }
        assert!(!r.verify(&ReceiptKey::random(0xdead_beef)), "another engine's key accepts it");
    }

    #[test]
    fn malformed_text_is_refused_with_a_reason() {
        let (_, r) = sample();
        let good = r.to_string();
        let cases = [
            String::new(),
            "lq1".to_string(),
            "lq2.1.1.1.1.1.1".to_string(),
            "lq1.1.1.1.1.1".to_string(),
            format!("{good}.1"),
            good.replace("lq1.", "lq1.-"),
            "lq1.1.100000000.1.1.1.1".to_string(),
            "lq1.1.1.10000.1.1.1".to_string(),
            "lq1.1.1.1.1.100000000000000.1".to_string(),
            "lq1.01.1.1.1.1.1".to_string(),
            "lq1.A.1.1.1.1.1".to_string(),
            "lq1.1..1.1.1.1".to_string(),
            "x".repeat(500),
        ];
        for case in cases {
            match case.parse::<Receipt>() {
                Err(ReceiptError::Malformed { .. }) => {}
                other => panic!("{case:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn message_id_displays_and_round_trips() {
        let id = MessageId(0x1234);
        assert_eq!(id.to_string(), "m-0000000000001234");
        assert_eq!(MessageId::from_u64(id.as_u64()), id);
    }
}
