//! The consumer side: the pieces that make holding a lease correctly the
//! easy thing. See `docs/consumer.md` for the failure scenarios each one
//! prevents.
//!
//! * [`LeasePolicy`] (policy.rs): when to renew (before the deadline, with
//!   slack) and when to stop (total cap, renewal count, missing heartbeat), as
//!   a pure function [`LeasePolicy::decide`].
//! * [`LeaseKeeper`] (keeper.rs): one keeper renews many leases off the
//!   workers' threads — its own thread ([`LeaseKeeper::spawn`]) or ticked by
//!   the caller ([`LeaseKeeper::manual`] + [`LeaseKeeper::tick`]).
//! * [`LeaseGuard`] (guard.rs): what a worker holds; shows whether the lease
//!   is held, why it was lost, signals loss, and finishes the attempt.
//! * [`Pool`] / [`run`] (pool.rs): workers that receive with long polling,
//!   run a handler inside a kept lease, ack / retry / dead-letter by its
//!   answer, and shut down without stranding leases.
//! * [`Queue::diagnose`](crate::Queue::diagnose) (diagnose.rs): tells a
//!   visibility timeout set too short from poison messages.
//!
//! Invariant of the module: nothing here changes the engine's lease rules;
//! every renewal and every finish is an ordinary `Queue` call, so a consumer
//! built from these pieces is exactly as safe as the engine's receipts and
//! fencing tokens make it, and no less.

mod cell;
mod diagnose;
mod guard;
mod keeper;
mod policy;
mod pool;

pub use cell::LeaseStatus;
pub use diagnose::{Diagnosis, PoisonMessage, TimeoutEvidence, Verdict};
pub use guard::{LeaseGuard, LeaseLost, LossSignal};
pub use keeper::{KeepRefused, LeaseKeeper, Tick};
pub use policy::{Decision, DropAction, LeasePolicy, LeaseState, LossReason, PolicyError};
pub use pool::{BoxError, HandlerError, MAX_WORKERS, Pool, PoolBuilder, PoolError, PoolStats, ShutdownReport, run};
