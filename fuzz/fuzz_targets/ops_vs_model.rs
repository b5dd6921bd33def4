//! Operation sequences on one engine with a `ManualClock` against the
//! reference model; any divergence or panic is a crash.
//!
//! The checking code is `leaseq_model::differential::ops_vs_model`; the stable test
//! `model/tests/corpus_replay.rs` replays this target's corpus through it.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(finding) = leaseq_model::differential::ops_vs_model(data) {
        panic!("{finding}");
    }
});
