//! Arbitrary text into `Receipt::from_str`, then into every lease operation:
//! never a panic, and a parsed receipt is refused with a typed error unless it
//! is exactly a current receipt.
//!
//! The checking code is `leaseq_model::differential::receipt_parse`; the stable test
//! `model/tests/corpus_replay.rs` replays this target's corpus through it.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(finding) = leaseq_model::differential::receipt_parse(data) {
        panic!("{finding}");
    }
});
