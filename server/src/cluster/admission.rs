//! The rejoin interlock: a node whose Raft data dir holds nothing (no vote,
//! no log, no snapshot) takes no part in Raft until its peers said it is not
//! a voter, because a voter that lost its dir would otherwise forget its
//! vote and its log and could vote twice in a term.
//!
//! While a fresh node checks, it answers `/cluster/status` (with `admitted:
//! false`) but refuses Raft's RPCs (503), so it never votes or appends; it
//! asks every other `--peer` for `/cluster/status` (signed when the group
//! has a secret) every `PROBE_EVERY`, and [`decide`]s:
//!
//! * a peer that answers with a membership naming this node as a voter:
//!   refused (remove it with `change-membership` first, then add it again);
//! * `--bootstrap`: the group is made (Raft initialized) only once every
//!   other peer answered and has passed its own check (`admitted`), so no
//!   initial member can find itself a voter of a group it has not joined; if
//!   a peer already holds a group, this node does not make a second one;
//! * otherwise admitted once every peer answered (none naming it), or, after
//!   `PROBE_WINDOW`, once at least one did; if none did, refused unless
//!   `--join-as-new` says the operator knows this node is no voter.
//!
//! Invariant: a fresh node's Raft sees no RPC and is not initialized before
//! [`decide`] admits it, and is never admitted while a peer that answered
//! names it as a voter. A node whose dir holds anything is admitted at once
//! (it remembers its vote and log).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::Method;
use leaseq_cluster::{ClusterSecret, NodeId, Raft};
use openraft::BasicNode;
use tokio::sync::watch;

use super::admin::{Status, admin_request};

/// How often a checking node asks its peers again.
const PROBE_EVERY: Duration = Duration::from_millis(200);
/// How long a node without `--bootstrap` waits for every peer to answer
/// before it decides on the answers it has.
pub(crate) const PROBE_WINDOW: Duration = Duration::from_secs(10);
/// How long one status request may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// How often a bootstrapping node that still waits says for whom.
const WAITING_NOTE_EVERY: Duration = Duration::from_secs(5);

/// Where a node stands with the interlock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Asking the peers; Raft's RPCs are refused.
    Checking,
    /// Taking part in Raft.
    Admitted,
    /// Must not take part; why, in words an operator can act on.
    Refused(String),
}

/// What one peer said, as far as the interlock cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Probe {
    /// It answered its status.
    Answered {
        /// Its membership's voters (empty: it holds no group yet).
        voters: Vec<NodeId>,
        /// Whether it holds a group (any member at all).
        initialized: bool,
        /// Whether it passed its own check.
        admitted: bool,
    },
    /// No answer, and why.
    Silent(String),
}

impl Probe {
    fn of(status: &Status) -> Probe {
        Probe::Answered {
            voters: status.voters.clone(),
            initialized: !status.nodes.is_empty(),
            admitted: status.admitted,
        }
    }
}

/// What to do now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Ask again later.
    Wait,
    /// Take part; `initialize`: make the group from the `--peer` list first.
    Admit { initialize: bool },
    /// Refuse to start, for this reason.
    Refuse(String),
}

/// How the node was started.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Intent {
    pub(crate) me: NodeId,
    pub(crate) bootstrap: bool,
    pub(crate) join_as_new: bool,
}

