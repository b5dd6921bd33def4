//! The HTTP side: SQS's JSON protocol over HTTP/1.1 with keep-alive.
//!
//! Invariant: every request gets a response (an SQS result or an SQS error),
//! bounded in size (`MAX_BODY_BYTES`) and in time (header and body reads time
//! out, and a connection idle longer than its limit's `idle_timeout` is
//! closed); at most `max_connections` connections are open at once (the
//! listener accepts the next only when one closes, so the rest wait in the
//! kernel's backlog); with credentials, only requests whose SigV4 signature
//! verifies reach an action; with a cluster secret, only Raft RPCs and
//! `/cluster/` requests signed with it reach Raft or the admin endpoints; on
//! shutdown the listener closes, long polls end early, and open requests are
//! given `DRAIN` to finish.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{CONTENT_LENGTH, CONTENT_TYPE, HOST, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

use crate::api::{Call, dispatch};
use crate::cluster::{ADMIN_PREFIX, AdminAnswer, ClusterFront, FORWARDED_BY, Route, failure};
use crate::error::{ErrorCode, NOT_APPLIED_HEADER, SqsError};
use crate::metrics::{RequestCounts, render};
use crate::query;
use crate::registry::{Registry, unix_now_ms};
use crate::sigv4::{Credentials, Signed, verify};
use leaseq_cluster::{MAX_RAFT_BODY_BYTES, RAFT_PATH_PREFIX};

/// Largest request body: a 256 KiB message (or batch) with room for JSON
/// escaping and the other fields.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// How many connections a server keeps open at once, and how long one may
/// sit idle, by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections open at once; the listener accepts no more until one
    /// closes. At least 1.
    pub max_connections: usize,
    /// How long a connection may wait for the next request's headers (idle
    /// between keep-alive requests, or sending them slowly) and then for the
    /// body before it is closed.
    pub idle_timeout: Duration,
}

impl Default for ConnectionLimits {
    /// 4,096 connections (mind the process's file descriptor limit), 30 s
    /// idle: longer than the SDKs' 20 s long polls, and their connection
    /// pools reconnect when a kept-alive connection has been closed.
    fn default() -> Self {
        ConnectionLimits { max_connections: 4096, idle_timeout: Duration::from_secs(30) }
    }
}

/// What `serve_with` runs with besides the listener and the registry.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    /// With credentials, every request must carry a valid SigV4 signature by
    /// one of them; without, signatures are not checked.
    pub credentials: Option<Credentials>,
    /// Connection count and idle limits.
    pub limits: ConnectionLimits,
}
/// How long shutdown waits for open requests.
const DRAIN: Duration = Duration::from_secs(25);
/// The content type of SQS's JSON protocol.
const JSON_1_0: &str = "application/x-amz-json-1.0";

/// What a server answers SQS requests from.
enum Front {
    /// One engine's queues.
    Single(Arc<Registry>),
    /// A cluster node: its leader's engine, by way of forwarding if need be.
    Cluster(Arc<ClusterFront>),
}

struct State {
    front: Front,
    local: SocketAddr,
    shutdown: watch::Receiver<bool>,
    request_ids: AtomicU64,
    requests: RequestCounts,
    credentials: Option<Credentials>,
    limits: ConnectionLimits,
    /// Permits for connections; the accept loop holds one while it waits.
    connections: Arc<Semaphore>,
    /// Connections open now.
    open: AtomicUsize,
}

/// Serves `registry` on `listener`, without checking request signatures,
/// until `shutdown` completes, then drains.
pub async fn serve(
    listener: TcpListener,
    registry: Arc<Registry>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    serve_with_auth(listener, registry, None, shutdown).await
}

/// Like `serve`; with `credentials`, every request must carry a valid SigV4
/// signature by one of them.
pub async fn serve_with_auth(
    listener: TcpListener,
    registry: Arc<Registry>,
    credentials: Option<Credentials>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    serve_with(listener, registry, ServeOptions { credentials, ..ServeOptions::default() }, shutdown).await
}

