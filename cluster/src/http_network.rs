//! The network between processes: each Raft RPC is an HTTP/1.1 POST to the
//! target's `/raft/*` path (the wire format is `rpc.rs`'s).
//!
//! Invariant: every RPC ends, within its `RPCOption::hard_ttl`, in the
//! target's answer or in the `RPCError` openraft acts on: a target that
//! cannot be reached or drops the connection is `Unreachable` (openraft backs
//! off), one that does not answer in time is `Timeout`, a Raft error on the
//! target is `RemoteError`, an answer that is not a Raft answer is
//! `Network` (a target that refuses this node's signature with 403
//! included: never read as a Raft answer), and a batch too large for one
//! body is `PayloadTooLarge` (openraft sends fewer entries). With a
//! [`ClusterSecret`], every request carries its `AUTH_HEADER`. Nothing here
//! panics.

use std::error::Error as StdError;
use std::fmt;
use std::io;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::StatusCode;
use hyper::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use openraft::BasicNode;
use openraft::error::{
    InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError, Timeout, Unreachable,
};
use openraft::network::{RPCOption, RPCTypes, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use serde::de::DeserializeOwned;

use crate::peer_auth::{AUTH_HEADER, ClusterSecret, unix_now_ms};
use crate::rpc::{APPEND_PATH, MAX_RAFT_BODY_BYTES, SNAPSHOT_PATH, VOTE_PATH, decode, encode};
use crate::types::{NodeId, TypeConfig};

/// How long an idle pooled connection is kept: shorter than the idle limit
/// of `serve_raft` (60 s) and of the SQS server (30 s by default), so the
/// server seldom closes a connection just as it is reused.
const POOL_IDLE: Duration = Duration::from_secs(20);

/// How many idle connections to one peer the pool keeps. openraft has one
/// replication stream per follower plus the odd vote or leadership check,
/// so a handful covers steady work; a burst's extra connections are closed
/// when it ends instead of lingering for `POOL_IDLE`.
const POOL_IDLE_PER_PEER: usize = 8;

/// The HTTP client every connection of one node shares.
type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// One node's network to its peers (openraft's network factory): the
/// connections it makes share one keep-alive connection pool; clones share
/// it too.
#[derive(Clone)]
pub struct HttpNetwork {
    client: HttpClient,
    secret: Option<ClusterSecret>,
}

impl fmt::Debug for HttpNetwork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpNetwork").finish_non_exhaustive()
    }
}

impl Default for HttpNetwork {
    fn default() -> Self {
        HttpNetwork::new()
    }
}

impl HttpNetwork {
    /// A network with an empty connection pool whose requests are not
    /// signed (for peers that check no secret).
    #[must_use]
    pub fn new() -> Self {
        let mut connector = HttpConnector::new();
        // Heartbeats and votes are small and latency-bound: no Nagle delay.
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(POOL_IDLE)
            .pool_max_idle_per_host(POOL_IDLE_PER_PEER)
            .build(connector);
        HttpNetwork { client, secret: None }
    }

    /// Like [`HttpNetwork::new`], every request signed with `secret`.
    #[must_use]
    pub fn with_secret(secret: ClusterSecret) -> Self {
        HttpNetwork { secret: Some(secret), ..HttpNetwork::new() }
    }
}

impl RaftNetworkFactory<TypeConfig> for HttpNetwork {
    type Network = HttpConnection;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Self::Network {
        HttpConnection { client: self.client.clone(), secret: self.secret.clone(), target, node: node.clone() }
    }
}

/// A connection from one node to one peer, at the address its membership
/// entry names.
#[derive(Clone)]
pub struct HttpConnection {
    client: HttpClient,
    secret: Option<ClusterSecret>,
    target: NodeId,
    node: BasicNode,
}

impl fmt::Debug for HttpConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpConnection").field("target", &self.target).field("addr", &self.node.addr).finish()
    }
}

/// An RPC's failure with openraft's error type for `E` (the API error the
/// target's Raft may answer with).
type Failure<E> = RPCError<NodeId, BasicNode, RaftError<NodeId, E>>;