/// The interlock's rule (module docs) on the latest answer of each other
/// peer; `window_over`: `PROBE_WINDOW` has passed.
pub(crate) fn decide(intent: Intent, probes: &BTreeMap<NodeId, Probe>, window_over: bool) -> Decision {
    let me = intent.me;
    for (peer, probe) in probes {
        if let Probe::Answered { voters, .. } = probe
            && voters.contains(&me)
        {
            return Decision::Refuse(format!(
                "node {me} starts with an empty Raft data dir, but node {peer} lists it as a voter: it lost its \
                 log and vote, and taking part again could make it vote twice in a term. Remove it first \
                 (`leaseq-server cluster change-membership --node <member> --voters <the others>`), start it \
                 again, then add it back (`leaseq-server cluster add-learner --node <member> --id {me} --addr \
                 <its host:port>`, then `change-membership` with it among the voters)"
            ));
        }
    }
    let answered = probes.values().filter(|p| matches!(p, Probe::Answered { .. })).count();
    let all_answered = answered == probes.len();
    let group_elsewhere = probes.values().any(|p| matches!(p, Probe::Answered { initialized: true, .. }));
    if intent.bootstrap {
        let all_admitted = probes.values().all(|p| matches!(p, Probe::Answered { admitted: true, .. }));
        return if group_elsewhere {
            Decision::Admit { initialize: false }
        } else if all_admitted {
            Decision::Admit { initialize: true }
        } else {
            Decision::Wait
        };
    }
    if probes.is_empty() && !intent.join_as_new {
        return Decision::Refuse(format!(
            "node {me} starts with an empty Raft data dir and no other --peer to ask whether it is a voter that \
             lost its log: give the group's members as --peer, or pass --join-as-new if you know it is not a voter"
        ));
    }
    if all_answered || (window_over && answered > 0) || (window_over && intent.join_as_new) {
        return Decision::Admit { initialize: false };
    }
    if window_over {
        let why: Vec<String> = probes
            .iter()
            .filter_map(|(peer, p)| match p {
                Probe::Silent(why) => Some(format!("node {peer}: {why}")),
                Probe::Answered { .. } => None,
            })
            .collect();
        return Decision::Refuse(format!(
            "node {me} starts with an empty Raft data dir and none of its peers answered within {}s, so it cannot \
             tell whether it is a voter that lost its log ({}); start it when a peer is reachable, or pass \
             --join-as-new if you know it is not a voter",
            PROBE_WINDOW.as_secs(),
            why.join("; ")
        ));
    }
    Decision::Wait
}

/// Runs the check of a fresh node until it is admitted or refused, and
/// initializes the group when `decide` says so. `members`: every initial
/// member (this node's entry is not asked).
pub(crate) async fn run(
    intent: Intent,
    raft: Raft,
    members: BTreeMap<NodeId, BasicNode>,
    secret: Option<ClusterSecret>,
    admission: Arc<watch::Sender<Admission>>,
) {
    let peers: BTreeMap<NodeId, String> =
        members.iter().filter(|(id, _)| **id != intent.me).map(|(id, node)| (*id, node.addr.clone())).collect();
    let started = Instant::now();
    let mut noted = Instant::now();
    loop {
        let mut probes = BTreeMap::new();
        for (peer, addr) in &peers {
            probes.insert(*peer, probe(addr, secret.as_ref()).await);
        }
        match decide(intent, &probes, started.elapsed() >= PROBE_WINDOW) {
            Decision::Wait => {
                if intent.bootstrap && noted.elapsed() >= WAITING_NOTE_EVERY {
                    let waiting: Vec<String> = probes
                        .iter()
                        .filter(|(_, p)| !matches!(p, Probe::Answered { admitted: true, .. }))
                        .map(|(id, _)| id.to_string())
                        .collect();
                    eprintln!(
                        "leaseq-server: --bootstrap waits for every initial member to be up and checked: still \
                         waiting for node(s) {}",
                        waiting.join(", ")
                    );
                    noted = Instant::now();
                }
                tokio::time::sleep(PROBE_EVERY).await;
            }
            Decision::Admit { initialize } => {
                // Refused (NotAllowed) if the node holds a log by now: nothing to do.
                if initialize
                    && let Err(e) = raft.initialize(members.clone()).await
                    && e.api_error().is_none()
                {
                    let _ = admission.send(Admission::Refused(format!("cannot bootstrap the group: {e}")));
                    return;
                }
                let _ = admission.send(Admission::Admitted);
                return;
            }
            Decision::Refuse(why) => {
                let _ = admission.send(Admission::Refused(why));
                return;
            }
        }
    }
}

