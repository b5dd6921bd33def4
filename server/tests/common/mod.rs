//! A server on an ephemeral loopback port, and clients for it: the official
//! `aws-sdk-sqs` and a raw HTTP/1.1 one for requests no SDK would send.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::config::{BehaviorVersion, Region};
use leaseq::Engine;
use leaseq_server::{ConnectionLimits, Credentials, Registry, ServeOptions, serve_with};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A running server; `stop` shuts it down gracefully.
pub struct TestServer {
    pub addr: SocketAddr,
    pub client: Client,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    /// An in-memory server.
    pub async fn start() -> TestServer {
        Self::with_engine(Engine::new(), None).await
    }

    /// A server over a durable engine in `dir`.
    pub async fn durable(dir: PathBuf) -> TestServer {
        let engine = Engine::builder().data_dir(&dir).open().expect("open data dir");
        Self::with_engine(engine, Some(dir)).await
    }

    /// An in-memory server whose engine runs on `clock` (a test moves time).
    pub async fn on_clock(clock: leaseq::ManualClock) -> TestServer {
        Self::with_engine(Engine::builder().clock(clock).build(), None).await
    }

    /// An in-memory server that requires SigV4 signatures by `credentials`.
    pub async fn signed(credentials: Credentials) -> TestServer {
        Self::serving(Engine::new(), None, ServeOptions { credentials: Some(credentials), ..ServeOptions::default() })
            .await
    }

    /// An in-memory server with these connection limits.
    pub async fn limited(limits: ConnectionLimits) -> TestServer {
        Self::serving(Engine::new(), None, ServeOptions { limits, ..ServeOptions::default() }).await
    }

    async fn with_engine(engine: Engine, dir: Option<PathBuf>) -> TestServer {
        Self::serving(engine, dir, ServeOptions::default()).await
    }

    async fn serving(engine: Engine, dir: Option<PathBuf>, options: ServeOptions) -> TestServer {
        let registry = Arc::new(Registry::open(engine, dir).expect("registry"));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve_with(listener, registry, options, async {
            let _ = stopped.await;
        }));
        TestServer { addr, client: sdk_client(addr), stop: Some(stop), task: Some(task) }
    }

    /// Stops the server and waits (bounded) until it has drained.
    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        let task = self.task.take().unwrap();
        tokio::time::timeout(Duration::from_secs(30), task).await.expect("drained in time").unwrap().unwrap();
    }

    /// The `/metrics` page.
    pub async fn metrics(&self) -> String {
        let get = format!("GET /metrics HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", self.addr);
        let reply = raw_exchange(self.addr, get.as_bytes()).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply.body
    }

    /// The URL of queue `name` as the server reports it.
    pub fn url(&self, name: &str) -> String {
        format!("http://{}/000000000000/{name}", self.addr)
    }

    /// Creates queue `name` with `attributes` and returns its URL.
    pub async fn create(&self, name: &str, attributes: &[(&str, &str)]) -> String {
        let mut request = self.client.create_queue().queue_name(name);
        for (key, value) in attributes {
            request = request.attributes(aws_sdk_sqs::types::QueueAttributeName::from(*key), *value);
        }
        request.send().await.expect("create queue").queue_url.expect("queue url")
    }

    /// POSTs `body` with `target` (and the JSON content type) and returns
    /// status, the `x-amzn-query-error` header and the JSON body.
    pub async fn raw(&self, target: Option<&str>, content_type: &str, body: &[u8]) -> RawResponse {
        let mut head = format!("POST / HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n", self.addr);
        if let Some(target) = target {
            head.push_str(&format!("X-Amz-Target: {target}\r\n"));
        }
        head.push_str(&format!("Content-Type: {content_type}\r\nContent-Length: {}\r\n\r\n", body.len()));
        let mut request = head.into_bytes();
        request.extend_from_slice(body);
        raw_exchange(self.addr, &request).await
    }
}

/// What the raw client read back.
#[derive(Debug)]
pub struct RawResponse {
    pub status: u16,
    pub query_error: Option<String>,
    pub json: serde_json::Value,
    pub body: String,
}

/// Sends `request` bytes, reads until the server closes, parses the response.
pub async fn raw_exchange(addr: SocketAddr, request: &[u8]) -> RawResponse {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        // The server may answer (and close) before the whole body is sent.
        let _ = stream.write_all(request).await;
        let mut response = Vec::new();
        let _ = stream.read_to_end(&mut response).await;
        response
    };
    let response = tokio::time::timeout(Duration::from_secs(20), exchange).await.expect("server answered in time");
    let text = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP response");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let query_error = head
        .lines()
        .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("x-amzn-query-error")))
        .map(|(_, v)| v.trim().to_string());
    let json = serde_json::from_str(body).unwrap_or(serde_json::Value::Null);
    RawResponse { status, query_error, json, body: body.to_string() }
}

/// The official SDK client pointed at `addr` with test credentials.
pub fn sdk_client(addr: SocketAddr) -> Client {
    sdk_client_as(addr, "test", "test")
}

/// The official SDK client pointed at `addr`, signing as `key`/`secret`.
pub fn sdk_client_as(addr: SocketAddr, key: &str, secret: &str) -> Client {
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(key, secret, None, None, "tests"))
        .endpoint_url(format!("http://{addr}"))
        .http_client(aws_smithy_http_client::Builder::new().build_http())
        .build();
    Client::from_conf(config)
}

/// The SQS error code of an SDK error.
pub fn code_of<E, R>(error: &aws_sdk_sqs::error::SdkError<E, R>) -> String
where
    E: aws_sdk_sqs::error::ProvideErrorMetadata,
{
    error
        .as_service_error()
        .and_then(|e| e.code())
        .map(str::to_string)
        .unwrap_or_else(|| "not a service error".to_string())
}
pub mod cluster;

/// `ApproximateNumberOfMessages` of the queue at `url`.
pub async fn visible(client: &Client, url: &str) -> u64 {
    use aws_sdk_sqs::types::QueueAttributeName;
    let name = QueueAttributeName::ApproximateNumberOfMessages;
    let answer = client.get_queue_attributes().queue_url(url).attribute_names(name.clone()).send().await.unwrap();
    answer.attributes().unwrap()[&name].parse().unwrap()
}

/// A RedrivePolicy naming dead-letter queue `dlq` with `maxReceiveCount`.
pub fn redrive_to(dlq: &str, max_receive_count: u32) -> String {
    format!(
        r#"{{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:{dlq}","maxReceiveCount":{max_receive_count}}}"#
    )
}

/// Sets the RedrivePolicy of the queue at `url` (`""` removes it); the
/// error's code if the server refuses.
pub async fn set_redrive_policy(client: &Client, url: &str, policy: &str) -> Result<(), String> {
    use aws_sdk_sqs::types::QueueAttributeName;
    let set = client.set_queue_attributes().queue_url(url).attributes(QueueAttributeName::RedrivePolicy, policy);
    set.send().await.map(|_| ()).map_err(|e| code_of(&e))
}

/// The RedrivePolicy of the queue at `url` as JSON, `None` when it has none.
pub async fn redrive_policy(client: &Client, url: &str) -> Option<serde_json::Value> {
    use aws_sdk_sqs::types::QueueAttributeName;
    let name = QueueAttributeName::RedrivePolicy;
    let answer = client.get_queue_attributes().queue_url(url).attribute_names(name.clone()).send().await.unwrap();
    answer.attributes().and_then(|a| a.get(&name)).map(|policy| serde_json::from_str(policy).unwrap())
}
