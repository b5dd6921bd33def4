//! The Raft RPCs on the wire, and the side that answers them.
//!
//! A node sends each RPC as `POST /raft/append`, `/raft/vote` or
//! `/raft/snapshot` whose body is the openraft request in bincode; the
//! answer (status 200) is the bincode of `Result<openraft response,
//! RaftError>`, so a Raft error on the target travels back as itself.
//!
//! Invariant: only a body that is exactly the bincode of its path's request
//! reaches Raft; anything else (garbage, a truncated or padded body, an
//! empty one) is refused as [`RpcError::BadBody`], an unknown path as
//! [`RpcError::UnknownPath`], and no input panics. [`serve_raft`] reads at
//! most [`MAX_RAFT_BODY_BYTES`] of any body, in bounded time, before it
//! decides; given a [`ClusterSecret`], it answers 403 to every request
//! whose signature does not verify (`peer_auth.rs`) before Raft sees it.

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::io;
use std::pin::pin;
use std::time::Duration;

use bincode::Options;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{ALLOW, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::peer_auth::ClusterSecret;
use crate::types::{NodeId, Raft, TypeConfig};

/// The path prefix every Raft RPC is sent under; an HTTP server that also
/// serves other things routes these paths to [`answer_raft_rpc`].
pub const RAFT_PATH_PREFIX: &str = "/raft/";
/// Where `AppendEntries` (and heartbeats) go.
pub const APPEND_PATH: &str = "/raft/append";
/// Where `RequestVote` goes.
pub const VOTE_PATH: &str = "/raft/vote";
/// Where each `InstallSnapshot` chunk goes.
pub const SNAPSHOT_PATH: &str = "/raft/snapshot";

/// The largest RPC body either side sends or accepts: 16 MiB.
///
/// An `InstallSnapshot` body is one chunk of at most
/// `Config::snapshot_max_chunk_size` bytes (3 MiB by default) plus the
/// snapshot's metadata (its membership: a few hundred bytes), so that
/// setting must stay below this limit; a larger chunk cannot be sent and the
/// snapshot never arrives. An `AppendEntries` body holds up to
/// `Config::max_payload_entries` entries (300 by default), each one engine
/// group (about 1 MiB at most, more with a queue whose `max_payload` is
/// larger): such a batch can exceed the limit, so the client answers a body
/// that would with `PayloadTooLarge` and openraft sends fewer entries at a
/// time. A single entry over the limit cannot be replicated at all.
///
/// Mind also that openraft allows an `AppendEntries` RPC only
/// `Config::heartbeat_interval` to complete: a full body must cross the
/// link in that time.
pub const MAX_RAFT_BODY_BYTES: usize = 16 << 20;

/// How long [`serve_raft`] waits for the rest of a body once its headers
/// arrived.
const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection of [`serve_raft`] may wait for the next request's
/// headers (longer than the client's pool keeps idle connections, so the
/// server rarely closes one the client is about to reuse).
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long [`serve_raft`] lets requests in flight finish on shutdown.
const DRAIN: Duration = Duration::from_secs(2);
/// How long [`serve_raft`] pauses after a failed accept (out of file
/// descriptors, say) before it accepts again.
const ACCEPT_PAUSE: Duration = Duration::from_millis(50);

/// Why a Raft RPC was not answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RpcError {
    /// The path is not one of the Raft RPCs (an HTTP layer answers 404).
    UnknownPath(String),
    /// The body is not the bincode of the path's request (an HTTP layer
    /// answers 400); why, in words.
    BadBody(String),
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RpcError::UnknownPath(path) => {
                write!(f, "no Raft RPC at '{path}' (expected {APPEND_PATH}, {VOTE_PATH} or {SNAPSHOT_PATH})")
            }
            RpcError::BadBody(why) => write!(f, "the body is not a valid Raft RPC request: {why}"),
        }
    }
}

impl std::error::Error for RpcError {}

