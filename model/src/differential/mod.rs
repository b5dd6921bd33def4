//! Differential checking: the engine against the model, and the checks the
//! fuzz targets run.
//!
//! Every fuzz target in `fuzz/fuzz_targets/` is a thin wrapper around one
//! function here, and `tests/corpus_replay.rs` replays each target's corpus
//! through the same function on stable Rust:
//!
//! * [`run`] (target `ops_vs_model`): a sequence of [`Op`]s on one engine with
//!   a `ManualClock` and on the [`crate::Model`]; every result and the final
//!   state must match.
//! * [`receipt_text::check`] (target `receipt_parse`): arbitrary text through
//!   `Receipt::from_str` and, if it parses, through every lease operation.
//! * [`config::check`] (target `config`): arbitrary configs and names through
//!   `create_queue`.
//!
//! Each returns `Err` with a description on a finding; a panic is a finding too.

pub mod config;
mod ops;
pub mod receipt_text;
mod run;

pub use ops::{BackoffSpec, ConfigSpec, NAMES, NameChoice, Op, ReceiptPick, Span};
pub use run::{Divergence, MAX_RESTARTS, MAX_STEPS, Outcome, error_key, run};

/// Decodes fuzz input bytes into operations, as the `ops_vs_model` target does.
#[cfg(feature = "arbitrary")]
pub fn ops_from_bytes(data: &[u8]) -> Vec<Op> {
    let mut input = arbitrary::Unstructured::new(data);
    let mut ops = Vec::new();
    while ops.len() < MAX_STEPS {
        match input.arbitrary::<Op>() {
            Ok(op) => ops.push(op),
            Err(_) => break,
        }
        if input.is_empty() {
            break;
        }
    }
    ops
}

/// Runs the `ops_vs_model` check on fuzz input bytes.
#[cfg(feature = "arbitrary")]
pub fn ops_vs_model(data: &[u8]) -> Result<(), String> {
    let ops = ops_from_bytes(data);
    run(&ops).map(|_| ()).map_err(|divergence| format!("{divergence}\nops: {ops:#?}"))
}

/// Runs the `receipt_parse` check on fuzz input bytes (decoded as libFuzzer's
/// `fuzz_target!(|input: T| ..)` would, with `arbitrary_take_rest`).
#[cfg(feature = "arbitrary")]
pub fn receipt_parse(data: &[u8]) -> Result<(), String> {
    use arbitrary::Arbitrary;
    let Ok(input) = receipt_text::ReceiptInput::arbitrary_take_rest(arbitrary::Unstructured::new(data)) else {
        return Ok(());
    };
    receipt_text::check(&input).map_err(|finding| format!("{finding}\ninput: {input:?}"))
}

/// Runs the `config` check on fuzz input bytes.
#[cfg(feature = "arbitrary")]
pub fn config(data: &[u8]) -> Result<(), String> {
    use arbitrary::Arbitrary;
    let Ok(input) = config::ConfigInput::arbitrary_take_rest(arbitrary::Unstructured::new(data)) else {
        return Ok(());
    };
    config::check(&input).map_err(|finding| format!("{finding}\ninput: {input:?}"))
}