/// Why an exchange gave no Raft answer, before it is typed for one RPC.
enum Fault {
    /// The target could not be reached, or dropped the connection.
    Unreachable(String),
    /// No answer within the RPC's time to live.
    TimedOut,
    /// The request would exceed the body limit.
    TooLarge,
    /// Something else went wrong on the way or in the answer.
    Network(String),
}

impl HttpConnection {
    /// Sends `body` to `path` and decodes the answer as `Result<A, RaftError<E>>`,
    /// within `ttl`.
    async fn exchange<A, E>(
        &self,
        path: &str,
        body: Vec<u8>,
        ttl: Duration,
    ) -> Result<Result<A, RaftError<NodeId, E>>, Fault>
    where
        A: DeserializeOwned,
        E: StdError + DeserializeOwned,
    {
        match tokio::time::timeout(ttl, self.post(path, body)).await {
            Err(_) => Err(Fault::TimedOut),
            Ok(Err(fault)) => Err(fault),
            Ok(Ok(answer)) => decode(&answer).map_err(|e| {
                Fault::Network(format!("the answer of {} to {path} is not a Raft answer: {e}", self.node.addr))
            }),
        }
    }

    async fn post(&self, path: &str, body: Vec<u8>) -> Result<Bytes, Fault> {
        let uri = format!("http://{}{path}", self.node.addr);
        let length = body.len();
        let mut request = hyper::Request::post(uri.as_str())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"))
            .header(CONTENT_LENGTH, length);
        if let Some(secret) = &self.secret {
            request = request.header(AUTH_HEADER, secret.sign("POST", path, &body, unix_now_ms()));
        }
        let request = request
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| Fault::Network(format!("no request could be made for {uri}: {e}")))?;
        let response = self.client.request(request).await.map_err(|e| classify(&uri, &e))?;
        let status = response.status();
        let answer = Limited::new(response.into_body(), MAX_RAFT_BODY_BYTES)
            .collect()
            .await
            .map_err(|e| classify(&uri, e.as_ref()))?
            .to_bytes();
        if status == StatusCode::FORBIDDEN {
            let text = String::from_utf8_lossy(&answer[..answer.len().min(200)]).into_owned();
            return Err(Fault::Network(format!(
                "{uri} refused this node's cluster authentication (403: {text}); do both hold the same \
                 --cluster-secret-file?"
            )));
        }
        if status != StatusCode::OK {
            let text = String::from_utf8_lossy(&answer[..answer.len().min(200)]).into_owned();
            return Err(Fault::Network(format!("{uri} answered {status}: {text}")));
        }
        Ok(answer)
    }

    /// `fault` as openraft's error for an RPC of kind `action` sent by
    /// `from`.
    fn failure<E: StdError>(&self, fault: Fault, action: RPCTypes, from: Option<NodeId>, ttl: Duration) -> Failure<E> {
        match fault {
            Fault::Unreachable(why) => unreachable(why),
            Fault::TimedOut => match from {
                Some(id) => RPCError::Timeout(Timeout { action, id, target: self.target, timeout: ttl }),
                None => unreachable(format!("{} did not answer within {ttl:?}", self.node.addr)),
            },
            Fault::TooLarge => network(format!(
                "a {action} request would exceed the {MAX_RAFT_BODY_BYTES}-byte body limit \
                 (for a snapshot chunk: is Config::snapshot_max_chunk_size well below it?)"
            )),
            Fault::Network(why) => network(why),
        }
    }

    fn remote<E: StdError>(&self, e: RaftError<NodeId, E>) -> Failure<E> {
        RPCError::RemoteError(RemoteError::new_with_node(self.target, self.node.clone(), e))
    }
}

/// The request, or `TooLarge` if its encoding exceeds the body limit.
fn encode_request<T: serde::Serialize>(rpc: &T) -> Result<Vec<u8>, Fault> {
    encode(rpc).map_err(|e| match *e {
        bincode::ErrorKind::SizeLimit => Fault::TooLarge,
        other => Fault::Network(format!("the request could not be encoded: {other}")),
    })
}