/// The wire's bincode configuration; both sides use this one. Decoding
/// refuses a declared length beyond the body limit before allocating for it,
/// and refuses trailing bytes.
pub(crate) fn wire() -> impl Options {
    bincode::DefaultOptions::new().with_limit(MAX_RAFT_BODY_BYTES as u64)
}

/// `value` in the wire format; fails if it would exceed
/// [`MAX_RAFT_BODY_BYTES`].
pub(crate) fn encode<T: Serialize>(value: &T) -> bincode::Result<Vec<u8>> {
    wire().serialize(value)
}

/// A value of the wire format.
pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> bincode::Result<T> {
    wire().deserialize(bytes)
}

/// Answers one Raft RPC: decodes `body` as the request `path` names, hands
/// it to `raft`, and returns the encoded `Result` of the call (a Raft error
/// is an answer too, not an `RpcError`).
///
/// # Errors
///
/// `UnknownPath` if `path` is not a Raft RPC's; `BadBody` if `body` does not
/// decode as its request.
pub async fn answer_raft_rpc(raft: &Raft, path: &str, body: &[u8]) -> Result<Vec<u8>, RpcError> {
    match path {
        APPEND_PATH => {
            let rpc: AppendEntriesRequest<TypeConfig> = request(body)?;
            answer(&raft.append_entries(rpc).await)
        }
        VOTE_PATH => {
            let rpc: VoteRequest<NodeId> = request(body)?;
            answer(&raft.vote(rpc).await)
        }
        SNAPSHOT_PATH => {
            let rpc: InstallSnapshotRequest<TypeConfig> = request(body)?;
            let result: Result<_, RaftError<NodeId, InstallSnapshotError>> = raft.install_snapshot(rpc).await;
            answer(&result)
        }
        _ => Err(RpcError::UnknownPath(path.to_string())),
    }
}

fn request<T: DeserializeOwned>(body: &[u8]) -> Result<T, RpcError> {
    decode(body).map_err(|e| RpcError::BadBody(e.to_string()))
}

fn answer<T: Serialize>(result: &T) -> Result<Vec<u8>, RpcError> {
    // The answers are a vote, a few log ids and, on error, a message: far
    // below the limit, so this fails only if that ever stops being true;
    // then the request is refused rather than the server panicking.
    encode(result).map_err(|e| RpcError::BadBody(format!("its answer could not be encoded: {e}")))
}

/// Serves the Raft RPCs of `raft` on `listener` over HTTP/1.1 (keep-alive)
/// until `shutdown` completes; every other path is answered 404. For nodes
/// without another HTTP server to route [`RAFT_PATH_PREFIX`] from. With a
/// `secret`, a request reaches Raft only if it is signed with it; any other
/// is answered 403 (without one, nothing is checked).
///
/// On shutdown the listener closes and requests in flight get a moment to
/// finish; then every connection is closed. Dropping the returned future
/// closes them all at once.
///
/// # Errors
///
/// Only if the listener itself fails (not listening); a failed accept of one
/// connection is waited out.
pub async fn serve_raft(
    listener: TcpListener,
    raft: Raft,
    secret: Option<ClusterSecret>,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let (stop, stopped) = watch::channel(false);
    // Owned by this future, so dropping it aborts the connections too.
    let mut connections = JoinSet::new();
    let mut shutdown = pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(serve_connection(stream, raft.clone(), secret.clone(), stopped.clone()));
                }
                Err(e) if e.kind() == io::ErrorKind::InvalidInput => return Err(e),
                Err(_) => tokio::time::sleep(ACCEPT_PAUSE).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    // No receiver left only means no connection is open.
    let _ = stop.send(true);
    let _ = tokio::time::timeout(DRAIN, async { while connections.join_next().await.is_some() {} }).await;
    Ok(())
}

