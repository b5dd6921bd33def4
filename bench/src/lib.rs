//! Benchmarks of the leaseq engine, each beside a same-run baseline.
//!
//! Invariant: every scenario is written once against [`Subject`] and run on
//! the engine and on [`BaselineQueue`] in the same process, so every figure
//! has a ratio measured under the same machine conditions. The
//! independent-cycles workload also runs on [`LeanQueue`], the queue a user
//! would write without the engine's contract.

#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod baseline;
pub mod lean_baseline;
pub mod subject;

pub use baseline::{BaselineDelivery, BaselineQueue, BaselineReceipt};
pub use lean_baseline::{LeanDelivery, LeanQueue, LeanReceipt};
pub use subject::{CycleQueue, EngineSubject, Setup, Subject};
