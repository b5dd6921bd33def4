//! The cluster's own endpoints (`/cluster/...`) and the client the
//! `leaseq-server cluster ...` commands use.
//!
//! * `GET /cluster/status`: this node's view (its id, role, term, the
//!   leader, whether it serves, log and apply positions, the membership).
//! * `POST /cluster/add-learner` `{"id": N, "addr": "host:port"}`: adds a
//!   non-voting member and returns once it caught up.
//! * `POST /cluster/change-membership` `{"voters": [..]}`: makes exactly
//!   these nodes the voters (joint consensus through openraft); a removed
//!   voter leaves the group.
//!
//! Invariant: a membership change runs only on the leader; a follower sends
//! it on (once) as it does SQS requests, and every failure is an answer with
//! a 4xx/5xx status and a JSON `error`, never a dropped connection. With a
//! cluster secret, a request reaches these endpoints only once its signature
//! verified (`http.rs`); a forwarded one keeps its header, so the leader
//! verifies it again.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, StatusCode};
use leaseq_cluster::{AUTH_HEADER, ClusterSecret, NodeId, unix_now_ms};
use openraft::BasicNode;
use serde::{Deserialize, Serialize};

use super::ClusterFront;
use super::admission::{Admission, PROBE_WINDOW};

/// The path prefix of these endpoints.
pub(crate) const ADMIN_PREFIX: &str = "/cluster/";

/// What `GET /cluster/status` answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Status {
    /// This node's id.
    pub node_id: NodeId,
    /// Leader, Follower, Candidate or Learner, as openraft names it.
    pub state: String,
    /// The current term.
    pub term: u64,
    /// The leader this node knows of.
    pub leader: Option<NodeId>,
    /// Whether this node answers SQS requests from its own engine now.
    pub serving: bool,
    /// Why not, when it does not serve and does not forward.
    pub unavailable: Option<String>,
    /// The last log index this node holds.
    pub last_log_index: Option<u64>,
    /// The last log index this node applied.
    pub last_applied: Option<u64>,
    /// Voting members.
    pub voters: Vec<NodeId>,
    /// Every member (voters and learners) and its address.
    pub nodes: BTreeMap<NodeId, String>,
    /// Whether this node takes part in Raft: false while a node that started
    /// on an empty data dir checks with its peers that it is not a voter
    /// (`admission.rs`).
    #[serde(default = "taking_part")]
    pub admitted: bool,
}

fn taking_part() -> bool {
    true
}

#[derive(Debug, Deserialize)]
struct AddLearner {
    id: NodeId,
    addr: String,
}

#[derive(Debug, Deserialize)]
struct ChangeMembership {
    voters: BTreeSet<NodeId>,
}

/// What to do with an admin request.
#[derive(Debug)]
pub(crate) enum AdminAnswer {
    /// Answer this.
    Done(hyper::Response<Full<Bytes>>),
    /// Send it to the leader at this address.
    Forward(String),
}

/// A JSON answer with `status`.
pub(crate) fn json_answer(status: StatusCode, value: &serde_json::Value) -> hyper::Response<Full<Bytes>> {
    let mut response = hyper::Response::new(Full::new(Bytes::from(value.to_string())));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    response
}

pub(crate) fn failure(status: StatusCode, why: impl std::fmt::Display) -> hyper::Response<Full<Bytes>> {
    json_answer(status, &serde_json::json!({ "error": why.to_string() }))
}