/// Like `serve_with_auth`, with the connection limits of `options`.
///
/// # Errors
///
/// The listener's address cannot be read, or `max_connections` is 0
/// (`InvalidInput`).
pub async fn serve_with(
    listener: TcpListener,
    registry: Arc<Registry>,
    options: ServeOptions,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    serve_front(listener, Front::Single(registry), options, shutdown).await
}

/// Like `serve_with`, for a cluster node: SQS requests are answered by the
/// group's leader (this node's engine, or forwarded), and Raft's RPCs and
/// the `/cluster/...` endpoints share the listener. The caller shuts
/// `front` down after this returns.
///
/// # Errors
///
/// As `serve_with`.
pub async fn serve_cluster(
    listener: TcpListener,
    front: Arc<ClusterFront>,
    options: ServeOptions,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    serve_front(listener, Front::Cluster(front), options, shutdown).await
}

async fn serve_front(
    listener: TcpListener,
    front: Front,
    options: ServeOptions,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let local = listener.local_addr()?;
    let limits = options.limits;
    if limits.max_connections == 0 || limits.max_connections > Semaphore::MAX_PERMITS {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("max_connections must be between 1 and {}", Semaphore::MAX_PERMITS),
        ));
    }
    let (stop, stopping) = watch::channel(false);
    let state = Arc::new(State {
        front,
        local,
        shutdown: stopping,
        request_ids: AtomicU64::new(0),
        requests: RequestCounts::default(),
        credentials: options.credentials,
        limits,
        connections: Arc::new(Semaphore::new(limits.max_connections)),
        open: AtomicUsize::new(0),
    });
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        // Wait for room before accepting: connections beyond the limit stay
        // in the kernel's backlog instead of costing a task each.
        let permit = tokio::select! {
            permit = state.connections.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of file descriptors and the like: back off, keep serving.
                        eprintln!("leaseq-server: accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let served = state.clone();
                let service = service_fn(move |request| handle(request, peer, served.clone()));
                let connection = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(limits.idle_timeout)
                    .keep_alive(true)
                    .serve_connection(TokioIo::new(stream), service);
                let connection = graceful.watch(connection);
                // Relaxed: a gauge for /metrics, ordered with nothing else.
                state.open.fetch_add(1, Ordering::Relaxed);
                let counted = state.clone();
                tokio::spawn(async move {
                    let _ = connection.await;
                    counted.open.fetch_sub(1, Ordering::Relaxed);
                    drop(permit);
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    let _ = stop.send(true);
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(DRAIN) => eprintln!("leaseq-server: requests still open after {DRAIN:?}; closing"),
    }
    Ok(())
}

/// Connections open now, and the limit.
fn open_connections(state: &State) -> (usize, usize) {
    (state.open.load(Ordering::Relaxed), state.limits.max_connections)
}

async fn handle(
    request: Request<Incoming>,
    peer: SocketAddr,
    state: Arc<State>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let id = request_id(state.request_ids.fetch_add(1, Ordering::Relaxed));
    if let Front::Cluster(front) = &state.front {
        let path = request.uri().path();
        if path.starts_with(RAFT_PATH_PREFIX) || path.starts_with(ADMIN_PREFIX) {
            return Ok(cluster_endpoint(request, front, &state).await);
        }
    }
    if request.method() == Method::GET && request.uri().path() == "/metrics" {
        // With signatures required, metrics (queue names, depths) are for
        // local scrapers only: a Prometheus scrape cannot sign.
        if state.credentials.is_none() || peer.ip().is_loopback() {
            let (registry, cluster) = match &state.front {
                Front::Single(registry) => (Some(registry.clone()), String::new()),
                Front::Cluster(front) => (front.leader_registry(), front.metrics()),
            };
            let mut text = render(registry.as_deref(), &state.requests, open_connections(&state));
            text.push_str(&cluster);
            let mut response = Response::new(Full::new(Bytes::from(text)));
            response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4"));
            return Ok(response);
        }
    }
    let form = query::is_query_request(request.method(), request.headers().get(CONTENT_TYPE), request.uri().query());
    let target = request
        .headers()
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .and_then(|t| t.strip_prefix("AmazonSQS."))
        .map(str::to_string);
    let (asked, result) = answer(request, &state, form, target.as_deref()).await;
    let action = target.or(asked);
    let (status, body, query_error, not_applied) = match result {
        // The leader counted it.
        Ok(Answer::Forwarded(response)) => return Ok(response),
        Ok(Answer::Value(value)) => {
            state.requests.record(action.as_deref(), None);
            let body = match (&action, form) {
                (Some(action), true) => query::render(action, &value, &id),
                _ => value.to_string(),
            };
            (200, body, None, false)
        }
        Err(e) => {
            state.requests.record(action.as_deref(), Some(e.code));
            let body = if form { query::render_error(&e, &id) } else { e.body() };
            (e.code.status(), body, Some(e.query_header()), e.not_applied)
        }
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(if form { "text/xml" } else { JSON_1_0 }));
    if let Ok(value) = HeaderValue::from_str(&id) {
        headers.insert("x-amzn-requestid", value);
    }
    if let Some(value) = query_error.and_then(|q| HeaderValue::from_str(&q).ok()) {
        headers.insert("x-amzn-query-error", value);
    }
    if not_applied {
        headers.insert(NOT_APPLIED_HEADER, HeaderValue::from_static("true"));
    }
    Ok(response)
}

/// What an SQS request got.
enum Answer {
    /// A result to encode.
    Value(serde_json::Value),
    /// The leader's whole response, passed on.
    Forwarded(Response<Full<Bytes>>),
}

/// The request's answer, and the action a query-protocol request (`form`)
/// named in its parameters; a JSON-protocol request names it in
/// `X-Amz-Target` (`target`).
async fn answer(
    request: Request<Incoming>,
    state: &State,
    form: bool,
    target: Option<&str>,
) -> (Option<String>, Result<Answer, SqsError>) {
    let json = || {
        request.method() == Method::POST
            && request
                .headers()
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|t| t.starts_with(JSON_1_0))
    };
    let target = match target {
        Some(target) if !form && json() => target,
        _ if form => "",
        _ => {
            let protocol_only = SqsError::new(
                ErrorCode::UnknownOperation,
                "leaseq-server speaks SQS's JSON protocol (POST with Content-Type application/x-amz-json-1.0 and \
                 X-Amz-Target: AmazonSQS.<Action>) and its query protocol (POST with a form body naming the Action).",
            );
            return (None, Err(protocol_only));
        }
    };
    // Where a query-protocol request's parameters may also be.
    let place = form.then(|| (request.uri().path().to_string(), request.uri().query().map(str::to_string)));
    let (registry, host, body) = match read_and_route(request, state).await {
        Ok(Routed::Forwarded(answer)) => return (None, Ok(answer)),
        Ok(Routed::Local { registry, host, body }) => (registry, host, body),
        Err(e) => return (None, Err(e)),
    };
    let call = Call { registry: &registry, host: &host, shutdown: state.shutdown.clone() };
    match place {
        None => (None, dispatch(call, target, &body).await.map(Answer::Value)),
        Some((path, url_query)) => match query::decode(url_query.as_deref(), &body, &path, &host) {
            Ok((action, input)) => {
                let result = dispatch(call, &action, &input).await.map(Answer::Value);
                (Some(action), result)
            }
            Err(e) => (None, Err(e)),
        },
    }
}

/// Where a request goes once its body is read: the leader's answer (passed
/// on), or this node's queues with the verified body.
enum Routed {
    Forwarded(Answer),
    Local { registry: Arc<Registry>, host: String, body: Bytes },
}

/// Reads the body (size- and time-limited), forwards it to the leader if
/// this node does not serve, and verifies its signature if it does.
async fn read_and_route(request: Request<Incoming>, state: &State) -> Result<Routed, SqsError> {
    let headers = request.headers();
    let too_large = || {
        SqsError::new(
            ErrorCode::RequestTooLarge,
            format!("The request body is above the limit of {MAX_BODY_BYTES} bytes."),
        )
    };
    let declared = headers.get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(too_large());
    }
    let host = host_of(&request).unwrap_or_else(|| state.local.to_string());
    let (parts, body) = request.into_parts();
    let body = Limited::new(body, MAX_BODY_BYTES);
    let body = match tokio::time::timeout(state.limits.idle_timeout, body.collect()).await {
        Err(_) => return Err(SqsError::invalid("The request body did not arrive in time.")),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => return Err(too_large()),
        Ok(Err(e)) => return Err(SqsError::invalid(format!("The request body could not be read: {e}."))),
        Ok(Ok(collected)) => collected.to_bytes(),
    };
    let registry = match &state.front {
        Front::Single(registry) => registry.clone(),
        Front::Cluster(front) => match front.route(parts.headers.contains_key(FORWARDED_BY)) {
            Route::Local(registry) => registry,
            Route::Forward { addr, .. } => {
                // The leader checks the signature: the request goes on as it came.
                let forwarded = front.forward(&addr, &parts, body).await;
                return forwarded.map(|answer| Routed::Forwarded(Answer::Forwarded(answer))).map_err(|failed| {
                    if failed.before_sending {
                        SqsError::unavailable_not_applied(failed.why)
                    } else {
                        SqsError::new(ErrorCode::ServiceUnavailable, failed.why)
                    }
                });
            }
            Route::Unavailable(why) => return Err(SqsError::unavailable_not_applied(why)),
        },
    };
    if let Some(credentials) = &state.credentials {
        let signed = Signed {
            method: parts.method.as_str(),
            path: parts.uri.path(),
            query: parts.uri.query(),
            headers: &parts.headers,
            body: &body,
        };
        verify(credentials, &signed, unix_now_ms() / 1000)?;
    }
    Ok(Routed::Local { registry, host, body })
}

