//! Benchmarks of the leaseq engine, each beside a same-run baseline.
//!
//! Invariant: every scenario is written once against [`Subject`] and run on
//! the engine and on [`BaselineQueue`] in the same process, so every figure
//! has a ratio measured under the same machine conditions.

#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod baseline;
pub mod subject;

pub use baseline::{BaselineDelivery, BaselineQueue, BaselineReceipt};
pub use subject::{EngineSubject, Setup, Subject};
