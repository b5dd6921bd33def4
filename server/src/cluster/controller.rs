//! The controller: one task per node that turns what Raft says about this
//! node (leader of which term, or follower of whom) into its `Role`, starts
//! the leader's engine when this node is elected, confirms the leadership
//! with a quorum every `CONFIRM_EVERY`, and replaces an engine whose writes
//! failed.
//!
//! Invariant: the role names a registry only for the term its engine was
//! started in, and only while this node still leads that term; the registry
//! of a lost term is dropped (its engine closed) as soon as the controller
//! sees the change, and requests that still hold it fail their writes
//! (the old engine's sink is fenced to its term).

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use leaseq::Engine;
use leaseq_cluster::{ClusterError, Node, NodeId};
use openraft::ServerState;
use tokio::sync::watch;

use super::role::{Confirmation, Role};
use crate::registry::Registry;

/// How often a leader asks a quorum to confirm it.
pub(crate) const CONFIRM_EVERY: Duration = Duration::from_millis(100);
/// How long an elected node waits to have applied its predecessors' entries
/// before it gives up this attempt (and tries again while it leads).
const START_WAIT: Duration = Duration::from_secs(10);

/// Shared between the controller and the request path.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) node: Node,
    pub(crate) role: RwLock<Role>,
    /// How long a confirmation lets the leader serve.
    pub(crate) lease: Duration,
}

impl Shared {
    pub(crate) fn role(&self) -> Role {
        self.role.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    fn set_role(&self, role: Role) {
        let old = std::mem::replace(&mut *self.role.write().unwrap_or_else(std::sync::PoisonError::into_inner), role);
        // The old registry (and with it, once no request holds it, the old
        // engine) is dropped here, outside the lock.
        drop(old);
    }

    fn id(&self) -> NodeId {
        self.node.id()
    }
}

/// Runs until `stop` turns true.
pub(crate) async fn run(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut metrics = shared.node.raft().metrics();
    loop {
        let now = metrics.borrow_and_update().clone();
        if let Some(term) = shared.node.led_in(&now) {
            lead(&shared, term).await;
        } else {
            let role = match now.current_leader {
                Some(leader) if leader != shared.id() => match now.membership_config.membership().get_node(&leader) {
                    Some(node) => Role::Following { leader, addr: node.addr.clone() },
                    None => Role::Waiting(format!("the leader, node {leader}, has no address in the membership")),
                },
                _ => Role::Waiting(format!("no leader is elected (this node is a {:?})", now.state)),
            };
            if shared.role().leading_term().is_some() {
                eprintln!("leaseq-server: node {}: no longer leading; its engine is closed", shared.id());
            }
            shared.set_role(role);
        }
        // Until the next pass: CONFIRM_EVERY, or sooner if who leads (or the
        // membership) changed. Raft's metrics change with every heartbeat
        // answered and every entry applied, and waking on each of them ran a
        // quorum confirmation (a heartbeat round) back to back, thousands a
        // second even with no requests at all.
        let seen = Leadership::of(&now);
        let next_pass = tokio::time::Instant::now() + CONFIRM_EVERY;
        loop {
            tokio::select! {
                changed = metrics.changed() => {
                    if changed.is_err() {
                        // Raft stopped: nothing will change; keep the pace.
                        tokio::time::sleep_until(next_pass).await;
                        break;
                    }
                    if Leadership::of(&metrics.borrow_and_update()) != seen {
                        break;
                    }
                }
                () = tokio::time::sleep_until(next_pass) => break,
                _ = stop.changed() => break,
            }
        }
        if *stop.borrow() {
            shared.set_role(Role::Waiting("this node is shutting down".into()));
            return;
        }
    }
}

/// The part of Raft's metrics that decides this node's role.
#[derive(Debug, PartialEq, Eq)]
struct Leadership {
    state: ServerState,
    term: u64,
    leader: Option<NodeId>,
    membership: Option<openraft::LogId<NodeId>>,
}

impl Leadership {
    fn of(metrics: &openraft::RaftMetrics<NodeId, openraft::BasicNode>) -> Self {
        Leadership {
            state: metrics.state,
            term: metrics.current_term,
            leader: metrics.current_leader,
            membership: *metrics.membership_config.log_id(),
        }
    }
}

/// One pass while this node leads `term`.
async fn lead(shared: &Shared, term: u64) {
    match shared.role() {
        Role::Leading { term: served, registry, confirmed } if served == term => {
            if let Some(why) = registry.engine().log_stats().and_then(|stats| stats.refusing) {
                eprintln!(
                    "leaseq-server: node {}: the engine of term {term} failed ({why}); replacing it",
                    shared.id()
                );
                shared.set_role(Role::Waiting(format!("the engine of term {term} failed ({why}); restarting it")));
                drop(registry);
                start(shared, term, true).await;
                return;
            }
            let started = Instant::now();
            let confirm = tokio::time::timeout(shared.lease, shared.node.raft().ensure_linearizable()).await;
            if matches!(confirm, Ok(Ok(_))) {
                confirmed.confirm(started);
            }
        }
        // An engine of this term was started here before (and has been
        // dropped since, or failed to open): replace it.
        _ if shared.node.serves_term() == Some(term) => start(shared, term, true).await,
        _ => start(shared, term, false).await,
    }
}

/// Starts (or, after a failure in the same term, restarts) the engine of
/// `term` and serves it.
async fn start(shared: &Shared, term: u64, restart: bool) {
    if !restart {
        shared.set_role(Role::Waiting(format!("this node was elected for term {term} and is starting its engine")));
    }
    let engine = if restart {
        shared.node.restart_engine(Engine::builder(), START_WAIT).await
    } else {
        shared.node.start_engine(Engine::builder(), START_WAIT).await
    };
    let engine = match engine {
        Ok(engine) => engine,
        Err(ClusterError::NotLeader) => return, // the next pass sees who leads
        Err(e) => {
            eprintln!("leaseq-server: node {}: could not start the engine of term {term}: {e}", shared.id());
            return;
        }
    };
    match Registry::open(engine, None) {
        Ok(registry) => {
            eprintln!("leaseq-server: node {}: leading term {term}, serving", shared.id());
            let confirmed = Arc::new(Confirmation::new(shared.lease));
            shared.set_role(Role::Leading { term, registry: Arc::new(registry), confirmed });
        }
        Err(e) => eprintln!("leaseq-server: node {}: could not open the queues of term {term}: {e}", shared.id()),
    }
}