impl ClusterFront {
    /// This node's status.
    pub fn status(&self) -> Status {
        let metrics = self.shared.node.raft().metrics().borrow().clone();
        let membership = metrics.membership_config.membership();
        let route = self.shared.role().route();
        let admission = self.admission();
        let unavailable = match (&admission, &route) {
            (Admission::Checking, _) => Some(
                "this node started on an empty data dir and is checking with its peers that it is not a voter"
                    .to_string(),
            ),
            (Admission::Refused(why), _) => Some(why.clone()),
            (Admission::Admitted, super::role::Route::Unavailable(why)) => Some(why.clone()),
            _ => None,
        };
        Status {
            node_id: self.shared.node.id(),
            state: format!("{:?}", metrics.state),
            term: metrics.current_term,
            leader: metrics.current_leader,
            serving: matches!(route, super::role::Route::Local(_)),
            unavailable,
            last_log_index: metrics.last_log_index,
            last_applied: metrics.last_applied.map(|id| id.index),
            voters: membership.voter_ids().collect(),
            nodes: membership.nodes().map(|(id, node)| (*id, node.addr.clone())).collect(),
            admitted: admission == Admission::Admitted,
        }
    }

    /// Answers a request to `/cluster/...`, or says which node to send it
    /// to (`forwarded`: it came from another node, so it is not sent on
    /// again).
    pub(crate) async fn admin(&self, method: &Method, path: &str, body: &[u8], forwarded: bool) -> AdminAnswer {
        let action = path.strip_prefix(ADMIN_PREFIX).unwrap_or(path);
        let raft = self.shared.node.raft();
        match (method, action) {
            (&Method::GET, "status") => {
                AdminAnswer::Done(json_answer(StatusCode::OK, &serde_json::to_value(self.status()).unwrap_or_default()))
            }
            (&Method::POST, "add-learner" | "change-membership") => {
                let metrics = raft.metrics().borrow().clone();
                if metrics.current_leader != Some(self.shared.node.id()) {
                    let leader = metrics.current_leader.and_then(|leader| {
                        metrics.membership_config.membership().get_node(&leader).map(|node| node.addr.clone())
                    });
                    return match leader {
                        Some(addr) if !forwarded => AdminAnswer::Forward(addr),
                        _ => AdminAnswer::Done(failure(
                            StatusCode::SERVICE_UNAVAILABLE,
                            "no leader is known here to run a membership change",
                        )),
                    };
                }
                AdminAnswer::Done(self.change(action, body).await)
            }
            _ => AdminAnswer::Done(failure(StatusCode::NOT_FOUND, format!("no cluster endpoint {method} {path}"))),
        }
    }

    async fn change(&self, action: &str, body: &[u8]) -> hyper::Response<Full<Bytes>> {
        let raft = self.shared.node.raft();
        if action == "add-learner" {
            let request: AddLearner = match serde_json::from_slice(body) {
                Ok(request) => request,
                Err(e) => {
                    return failure(
                        StatusCode::BAD_REQUEST,
                        format!("expected {{\"id\": N, \"addr\": \"host:port\"}}: {e}"),
                    );
                }
            };
            if request.addr.parse::<std::net::SocketAddr>().is_err() {
                return failure(StatusCode::BAD_REQUEST, format!("'{}' is not a host:port address", request.addr));
            }
            // Not openraft's blocking form: it stops waiting after 500 ms
            // and reports success whether or not the learner caught up, so
            // a fresh node still checking its peers (`admission.rs`) could
            // be promoted before it took any part, then find itself a voter
            // and refuse itself.
            let written = match raft.add_learner(request.id, BasicNode::new(request.addr), false).await {
                Ok(written) => written,
                Err(e) => return failure(StatusCode::CONFLICT, e),
            };
            let index = written.log_id.index;
            if !self.caught_up(request.id, index, LEARNER_CATCH_UP).await {
                return failure(
                    StatusCode::GATEWAY_TIMEOUT,
                    format!(
                        "node {} is a learner now (log index {index}) but has not caught up within {}s: it may \
                         still be checking its peers, or be unreachable; see `cluster status` and its log, and \
                         make it a voter only once it has caught up",
                        request.id,
                        LEARNER_CATCH_UP.as_secs()
                    ),
                );
            }
            json_answer(StatusCode::OK, &serde_json::json!({ "log_index": index }))
        } else {
            let request: ChangeMembership = match serde_json::from_slice(body) {
                Ok(request) => request,
                Err(e) => return failure(StatusCode::BAD_REQUEST, format!("expected {{\"voters\": [N, ...]}}: {e}")),
            };
            if request.voters.is_empty() {
                return failure(StatusCode::BAD_REQUEST, "a group needs at least one voter");
            }
            let metrics = raft.metrics().borrow().clone();
            let voters_now: BTreeSet<NodeId> = metrics.membership_config.membership().voter_ids().collect();
            for id in &request.voters {
                let learner = metrics.membership_config.membership().get_node(id).is_some();
                if learner && !voters_now.contains(id) && matched_log(&metrics, *id).is_none() {
                    return failure(
                        StatusCode::CONFLICT,
                        format!(
                            "node {id} has not received any of the log as a learner yet (it may still be checking \
                             its peers, or be unreachable): a voter that never took part could refuse itself or \
                             stall the quorum; wait until `cluster status` shows it has caught up"
                        ),
                    );
                }
            }
            match raft.change_membership(request.voters, false).await {
                Ok(written) => json_answer(StatusCode::OK, &serde_json::json!({ "log_index": written.log_id.index })),
                Err(e) => failure(StatusCode::CONFLICT, e),
            }
        }
    }
}

