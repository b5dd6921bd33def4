//! Connection limits: beyond `max_connections` a client waits (in the
//! kernel's backlog) until a connection closes; an idle or slow connection is
//! closed after `idle_timeout`; a zero limit is refused.

mod common;

use std::time::{Duration, Instant};

use common::TestServer;
use leaseq_server::{ConnectionLimits, Registry, ServeOptions, serve_with};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends a keep-alive `GET /metrics` and reads exactly one response; returns
/// its body.
async fn metrics_on(stream: &mut TcpStream) -> String {
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: leaseq\r\n\r\n").await.unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map(|v| v.trim().parse().unwrap())
                .expect("a content length");
            if buf.len() >= end + 4 + length {
                return String::from_utf8_lossy(&buf[end + 4..end + 4 + length]).into_owned();
            }
        }
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the server closed the connection mid-response");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Reads until the server closes the connection; returns how long that took.
async fn closed_within(stream: &mut TcpStream, bound: Duration) -> Duration {
    let started = Instant::now();
    let mut chunk = [0u8; 1024];
    tokio::time::timeout(bound, async {
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .expect("the server closes the connection");
    started.elapsed()
}

#[tokio::test]
async fn connections_beyond_the_limit_wait_until_one_closes() {
    let server =
        TestServer::limited(ConnectionLimits { max_connections: 2, idle_timeout: Duration::from_secs(20) }).await;
    let mut first = TcpStream::connect(server.addr).await.unwrap();
    let mut second = TcpStream::connect(server.addr).await.unwrap();
    metrics_on(&mut first).await;
    let text = metrics_on(&mut second).await;
    assert!(text.contains("leaseq_server_connections 2\n"), "{text}");
    assert!(text.contains("leaseq_server_max_connections 2\n"), "{text}");

    // A third connects (the kernel's backlog takes it) but is not served...
    let mut third = TcpStream::connect(server.addr).await.unwrap();
    third.write_all(b"GET /metrics HTTP/1.1\r\nHost: leaseq\r\n\r\n").await.unwrap();
    let mut rest = [0u8; 4096];
    let early = tokio::time::timeout(Duration::from_millis(500), third.read(&mut rest)).await;
    assert!(early.is_err(), "a third connection was served past a limit of 2: {early:?}");
    // ...until one of the two closes; its request was kept and is answered.
    drop(first);
    let n = tokio::time::timeout(Duration::from_secs(10), third.read(&mut rest))
        .await
        .expect("served once a connection closed")
        .unwrap();
    let reply = String::from_utf8_lossy(&rest[..n]);
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    // The second is still served too.
    metrics_on(&mut second).await;
    drop((second, third));
    server.stop().await;
}

#[tokio::test]
async fn an_idle_or_slow_connection_is_closed_after_the_idle_timeout() {
    let idle = Duration::from_millis(300);
    let server = TestServer::limited(ConnectionLimits { max_connections: 8, idle_timeout: idle }).await;
    // Idle after a request on a kept-alive connection.
    let mut kept = TcpStream::connect(server.addr).await.unwrap();
    metrics_on(&mut kept).await;
    let took = closed_within(&mut kept, Duration::from_secs(10)).await;
    assert!(took >= idle / 2, "closed after {took:?}, before the idle timeout of {idle:?}");
    // Headers that never finish.
    let mut slow = TcpStream::connect(server.addr).await.unwrap();
    slow.write_all(b"POST / HTTP/1.1\r\nHost: leaseq\r\n").await.unwrap();
    closed_within(&mut slow, Duration::from_secs(10)).await;
    // A fresh connection is served as before.
    let mut fresh = TcpStream::connect(server.addr).await.unwrap();
    let text = metrics_on(&mut fresh).await;
    assert!(text.contains("leaseq_server_connections 1\n"), "the closed ones gave their places back: {text}");
    drop(fresh);
    server.stop().await;
}

#[tokio::test]
async fn a_zero_connection_limit_is_refused() {
    let registry = std::sync::Arc::new(Registry::open(leaseq::Engine::new(), None).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let limits = ConnectionLimits { max_connections: 0, ..ConnectionLimits::default() };
    let result = serve_with(listener, registry, ServeOptions { limits, ..ServeOptions::default() }, async {}).await;
    let error = result.expect_err("a limit of 0 connections serves nothing");
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
    assert!(error.to_string().contains("max_connections"), "{error}");
}
