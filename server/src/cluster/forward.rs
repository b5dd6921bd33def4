//! Forwarding: a follower hands an SQS request, as it arrived (method,
//! path, headers, body), to the leader and passes the leader's answer back.
//!
//! Invariants:
//!
//! * The request reaches the leader byte for byte (its SigV4 signature,
//!   which covers the `Host` header and the body, still verifies there);
//!   only hop-by-hop headers are dropped, and `FORWARDED_BY` is added.
//! * A request that was already forwarded is never forwarded again: a node
//!   that gets one and does not serve answers `ServiceUnavailable`, so two
//!   nodes with different views of the leader cannot bounce a request.
//! * Every forward is bounded by `FORWARD_TIMEOUT` (longer than SQS's 20 s
//!   long poll), and the leader's answer by `MAX_ANSWER_BYTES`.
//! * A failed forward says whether the request provably never left this
//!   node (`ForwardFailed::before_sending`: the connection to the leader
//!   could not be made, or the request not built), so the client can be told
//!   it was not applied; any later failure may have left it applied.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{CONNECTION, HeaderName, TRANSFER_ENCODING, UPGRADE};
use hyper::http::request::Parts;
use hyper::{Request, Response};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use leaseq_cluster::NodeId;

/// The header a forwarded request carries: the forwarding node's id.
pub(crate) const FORWARDED_BY: &str = "x-leaseq-forwarded-by";
/// How long a forwarded request may take end to end.
pub(crate) const FORWARD_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest answer passed back (a batch of ten 256 KiB messages, encoded).
const MAX_ANSWER_BYTES: usize = 8 * 1024 * 1024;

/// A pooled HTTP/1.1 client to the other nodes.
#[derive(Debug, Clone)]
pub(crate) struct Forwarder {
    client: Client<HttpConnector, Full<Bytes>>,
    from: NodeId,
}

/// Headers that belong to one connection, not to the request.
fn hop_by_hop(name: &HeaderName) -> bool {
    name == CONNECTION
        || name == TRANSFER_ENCODING
        || name == UPGRADE
        || matches!(name.as_str(), "keep-alive" | "te" | "trailer" | "proxy-connection" | "proxy-authorization")
}

/// Idle connections a follower keeps to the leader between bursts.
const FORWARD_IDLE: usize = 64;

impl Forwarder {
    /// A client for node `from`.
    pub(crate) fn new(from: NodeId) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(2)));
        // A follower forwards as many requests at once as it has clients;
        // past a burst it keeps at most FORWARD_IDLE connections open.
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(20))
            .pool_max_idle_per_host(FORWARD_IDLE)
            .build(connector);
        Forwarder { client, from }
    }

    /// Sends the request made of `parts` and `body` to the node at `addr`
    /// and returns its answer, or why there is none.
    pub(crate) async fn forward(
        &self,
        addr: &str,
        parts: &Parts,
        body: Bytes,
    ) -> Result<Response<Full<Bytes>>, ForwardFailed> {
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let uri: hyper::Uri = format!("http://{addr}{path}")
            .parse()
            .map_err(|e| ForwardFailed::before(format!("bad leader address {addr}: {e}")))?;
        let mut request = Request::builder().method(parts.method.clone()).uri(uri);
        for (name, value) in &parts.headers {
            if !hop_by_hop(name) {
                request = request.header(name, value);
            }
        }
        let request = request
            .header(FORWARDED_BY, self.from.to_string())
            .body(Full::new(body))
            .map_err(|e| ForwardFailed::before(format!("cannot build the forwarded request: {e}")))?;
        let exchange = async {
            let response = self.client.request(request).await.map_err(|e| {
                let why = format!("the leader at {addr}: {e}");
                // A connect error: no connection, so no byte of the request left.
                if e.is_connect() { ForwardFailed::before(why) } else { ForwardFailed::after(why) }
            })?;
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, MAX_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|e| ForwardFailed::after(format!("the leader's answer could not be read: {e}")))?
                .to_bytes();
            let mut answer = Response::from_parts(parts, Full::new(body));
            drop_hop_by_hop(answer.headers_mut());
            Ok(answer)
        };
        match tokio::time::timeout(FORWARD_TIMEOUT, exchange).await {
            Ok(answer) => answer,
            Err(_) => {
                Err(ForwardFailed::after(format!("the leader at {addr} did not answer within {FORWARD_TIMEOUT:?}")))
            }
        }
    }
}

/// Why a forward failed.
#[derive(Debug)]
pub(crate) struct ForwardFailed {
    /// In words, for the client.
    pub(crate) why: String,
    /// The request never reached the leader (nothing can have applied it).
    pub(crate) before_sending: bool,
}

impl ForwardFailed {
    fn before(why: String) -> Self {
        ForwardFailed { why, before_sending: true }
    }

    fn after(why: String) -> Self {
        ForwardFailed { why, before_sending: false }
    }
}

/// Drops hop-by-hop headers from `headers`.
fn drop_hop_by_hop(headers: &mut hyper::HeaderMap) {
    let names: Vec<HeaderName> = headers.keys().filter(|name| hop_by_hop(name)).cloned().collect();
    for name in names {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_connection_headers_are_dropped() {
        let mut headers = hyper::HeaderMap::new();
        headers.insert(CONNECTION, "keep-alive".parse().unwrap());
        headers.insert(TRANSFER_ENCODING, "chunked".parse().unwrap());
        headers.insert("x-amz-target", "AmazonSQS.SendMessage".parse().unwrap());
        headers.insert("authorization", "AWS4-HMAC-SHA256 ...".parse().unwrap());
        headers.insert("host", "127.0.0.1:9402".parse().unwrap());
        drop_hop_by_hop(&mut headers);
        let mut left: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        left.sort_unstable();
        assert_eq!(left, ["authorization", "host", "x-amz-target"]);
    }
}