impl ClusterFront {
    /// Waits (up to `within`) until this leader has replicated its log up to
    /// `index` to node `id`.
    async fn caught_up(&self, id: NodeId, index: u64, within: std::time::Duration) -> bool {
        let mut metrics = self.shared.node.raft().metrics();
        let wait = async {
            while matched_log(&metrics.borrow_and_update(), id).is_none_or(|log| log.index < index) {
                if metrics.changed().await.is_err() {
                    return false;
                }
            }
            true
        };
        tokio::time::timeout(within, wait).await.unwrap_or(false)
    }
}

/// The last log id this leader knows node `id` holds (openraft's
/// replication metrics; `None` when it is not replicating to `id` or `id`
/// has matched nothing yet).
fn matched_log(metrics: &openraft::RaftMetrics<NodeId, BasicNode>, id: NodeId) -> Option<openraft::LogId<NodeId>> {
    metrics.replication.as_ref().and_then(|replication| replication.get(&id).copied().flatten())
}

/// How long `add-learner` waits for the new learner to catch up: longer
/// than a fresh node's check of its peers may take (`PROBE_WINDOW`).
const LEARNER_CATCH_UP: std::time::Duration = PROBE_WINDOW.saturating_mul(2);

/// Sends one admin request to the node at `node` (`host:port`), signed with
/// `secret` if given, and returns the answer's body, or why it failed
/// (including a non-2xx status's body).
///
/// # Errors
///
/// The node cannot be reached, or answered with an error.
pub async fn admin_request(
    node: &str,
    method: Method,
    path: &str,
    body: Option<String>,
    secret: Option<&ClusterSecret>,
) -> Result<String, String> {
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    let client: hyper_util::client::legacy::Client<_, Full<Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build(connector);
    let uri: hyper::Uri =
        format!("http://{node}{path}").parse().map_err(|e| format!("bad node address {node}: {e}"))?;
    let body = Bytes::from(body.unwrap_or_default());
    let mut request = hyper::Request::builder().header(hyper::header::CONTENT_TYPE, "application/json");
    if let Some(secret) = secret {
        request = request.header(AUTH_HEADER, secret.sign(method.as_str(), path, &body, unix_now_ms()));
    }
    let request = request.method(method).uri(uri).body(Full::new(body)).map_err(|e| e.to_string())?;
    let exchange = async {
        let response = client.request(request).await.map_err(|e| format!("{node}: {e}"))?;
        let status = response.status();
        let bytes = response.into_body().collect().await.map_err(|e| format!("{node}: {e}"))?.to_bytes();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if status.is_success() {
            Ok(text)
        } else if status == StatusCode::FORBIDDEN {
            Err(format!("{node} refused the request ({status}: {text}); give the group's --cluster-secret-file"))
        } else {
            Err(format!("{node} answered {status}: {text}"))
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(60), exchange)
        .await
        .unwrap_or_else(|_| Err(format!("{node} did not answer within 60 s")))
}