async fn probe(addr: &str, secret: Option<&ClusterSecret>) -> Probe {
    let asked = admin_request(addr, Method::GET, "/cluster/status", None, secret);
    match tokio::time::timeout(PROBE_TIMEOUT, asked).await {
        Err(_) => Probe::Silent(format!("no answer within {PROBE_TIMEOUT:?}")),
        Ok(Err(why)) => Probe::Silent(why),
        Ok(Ok(text)) => match serde_json::from_str::<Status>(&text) {
            Ok(status) => Probe::of(&status),
            Err(e) => Probe::Silent(format!("its status is not one: {e}")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(voters: &[NodeId], admitted: bool) -> Probe {
        Probe::Answered { voters: voters.to_vec(), initialized: !voters.is_empty(), admitted }
    }

    fn silent() -> Probe {
        Probe::Silent("connection refused".into())
    }

    const PLAIN: Intent = Intent { me: 3, bootstrap: false, join_as_new: false };
    const BOOT: Intent = Intent { me: 1, bootstrap: true, join_as_new: false };

    #[test]
    fn a_peer_naming_this_node_a_voter_refuses_it_whatever_the_flags() {
        let probes = BTreeMap::from([(1, answered(&[1, 2, 3], true)), (2, silent())]);
        for intent in [PLAIN, Intent { join_as_new: true, ..PLAIN }, Intent { me: 3, ..BOOT }] {
            for window_over in [false, true] {
                match decide(intent, &probes, window_over) {
                    Decision::Refuse(why) => {
                        assert!(why.contains("node 1 lists it as a voter"), "{why}");
                        assert!(why.contains("change-membership") && why.contains("add-learner"), "{why}");
                    }
                    other => panic!("{intent:?}: {other:?}"),
                }
            }
        }
    }

    #[test]
    fn a_plain_node_is_admitted_once_its_peers_answered_without_naming_it() {
        let removed = BTreeMap::from([(1, answered(&[1, 2], true)), (2, answered(&[1, 2], true))]);
        assert_eq!(decide(PLAIN, &removed, false), Decision::Admit { initialize: false });
        // A group being made: peers that hold nothing yet, checked or not.
        let forming = BTreeMap::from([(1, answered(&[], false)), (2, answered(&[], true))]);
        assert_eq!(decide(PLAIN, &forming, false), Decision::Admit { initialize: false });
        // One silent peer: wait for the window, then go on what answered.
        let partial = BTreeMap::from([(1, answered(&[1, 2], true)), (2, silent())]);
        assert_eq!(decide(PLAIN, &partial, false), Decision::Wait);
        assert_eq!(decide(PLAIN, &partial, true), Decision::Admit { initialize: false });
    }

    #[test]
    fn a_plain_node_nobody_answers_is_refused_unless_it_joins_as_new() {
        let nobody = BTreeMap::from([(1, silent()), (2, silent())]);
        assert_eq!(decide(PLAIN, &nobody, false), Decision::Wait);
        match decide(PLAIN, &nobody, true) {
            Decision::Refuse(why) => assert!(why.contains("--join-as-new") && why.contains("connection refused")),
            other => panic!("{other:?}"),
        }
        let joining = Intent { join_as_new: true, ..PLAIN };
        assert_eq!(decide(joining, &nobody, false), Decision::Wait);
        assert_eq!(decide(joining, &nobody, true), Decision::Admit { initialize: false });
        // No peer to ask at all.
        let alone = BTreeMap::new();
        assert!(matches!(decide(PLAIN, &alone, false), Decision::Refuse(why) if why.contains("no other --peer")));
        assert_eq!(decide(joining, &alone, false), Decision::Admit { initialize: false });
    }

    #[test]
    fn bootstrap_waits_for_every_member_checked_and_never_makes_a_second_group() {
        let waiting = BTreeMap::from([(2, answered(&[], true)), (3, answered(&[], false))]);
        assert_eq!(decide(BOOT, &waiting, false), Decision::Wait);
        assert_eq!(decide(BOOT, &waiting, true), Decision::Wait);
        let down = BTreeMap::from([(2, answered(&[], true)), (3, silent())]);
        assert_eq!(decide(BOOT, &down, true), Decision::Wait);
        let ready = BTreeMap::from([(2, answered(&[], true)), (3, answered(&[], true))]);
        assert_eq!(decide(BOOT, &ready, false), Decision::Admit { initialize: true });
        // A group without this node exists: join it as a new node instead.
        let exists = BTreeMap::from([(2, answered(&[2, 3], true)), (3, silent())]);
        assert_eq!(decide(BOOT, &exists, false), Decision::Admit { initialize: false });
        // Alone: made at once.
        assert_eq!(decide(BOOT, &BTreeMap::new(), false), Decision::Admit { initialize: true });
    }
}