async fn serve_connection(
    stream: TcpStream,
    raft: Raft,
    secret: Option<ClusterSecret>,
    mut stopped: watch::Receiver<bool>,
) {
    // Heartbeats are small and latency-bound: send them at once.
    let _ = stream.set_nodelay(true);
    let service = service_fn(move |request| {
        let (raft, secret) = (raft.clone(), secret.clone());
        async move { Ok::<_, Infallible>(respond(&raft, secret.as_ref(), request).await) }
    });
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(IDLE_TIMEOUT)
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), service);
    let mut connection = pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => return,
        // An error means `serve_raft` is gone: stop as well.
        _ = stopped.wait_for(|stop| *stop) => {}
    }
    connection.as_mut().graceful_shutdown();
    let _ = connection.await;
}

type HttpResponse = hyper::Response<Full<Bytes>>;

async fn respond(raft: &Raft, secret: Option<&ClusterSecret>, request: hyper::Request<Incoming>) -> HttpResponse {
    let path = request.uri().path().to_string();
    if !path.starts_with(RAFT_PATH_PREFIX) {
        return refusal(StatusCode::NOT_FOUND, format!("no such path: {path}"));
    }
    if request.method() != Method::POST {
        let mut response = refusal(StatusCode::METHOD_NOT_ALLOWED, "Raft RPCs are POSTed".to_string());
        response.headers_mut().insert(ALLOW, HeaderValue::from_static("POST"));
        return response;
    }
    if secret.is_some()
        && let Err(why) = ClusterSecret::screen(request.headers())
    {
        return forbidden(&why);
    }
    let declared = request.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|length| length > MAX_RAFT_BODY_BYTES as u64) {
        return too_large();
    }
    let (parts, body) = request.into_parts();
    let read = Limited::new(body, MAX_RAFT_BODY_BYTES).collect();
    let body = match tokio::time::timeout(BODY_READ_TIMEOUT, read).await {
        Err(_) => return refusal(StatusCode::REQUEST_TIMEOUT, "the body did not arrive in time".to_string()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => return too_large(),
        Ok(Err(e)) => return refusal(StatusCode::BAD_REQUEST, format!("the body could not be read: {e}")),
        Ok(Ok(collected)) => collected.to_bytes(),
    };
    if let Some(secret) = secret
        && let Err(why) = secret.verify_request(&parts.method, &path, &parts.headers, &body)
    {
        return forbidden(&why);
    }
    match answer_raft_rpc(raft, &path, &body).await {
        Ok(answer) => {
            let mut response = hyper::Response::new(Full::new(Bytes::from(answer)));
            response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
            response
        }
        Err(e @ RpcError::UnknownPath(_)) => refusal(StatusCode::NOT_FOUND, e.to_string()),
        Err(e @ RpcError::BadBody(_)) => refusal(StatusCode::BAD_REQUEST, e.to_string()),
    }
}

fn forbidden(why: &crate::peer_auth::AuthRefusal) -> HttpResponse {
    refusal(StatusCode::FORBIDDEN, format!("cluster authentication failed: {why}"))
}

fn too_large() -> HttpResponse {
    refusal(StatusCode::PAYLOAD_TOO_LARGE, format!("a Raft RPC body is at most {MAX_RAFT_BODY_BYTES} bytes"))
}

