//! # leaseq-sim
//!
//! Runs the real `leaseq` engine under a `ManualClock` to show the visibility
//! timeout trade-off with numbers: short timeouts recover quickly from crashes
//! and duplicate more; long ones duplicate less and stall longer; renewal by a
//! lease keeper removes most of the tension for variable-length work; and
//! idempotent effects, not the timeout, are what keep the outcome correct.
//!
//! The simulator lives in its own crate rather than in `bench/`: it measures
//! behaviour in virtual time, not speed in wall time, and its users are people
//! sizing a queue, not people profiling the engine.

#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod chart;
pub mod cli;
mod report;
mod rng;
mod scenario;
mod simulation;
mod sweep;

pub use chart::{Chart, Series};
pub use report::{Report, Summary};
pub use rng::{Durations, Rng};
pub use scenario::{Policy, Scenario};
pub use simulation::simulate;
pub use sweep::{DUPLICATE_TOLERANCE, Recommendation, SweepOutput, renewing_policy, sweep};
