//! The SQS JSON protocol (leaseq-server and moto): SendMessage /
//! ReceiveMessage / DeleteMessage, or their batch forms for batches
//! (SendMessageBatch, ReceiveMessage with MaxNumberOfMessages,
//! DeleteMessageBatch). The lease is the queue's VisibilityTimeout; receives
//! are short polls (WaitTimeSeconds 0) so an empty queue answers at once.

use std::net::SocketAddr;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::json;

use crate::error::LoadError;
use crate::http1::{HttpConnection, Response};
use crate::session::{Session, Target};

/// A queue on an SQS-protocol server.
#[derive(Debug)]
pub(crate) struct SqsTarget {
    /// A cluster's nodes (or the one server); connection i opens on node i mod n.
    pub(crate) addresses: Vec<SocketAddr>,
    pub(crate) queue: String,
    pub(crate) lease_seconds: u32,
    queue_url: std::sync::OnceLock<String>,
}

impl SqsTarget {
    /// `addresses` must not be empty.
    pub(crate) fn new(addresses: Vec<SocketAddr>, queue: String, lease_seconds: u32) -> Self {
        assert!(!addresses.is_empty(), "an SQS target needs an address");
        SqsTarget { addresses, queue, lease_seconds, queue_url: std::sync::OnceLock::new() }
    }

    fn node(&self, index: usize) -> SocketAddr {
        self.addresses[index % self.addresses.len()]
    }
}

/// One connection's requests.
#[derive(Debug)]
pub(crate) struct SqsSession {
    http: HttpConnection,
    queue_url: String,
    body: Vec<u8>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct CreateQueueReply {
    queue_url: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ReceiveReply {
    #[serde(default)]
    messages: Vec<ReceivedMessage>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ReceivedMessage {
    receipt_handle: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct BatchReply {
    #[serde(default)]
    failed: Vec<serde_json::Value>,
}

fn ok(action: &str, response: Response) -> Result<Vec<u8>, LoadError> {
    if response.status == 200 {
        Ok(response.body)
    } else {
        Err(LoadError::new(format!(
            "SQS {action} answered {}: {}",
            response.status,
            String::from_utf8_lossy(&response.body)
        )))
    }
}

/// The error code SQS gives a delete whose lease was lost.
const LEASE_LOST: &str = "ReceiptHandleIsInvalid";

/// Checks a batch reply: entries that failed with `tolerated` are counted,
/// any other failure is an error.
fn failures(action: &str, body: &[u8], tolerated: Option<&str>) -> Result<u64, LoadError> {
    let reply: BatchReply = serde_json::from_slice(body)?;
    let mut counted = 0;
    for failure in &reply.failed {
        let code = failure.get("Code").and_then(|c| c.as_str());
        if code.is_some() && code == tolerated {
            counted += 1;
        } else {
            return Err(LoadError::new(format!("SQS {action}: {} entries failed, e.g. {failure}", reply.failed.len())));
        }
    }
    Ok(counted)
}

impl Target for SqsTarget {
    type Session = SqsSession;

    async fn prepare(&self) -> Result<(), LoadError> {
        let mut http = HttpConnection::open(self.node(0)).await?;
        let request = json!({
            "QueueName": self.queue,
            "Attributes": { "VisibilityTimeout": self.lease_seconds.to_string() },
        });
        let body = ok("CreateQueue", http.post_sqs("CreateQueue", &serde_json::to_vec(&request)?).await?)?;
        let reply: CreateQueueReply = serde_json::from_slice(&body)?;
        self.queue_url.set(reply.queue_url).map_err(|_| LoadError::new("prepare ran twice"))
    }

    async fn connect(&self, index: usize) -> Result<SqsSession, LoadError> {
        let queue_url = self.queue_url.get().ok_or_else(|| LoadError::new("connect before prepare"))?.clone();
        Ok(SqsSession { http: HttpConnection::open(self.node(index)).await?, queue_url, body: Vec::new() })
    }

    async fn finish(&self) -> Result<(), LoadError> {
        let Some(url) = self.queue_url.get() else { return Ok(()) };
        let mut http = HttpConnection::open(self.node(0)).await?;
        let request = serde_json::to_vec(&json!({ "QueueUrl": url }))?;
        ok("DeleteQueue", http.post_sqs("DeleteQueue", &request).await?).map(drop)
    }
}

impl SqsSession {
    async fn call(&mut self, action: &str, request: serde_json::Value) -> Result<Vec<u8>, LoadError> {
        self.body.clear();
        serde_json::to_writer(&mut self.body, &request)?;
        let response = self.http.post_sqs(action, &self.body).await?;
        ok(action, response)
    }
}

fn text(body: &Bytes) -> &str {
    std::str::from_utf8(body).unwrap_or("?")
}

impl Session for SqsSession {
    type Handle = String;

    async fn send(&mut self, bodies: &[Bytes]) -> Result<(), LoadError> {
        let url = self.queue_url.clone();
        if let [single] = bodies {
            self.call("SendMessage", json!({ "QueueUrl": url, "MessageBody": text(single) })).await.map(drop)
        } else {
            let entries: Vec<_> = bodies
                .iter()
                .enumerate()
                .map(|(i, b)| json!({ "Id": i.to_string(), "MessageBody": text(b) }))
                .collect();
            let body = self.call("SendMessageBatch", json!({ "QueueUrl": url, "Entries": entries })).await?;
            failures("SendMessageBatch", &body, None).map(drop)
        }
    }

    async fn receive(&mut self, max: usize) -> Result<Vec<String>, LoadError> {
        let url = self.queue_url.clone();
        let body = self
            .call("ReceiveMessage", json!({ "QueueUrl": url, "MaxNumberOfMessages": max, "WaitTimeSeconds": 0 }))
            .await?;
        let reply: ReceiveReply = serde_json::from_slice(&body)?;
        Ok(reply.messages.into_iter().map(|m| m.receipt_handle).collect())
    }

    async fn delete(&mut self, handles: Vec<String>) -> Result<u64, LoadError> {
        let url = self.queue_url.clone();
        if handles.len() == 1 {
            match self.call("DeleteMessage", json!({ "QueueUrl": url, "ReceiptHandle": handles[0] })).await {
                Ok(_) => Ok(1),
                Err(e) if e.0.contains(LEASE_LOST) => Ok(0),
                Err(e) => Err(e),
            }
        } else {
            let entries: Vec<_> =
                handles.iter().enumerate().map(|(i, h)| json!({ "Id": i.to_string(), "ReceiptHandle": h })).collect();
            let body = self.call("DeleteMessageBatch", json!({ "QueueUrl": url, "Entries": entries })).await?;
            let lost = failures("DeleteMessageBatch", &body, Some(LEASE_LOST))?;
            Ok(handles.len() as u64 - lost)
        }
    }
}