fn refusal(status: StatusCode, why: String) -> HttpResponse {
    let mut response = hyper::Response::new(Full::new(Bytes::from(why)));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::Arc;

    use openraft::raft::{AppendEntriesResponse, InstallSnapshotResponse, VoteResponse};
    use openraft::{
        BasicNode, CommittedLeaderId, Entry, EntryPayload, LogId, Membership, SnapshotMeta, StoredMembership, Vote,
    };

    use super::*;
    use crate::log_store::LogStore;
    use crate::network::Router;
    use crate::state_machine::StateMachine;
    use crate::types::Request;

    const PATHS: [&str; 3] = [APPEND_PATH, VOTE_PATH, SNAPSHOT_PATH];

    async fn lone_raft() -> Raft {
        let config = Arc::new(openraft::Config::default().validate().unwrap());
        Raft::new(1, config, Router::new().factory(1), LogStore::new(), StateMachine::new()).await.unwrap()
    }

    fn log_id(term: u64, index: u64) -> LogId<NodeId> {
        LogId::new(CommittedLeaderId::new(term, 1), index)
    }

    fn membership() -> Membership<NodeId, BasicNode> {
        let nodes: BTreeMap<NodeId, BasicNode> =
            (1..=3).map(|id| (id, BasicNode::new(format!("127.0.0.1:{}", 7000 + id)))).collect();
        Membership::new(vec![BTreeSet::from([1, 2, 3])], nodes)
    }

    fn append_request() -> AppendEntriesRequest<TypeConfig> {
        let entry = |index, payload| Entry { log_id: log_id(2, index), payload };
        AppendEntriesRequest {
            vote: Vote::new_committed(2, 1),
            prev_log_id: Some(log_id(1, 4)),
            leader_commit: Some(log_id(1, 4)),
            entries: vec![
                entry(5, EntryPayload::Blank),
                entry(6, EntryPayload::Normal(Request { term: 2, frames: vec![1, 2, 3, 255] })),
                entry(7, EntryPayload::Membership(membership())),
            ],
        }
    }

    fn snapshot_request() -> InstallSnapshotRequest<TypeConfig> {
        InstallSnapshotRequest {
            vote: Vote::new_committed(3, 2),
            meta: SnapshotMeta {
                last_log_id: Some(log_id(3, 40)),
                last_membership: StoredMembership::new(Some(log_id(1, 1)), membership()),
                snapshot_id: "3-40-1".to_string(),
            },
            offset: 1024,
            data: (0..=255).collect(),
            done: false,
        }
    }

    /// Decoding `value`'s encoding gives back a value with the same
    /// encoding: nothing was lost or reinterpreted.
    fn round_trip<T: Serialize + DeserializeOwned>(value: &T) -> T {
        let bytes = encode(value).unwrap();
        let back: T = decode(&bytes).unwrap();
        assert_eq!(encode(&back).unwrap(), bytes);
        back
    }

    #[test]
    fn each_request_survives_the_wire() {
        let append = round_trip(&append_request());
        assert_eq!(append.entries.len(), 3);
        assert_eq!(append.prev_log_id, Some(log_id(1, 4)));
        match &append.entries[1].payload {
            EntryPayload::Normal(request) => assert_eq!(request, &Request { term: 2, frames: vec![1, 2, 3, 255] }),
            other => panic!("entry 6 came back as {other:?}"),
        }
        assert!(matches!(append.entries[2].payload, EntryPayload::Membership(_)));

        let vote = round_trip(&VoteRequest::new(Vote::new(4, 3), Some(log_id(3, 9))));
        assert_eq!((vote.vote, vote.last_log_id), (Vote::new(4, 3), Some(log_id(3, 9))));

        let snapshot = round_trip(&snapshot_request());
        assert_eq!(snapshot.meta, snapshot_request().meta);
        assert_eq!((snapshot.offset, snapshot.data.len(), snapshot.done), (1024, 256, false));
    }

    #[test]
    fn answers_and_remote_errors_survive_the_wire() {
        let ok: Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>> = Ok(AppendEntriesResponse::Success);
        assert!(matches!(round_trip(&ok), Ok(AppendEntriesResponse::Success)));
        let higher: Result<_, RaftError<NodeId>> = Ok(AppendEntriesResponse::HigherVote(Vote::new(9, 2)));
        assert!(matches!(round_trip(&higher), Ok(AppendEntriesResponse::HigherVote(v)) if v == Vote::new(9, 2)));
        let granted: Result<_, RaftError<NodeId>> = Ok(VoteResponse::new(Vote::new(4, 3), None, true));
        assert!(round_trip(&granted).unwrap().vote_granted);

        let stopped: Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>> =
            Err(RaftError::Fatal(openraft::error::Fatal::Stopped));
        assert!(matches!(round_trip(&stopped), Err(RaftError::Fatal(openraft::error::Fatal::Stopped))));
    }

    #[test]
    fn a_body_over_the_limit_is_refused_before_it_is_read() {
        // A declared length beyond the limit fails at once (no allocation
        // of that size).
        let mut huge = Vec::new();
        huge.push(251); // varint tag: a u64 follows
        huge.extend_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode::<Vec<u8>>(&huge).is_err());
        // And nothing larger than the limit is sent.
        let big = InstallSnapshotRequest { data: vec![7; MAX_RAFT_BODY_BYTES], ..snapshot_request() };
        assert!(matches!(*encode(&big).unwrap_err(), bincode::ErrorKind::SizeLimit));
    }

    #[tokio::test]
    async fn an_unknown_path_is_named() {
        let raft = lone_raft().await;
        for path in ["/raft/", "/raft/appendx", "/raft/Append", "/other", "", "/raft/vote/"] {
            match answer_raft_rpc(&raft, path, &[]).await {
                Err(RpcError::UnknownPath(p)) => assert_eq!(p, path),
                other => panic!("{path}: {other:?}"),
            }
        }
        raft.shutdown().await.unwrap();
    }

    #[tokio::test]
    async fn garbage_empty_and_truncated_bodies_are_bad_bodies() {
        let raft = lone_raft().await;
        let mut bodies: Vec<Vec<u8>> = vec![Vec::new(), vec![0], vec![0xff; 64], b"GET / HTTP/1.1\r\n\r\n".to_vec()];
        // Pseudo-random bodies, the same on every run.
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        for len in (1..300).step_by(7) {
            bodies.push(
                (0..len)
                    .map(|_| {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        seed as u8
                    })
                    .collect(),
            );
        }
        for path in PATHS {
            for body in &bodies {
                let answer = answer_raft_rpc(&raft, path, body).await;
                assert!(matches!(answer, Err(RpcError::BadBody(_))), "{path} with {body:?}: {answer:?}");
            }
        }
        // Every strict prefix of a valid request, and the request with a
        // byte more, is refused too.
        let valid = [
            (APPEND_PATH, encode(&append_request()).unwrap()),
            (VOTE_PATH, encode(&VoteRequest::new(Vote::new(4, 3), Some(log_id(3, 9)))).unwrap()),
            (SNAPSHOT_PATH, encode(&snapshot_request()).unwrap()),
        ];
        for (path, body) in &valid {
            for cut in 0..body.len() {
                let answer = answer_raft_rpc(&raft, path, &body[..cut]).await;
                assert!(matches!(answer, Err(RpcError::BadBody(_))), "{path} cut at {cut}: {answer:?}");
            }
            let mut longer = body.clone();
            longer.push(0);
            assert!(matches!(answer_raft_rpc(&raft, path, &longer).await, Err(RpcError::BadBody(_))));
        }
        raft.shutdown().await.unwrap();
    }

    #[tokio::test]
    async fn a_valid_request_gets_the_rafts_answer() {
        let raft = lone_raft().await;
        // A candidate in term 5 asks an uninitialized node for its vote.
        let body = encode(&VoteRequest::<NodeId>::new(Vote::new(5, 2), Some(log_id(4, 10)))).unwrap();
        let answer = answer_raft_rpc(&raft, VOTE_PATH, &body).await.unwrap();
        let response: Result<VoteResponse<NodeId>, RaftError<NodeId>> = decode(&answer).unwrap();
        let response = response.unwrap();
        assert!(response.vote_granted, "{response:?}");
        assert_eq!(response.vote, Vote::new(5, 2));
        raft.shutdown().await.unwrap();
    }
}
