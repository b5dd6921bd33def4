//! # leaseq-model
//!
//! A reference model of the `leaseq` engine and the differential checks that
//! hold the engine to it.
//!
//! * [`Model`] is the engine's contract as plain single-threaded code: maps
//!   and queues, a number for the clock, no atomics. It is meant to be read
//!   next to the contract and trusted because it is short.
//! * [`differential`] drives an engine on a `ManualClock` and the model with
//!   the same operations and reports the first [`differential::Divergence`].
//!   The engine's property test, the fuzz targets in `fuzz/` and the stable
//!   corpus replay (`tests/corpus_replay.rs`) all go through it, so a fuzz
//!   finding replays on stable Rust.
//!
//! What the model leaves open (documented in `docs/fuzzing.md`): the order in
//! which messages made ready by one operation are received, any order on a
//! queue with more than one shard, and which of several dead-letter arrivals
//! in one instant get the last free slots.

#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod differential;
pub mod history;
mod message;
mod model;
mod stats;
pub mod validate;

pub use history::{
    Call, CheckError, CheckReport, History, Op, OpId, Outcome, Violation, check_bounded, read_ops, write_ops,
};
pub use model::{Model, ModelDelivery, ModelReceipt, QueueRef, ReceivePlan};
pub use stats::{Counters, ModelStats};
