//! The `receipt_parse` check: receipt text from anywhere never panics the
//! parser, and a parsed receipt used on a queue either fails with a typed
//! error or acts on exactly the attempt it was issued for.
//!
//! Invariant checked: an operation accepts a receipt only if it equals, field
//! for field, a receipt this engine issued for the attempt that holds the
//! message now (or, for a late ack, the attempt whose lease just ran out).

use std::str::FromStr;
use std::time::Duration;

use leaseq::{Engine, LeaseError, ManualClock, QueueConfig, Receipt};

#[cfg(feature = "arbitrary")]
use arbitrary::Arbitrary;

/// Where the text comes from.
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReceiptText {
    /// Arbitrary bytes, read as UTF-8 with replacement.
    Bytes(Vec<u8>),
    /// An arbitrary string.
    Text(String),
    /// A receipt the engine issued (`which % 4`: three current, one stale),
    /// with byte edits applied to its text.
    Edited {
        /// Which issued receipt.
        which: u8,
        /// Edits, in order.
        edits: Vec<Edit>,
    },
}

/// One change to a receipt's text.
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edit {
    /// Replace the byte at `at % len`.
    Replace {
        /// Position.
        at: u8,
        /// New byte.
        byte: u8,
    },
    /// Insert a byte before `at % (len + 1)`.
    Insert {
        /// Position.
        at: u8,
        /// Byte.
        byte: u8,
    },
    /// Remove the byte at `at % len`.
    Remove {
        /// Position.
        at: u8,
    },
}

/// What to do with a receipt that parses.
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// `ack`.
    Ack,
    /// `extend` by ten seconds.
    Extend,
    /// `release` at once.
    Release,
    /// `dead_letter`.
    DeadLetter,
}

/// One input of the `receipt_parse` target.
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiptInput {
    /// The text.
    pub text: ReceiptText,
    /// What to do with it if it parses.
    pub then: Use,
    /// Let the leases run out first (late acks, `Expired`).
    pub expire_first: bool,
}

/// Runs one input; `Err` describes a finding.
pub fn check(input: &ReceiptInput) -> Result<(), String> {
    let clock = ManualClock::new();
    let engine = Engine::builder().clock(clock.clone()).default_shards(1).build();
    let dlq = engine.create_queue("dlq", QueueConfig::default()).map_err(|e| e.to_string())?;
    let config = QueueConfig::default().shards(2).dead_letter_queue("dlq");
    let queue = engine.create_queue("q", config).map_err(|e| e.to_string())?;
    for k in 0..4u8 {
        queue.send(vec![k]).map_err(|e| e.to_string())?;
    }
    let mut deliveries = queue.receive(4).map_err(|e| e.to_string())?;
    // The first delivery's attempt ends: its receipt is stale.
    let stale = deliveries.remove(0);
    queue.ack(&stale.receipt).map_err(|e| e.to_string())?;
    let current: Vec<Receipt> = deliveries.iter().map(|d| d.receipt).collect();
    if input.expire_first {
        clock.advance(Duration::from_secs(31));
    }

    let text = match &input.text {
        ReceiptText::Bytes(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        ReceiptText::Text(text) => text.clone(),
        ReceiptText::Edited { which, edits } => {
            let base = if which % 4 == 0 { stale.receipt } else { current[usize::from(which % 4) - 1] };
            edit(base.to_string().into_bytes(), edits)
        }
    };
    let Ok(receipt) = Receipt::from_str(&text) else {
        return Ok(());
    };
    if receipt.to_string() != text {
        return Err(format!("{text:?} parsed, but displays as {receipt}"));
    }

    let before = (queue.stats(), dlq.stats());
    let result = match input.then {
        Use::Ack => queue.ack(&receipt),
        Use::Extend => queue.extend(&receipt, Duration::from_secs(10)).map(|_| ()),
        Use::Release => queue.release(&receipt, Duration::ZERO),
        Use::DeadLetter => queue.dead_letter(&receipt, "fuzz"),
    };
    let after = (queue.stats(), dlq.stats());
    let moved = |s: &(leaseq::QueueStats, leaseq::QueueStats)| {
        (s.0.ready, s.0.in_flight, s.0.acked, s.0.extensions, s.0.released, s.0.dead_lettered, s.1.sent)
    };
    match result {
        Ok(()) => {
            if !current.contains(&receipt) {
                return Err(format!("{text:?} was accepted by {:?} but is no current receipt", input.then));
            }
            if moved(&before) == moved(&after) {
                return Err(format!("{:?} with {text:?} succeeded but changed nothing", input.then));
            }
        }
        Err(error) => {
            if current.contains(&receipt) && !matches!(error, LeaseError::Expired) {
                return Err(format!("the current receipt {text:?} was refused by {:?}: {error:?}", input.then));
            }
            if moved(&before) != moved(&after) {
                return Err(format!("{:?} with {text:?} failed ({error}) but changed the queue", input.then));
            }
        }
    }
    Ok(())
}

fn edit(mut bytes: Vec<u8>, edits: &[Edit]) -> String {
    for e in edits.iter().take(16) {
        match *e {
            Edit::Replace { at, byte } if !bytes.is_empty() => {
                let at = usize::from(at) % bytes.len();
                bytes[at] = byte;
            }
            Edit::Insert { at, byte } => {
                let at = usize::from(at) % (bytes.len() + 1);
                bytes.insert(at, byte);
            }
            Edit::Remove { at } if !bytes.is_empty() => {
                let at = usize::from(at) % bytes.len();
                bytes.remove(at);
            }
            _ => {}
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}
