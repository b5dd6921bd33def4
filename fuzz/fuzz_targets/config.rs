//! Arbitrary queue configs and names into `create_queue`: validation accepts
//! exactly the configs the model's rules accept, never panics, and never
//! leaves a half-created queue.
//!
//! The checking code is `leaseq_model::differential::config`; the stable test
//! `model/tests/corpus_replay.rs` replays this target's corpus through it.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(finding) = leaseq_model::differential::config(data) {
        panic!("{finding}");
    }
});
