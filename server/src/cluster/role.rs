//! What this node does with an SQS request right now: serve it from its own
//! engine, forward it to the leader, or refuse it as unavailable.
//!
//! Invariant: a node answers from its own registry only while it leads a
//! term, runs that term's engine, and a quorum confirmed its leadership less
//! than `lease` ago (`confirm`). A leader cut off from its quorum therefore
//! stops answering within `lease`, reads included, while a new leader can be
//! elected only after the followers' election timeout (longer than `lease`)
//! has passed without its heartbeats. Writes never depend on the lease: each
//! one commits through the Raft log or fails.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use leaseq_cluster::NodeId;

use crate::registry::Registry;

/// How a request is answered (see the module docs).
#[derive(Debug, Clone)]
pub(crate) enum Route {
    /// Serve it from this registry.
    Local(Arc<Registry>),
    /// Send it on to the leader at this address.
    Forward {
        /// The leader's id.
        leader: NodeId,
        /// Its `host:port`.
        addr: String,
    },
    /// Nobody can serve it now, and why.
    Unavailable(String),
}

/// This node's part in the group, as the controller last saw it.
#[derive(Debug, Clone)]
pub(crate) enum Role {
    /// Leading `term` with `registry` over that term's engine.
    Leading { term: u64, registry: Arc<Registry>, confirmed: Arc<Confirmation> },
    /// Following the leader at `addr`.
    Following { leader: NodeId, addr: String },
    /// No serving leader known (electing, starting an engine, or the
    /// engine failed), and why.
    Waiting(String),
}

impl Role {
    /// How to answer a request now.
    pub(crate) fn route(&self) -> Route {
        match self {
            Role::Leading { registry, confirmed, term } => {
                if confirmed.fresh() {
                    Route::Local(registry.clone())
                } else {
                    Route::Unavailable(format!(
                        "this node led term {term} but no quorum has confirmed it for {:?}: it serves nothing until \
                         one does or another node is elected",
                        confirmed.lease
                    ))
                }
            }
            Role::Following { leader, addr } => Route::Forward { leader: *leader, addr: addr.clone() },
            Role::Waiting(why) => Route::Unavailable(why.clone()),
        }
    }

    /// The term this node serves as leader, if it does.
    pub(crate) fn leading_term(&self) -> Option<u64> {
        match self {
            Role::Leading { term, .. } => Some(*term),
            _ => None,
        }
    }
}

/// When a quorum last confirmed this node's leadership.
#[derive(Debug)]
pub(crate) struct Confirmation {
    origin: Instant,
    /// Nanoseconds after `origin` at which the last successful confirmation
    /// started (a round that started then and succeeded proves leadership
    /// from that moment, not from when its answer arrived).
    started_at: AtomicU64,
    lease: Duration,
}

impl Confirmation {
    /// A confirmation valid for `lease`, starting now.
    pub(crate) fn new(lease: Duration) -> Self {
        let confirmation = Confirmation { origin: Instant::now(), started_at: AtomicU64::new(0), lease };
        confirmation.confirm(Instant::now());
        confirmation
    }

    /// A confirmation round that started at `started` succeeded.
    pub(crate) fn confirm(&self, started: Instant) {
        let nanos = started.saturating_duration_since(self.origin).as_nanos() as u64;
        // Relaxed: one word, read only to compare against the clock; a
        // reader that sees an older value refuses a little early, never late.
        self.started_at.fetch_max(nanos, Ordering::Relaxed);
    }

    /// Whether the last confirmation is younger than the lease.
    pub(crate) fn fresh(&self) -> bool {
        let started = self.origin + Duration::from_nanos(self.started_at.load(Ordering::Relaxed));
        started.elapsed() < self.lease
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leader_whose_confirmation_is_older_than_the_lease_serves_nothing() {
        let registry = Arc::new(Registry::open(leaseq::Engine::new(), None).unwrap());
        let confirmed = Arc::new(Confirmation::new(Duration::from_millis(500)));
        let role = Role::Leading { term: 3, registry, confirmed: confirmed.clone() };
        assert!(matches!(role.route(), Route::Local(_)));
        std::thread::sleep(Duration::from_millis(1100));
        match role.route() {
            Route::Unavailable(why) => assert!(why.contains("term 3"), "{why}"),
            other => panic!("a stale leader answered: {other:?}"),
        }
        confirmed.confirm(Instant::now());
        assert!(matches!(role.route(), Route::Local(_)));
        assert_eq!(role.leading_term(), Some(3));
    }

    #[test]
    fn followers_forward_and_waiting_nodes_refuse() {
        let following = Role::Following { leader: 2, addr: "127.0.0.1:9402".into() };
        assert!(matches!(following.route(), Route::Forward { leader: 2, ref addr } if addr == "127.0.0.1:9402"));
        assert!(matches!(Role::Waiting("electing".into()).route(), Route::Unavailable(why) if why == "electing"));
        assert_eq!(following.leading_term(), None);
    }
}