/// Answers Raft's RPCs and the `/cluster/...` endpoints; with a cluster
/// secret, only requests signed with it get past the first lines (403).
async fn cluster_endpoint(request: Request<Incoming>, front: &ClusterFront, state: &State) -> Response<Full<Bytes>> {
    if let Err(why) = front.screen_peer(request.headers()) {
        return failure(StatusCode::FORBIDDEN, format!("cluster authentication failed: {why}"));
    }
    let (parts, body) = request.into_parts();
    let body = Limited::new(body, MAX_RAFT_BODY_BYTES);
    let body = match tokio::time::timeout(state.limits.idle_timeout, body.collect()).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) => return failure(StatusCode::BAD_REQUEST, format!("the request body could not be read: {e}")),
        Err(_) => return failure(StatusCode::REQUEST_TIMEOUT, "the request body did not arrive in time"),
    };
    if let Err(why) = front.verify_peer(&parts, &body) {
        return failure(StatusCode::FORBIDDEN, format!("cluster authentication failed: {why}"));
    }
    let path = parts.uri.path();
    if path.starts_with(RAFT_PATH_PREFIX) {
        if parts.method != Method::POST {
            return failure(StatusCode::METHOD_NOT_ALLOWED, "Raft RPCs are POSTs");
        }
        return front.raft_rpc(path, &body).await;
    }
    let forwarded = parts.headers.contains_key(FORWARDED_BY);
    match front.admin(&parts.method, path, &body, forwarded).await {
        AdminAnswer::Done(response) => response,
        AdminAnswer::Forward(addr) => match front.forward(&addr, &parts, body).await {
            Ok(response) => response,
            Err(failed) => failure(StatusCode::SERVICE_UNAVAILABLE, failed.why),
        },
    }
}

/// The `Host` header, when it is a plain `host[:port]` (it goes into URLs).
fn host_of(request: &Request<Incoming>) -> Option<String> {
    let host = request.headers().get(HOST)?.to_str().ok()?;
    let plain = !host.is_empty()
        && host.len() <= 255
        && host.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'));
    plain.then(|| host.to_string())
}

/// A UUID-shaped request id, unique within the process.
fn request_id(n: u64) -> String {
    // splitmix64 of the counter: unique (a bijection) and spread out.
    let mut x = n.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    // Read once: `process::id` is a system call, and this runs per request.
    static PID: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let pid = *PID.get_or_init(|| u64::from(std::process::id()));
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        x >> 32,
        (x >> 16) & 0xffff,
        x & 0xfff,
        pid & 0xfff,
        n & 0xffff_ffff_ffff
    )
}