fn unreachable<E: StdError>(why: String) -> Failure<E> {
    RPCError::Unreachable(Unreachable::new(&io::Error::new(io::ErrorKind::NotConnected, why)))
}

fn network<E: StdError>(why: String) -> Failure<E> {
    RPCError::Network(NetworkError::new(&io::Error::other(why)))
}

/// Whether the client's failure means the target is not there (refused,
/// reset, closed mid-answer): `Unreachable`, so openraft backs off; anything
/// else is `Network`.
fn classify(uri: &str, error: &(dyn StdError + 'static)) -> Fault {
    let mut gone = false;
    let mut causes = Vec::new();
    let mut cause = Some(error);
    while let Some(e) = cause {
        if let Some(e) = e.downcast_ref::<hyper_util::client::legacy::Error>() {
            gone |= e.is_connect();
        }
        if let Some(e) = e.downcast_ref::<hyper::Error>() {
            gone |= e.is_incomplete_message() || e.is_canceled() || e.is_closed();
        }
        if let Some(e) = e.downcast_ref::<io::Error>() {
            gone |= matches!(
                e.kind(),
                io::ErrorKind::ConnectionRefused
                    | io::ErrorKind::ConnectionReset
                    | io::ErrorKind::ConnectionAborted
                    | io::ErrorKind::NotConnected
                    | io::ErrorKind::BrokenPipe
                    | io::ErrorKind::UnexpectedEof
            );
        }
        causes.push(e.to_string());
        cause = e.source();
    }
    let why = format!("POST {uri}: {}", causes.join(": "));
    if gone { Fault::Unreachable(why) } else { Fault::Network(why) }
}

impl RaftNetwork<TypeConfig> for HttpConnection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, Failure<openraft::error::Infallible>> {
        let (from, entries, ttl) = (rpc.vote.leader_id().voted_for(), rpc.entries.len(), option.hard_ttl());
        let body = match encode_request(&rpc) {
            Ok(body) => body,
            // Halving converges on a batch that fits. A single entry over
            // the limit cannot be split: openraft would resend it at once,
            // forever, on a PayloadTooLarge, so it is a Network error, tried
            // again only with the next replication round.
            Err(Fault::TooLarge) if entries > 1 => {
                return Err(RPCError::PayloadTooLarge(PayloadTooLarge::new_entries_hint(entries as u64 / 2)));
            }
            Err(fault) => return Err(self.failure(fault, RPCTypes::AppendEntries, from, ttl)),
        };
        match self.exchange(APPEND_PATH, body, ttl).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(e)) => Err(self.remote(e)),
            Err(fault) => Err(self.failure(fault, RPCTypes::AppendEntries, from, ttl)),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, Failure<InstallSnapshotError>> {
        let (from, ttl) = (rpc.vote.leader_id().voted_for(), option.hard_ttl());
        let exchanged = match encode_request(&rpc) {
            Ok(body) => self.exchange(SNAPSHOT_PATH, body, ttl).await,
            Err(fault) => Err(fault),
        };
        match exchanged {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(e)) => Err(self.remote(e)),
            Err(fault) => Err(self.failure(fault, RPCTypes::InstallSnapshot, from, ttl)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, Failure<openraft::error::Infallible>> {
        let (from, ttl) = (rpc.vote.leader_id().voted_for(), option.hard_ttl());
        let exchanged = match encode_request(&rpc) {
            Ok(body) => self.exchange(VOTE_PATH, body, ttl).await,
            Err(fault) => Err(fault),
        };
        match exchanged {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(e)) => Err(self.remote(e)),
            Err(fault) => Err(self.failure(fault, RPCTypes::Vote, from, ttl)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_network_can_be_made_outside_a_runtime() {
        let network = HttpNetwork::new();
        let _clone = network.clone();
        assert!(format!("{network:?}").starts_with("HttpNetwork"));
    }
}
