//! The request decoder under generated input: whatever the target, content
//! type, headers and body, the server answers with an SQS error or a success
//! (never a 5xx, never a hang, never a dropped connection for a well-formed
//! HTTP request) and stays up for the next client.
//!
//! Bodies are JSON objects built from the parameter names the actions read,
//! with values of every JSON type (so the typed decoding of each field is
//! exercised, not only the JSON parser), or arbitrary bytes. The queue URL
//! of a real queue is among the values, so requests reach the engine.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::TestServer;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Map, Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ACTIONS: &[&str] = &[
    "CreateQueue",
    "GetQueueUrl",
    "ListQueues",
    "PurgeQueue",
    "GetQueueAttributes",
    "SetQueueAttributes",
    "ListDeadLetterSourceQueues",
    "SendMessage",
    "SendMessageBatch",
    "ReceiveMessage",
    "DeleteMessage",
    "DeleteMessageBatch",
    "ChangeMessageVisibility",
    "ChangeMessageVisibilityBatch",
    "StartMessageMoveTask",
    "ListMessageMoveTasks",
    "CancelMessageMoveTask",
    "TagQueue",
];

/// Parameter names the actions read (and a few they do not).
const KEYS: &[&str] = &[
    "QueueName",
    "QueueUrl",
    "QueueNamePrefix",
    "MaxResults",
    "NextToken",
    "Attributes",
    "AttributeNames",
    "MessageAttributeNames",
    "MessageSystemAttributeNames",
    "MessageBody",
    "DelaySeconds",
    "MessageAttributes",
    "MessageSystemAttributes",
    "MessageDeduplicationId",
    "MessageGroupId",
    "Entries",
    "Id",
    "ReceiptHandle",
    "MaxNumberOfMessages",
    "VisibilityTimeout",
    "WaitTimeSeconds",
    "SourceArn",
    "DestinationArn",
    "MaxNumberOfMessagesPerSecond",
    "TaskHandle",
    "DataType",
    "StringValue",
    "BinaryValue",
    "RedrivePolicy",
    "MessageRetentionPeriod",
    "MaximumMessageSize",
    "FifoQueue",
    "Unrelated",
];

/// Strings worth trying: the live queue's URL and ARN, receipt-like text,
/// attribute names and values, and awkward text.
fn interesting_string(addr: SocketAddr) -> impl Strategy<Value = String> {
    let url = format!("http://{addr}/000000000000/fuzzed");
    prop_oneof![
        Just(url.clone()),
        Just(format!("{url}-missing")),
        Just("arn:aws:sqs:us-east-1:000000000000:fuzzed".to_string()),
        Just("fuzzed".to_string()),
        Just("All".to_string()),
        Just("String".to_string()),
        Just("Number".to_string()),
        Just("Binary".to_string()),
        Just("3600".to_string()),
        Just("-1".to_string()),
        Just("99999999999999999999".to_string()),
        Just(
            r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:fuzzed","maxReceiveCount":"2"}"#.to_string()
        ),
        Just("AQID".to_string()),
        Just("".to_string()),
        "[a-zA-Z0-9._-]{0,20}",
        "\\PC{0,40}",
    ]
}

fn json_value(addr: SocketAddr) -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        // Long-poll and delay fields accept 0..=20 and 0..=900: stay outside
        // 1..=20 mostly so no case waits, but try the edges.
        prop_oneof![Just(0i64), Just(-1), Just(21), Just(901), Just(i64::MAX), Just(i64::MIN), 0i64..11]
            .prop_map(Value::from),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        interesting_string(addr).prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..6).prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
        ]
    })
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![prop::sample::select(KEYS).prop_map(str::to_string), "[A-Za-z]{1,12}"]
}

/// A request: target header, content type, body.
#[derive(Debug, Clone)]
struct Request {
    target: Option<String>,
    content_type: String,
    body: Vec<u8>,
}

/// The parameters each action needs, so most bodies get past the
/// missing-parameter check and reach the typed decoding and the engine.
fn required(action: &str) -> &'static [&'static str] {
    match action {
        "CreateQueue" | "GetQueueUrl" => &["QueueName"],
        "SendMessage" => &["QueueUrl", "MessageBody"],
        "SendMessageBatch" | "DeleteMessageBatch" | "ChangeMessageVisibilityBatch" => &["QueueUrl", "Entries"],
        "DeleteMessage" => &["QueueUrl", "ReceiptHandle"],
        "ChangeMessageVisibility" => &["QueueUrl", "ReceiptHandle", "VisibilityTimeout"],
        "SetQueueAttributes" => &["QueueUrl", "Attributes"],
        "StartMessageMoveTask" | "ListMessageMoveTasks" => &["SourceArn"],
        "CancelMessageMoveTask" => &["TaskHandle"],
        "ListQueues" => &[],
        _ => &["QueueUrl"],
    }
}

/// A value for `key`: mostly one of the right shape, sometimes anything.
fn value_for(key: &str, addr: SocketAddr, handles: Vec<String>) -> BoxedStrategy<Value> {
    let url = format!("http://{addr}/000000000000/fuzzed");
    let handle = prop::sample::select(handles).prop_map(Value::String);
    let entry = (
        "[a-z0-9]{1,3}",
        interesting_string(addr),
        handle.clone(),
        0i64..50,
        prop::collection::vec(prop::bool::weighted(0.9), 4),
    )
        .prop_map(|(id, body, handle, visibility, keep)| {
            let fields = [
                ("Id", Value::String(id)),
                ("MessageBody", Value::String(body)),
                ("ReceiptHandle", handle),
                ("VisibilityTimeout", Value::from(visibility)),
            ];
            Value::Object(
                fields.into_iter().zip(keep).filter(|(_, k)| *k).map(|((n, v), _)| (n.to_string(), v)).collect(),
            )
        });
    let right = match key {
        "QueueUrl" => {
            prop_oneof![6 => Just(Value::String(url)), 2 => interesting_string(addr).prop_map(Value::String)].boxed()
        }
        "QueueName" => prop_oneof![Just("fuzzed".to_string()), "[a-z]{1,8}", interesting_string(addr)]
            .prop_map(Value::String)
            .boxed(),
        "ReceiptHandle" => handle.boxed(),
        "Entries" => {
            prop::collection::vec(prop_oneof![6 => entry, 1 => json_value(addr)], 0..12).prop_map(Value::Array).boxed()
        }
        "Attributes" => {
            prop::collection::vec((prop::sample::select(KEYS).prop_map(str::to_string), interesting_string(addr)), 0..4)
                .prop_map(|pairs| Value::Object(pairs.into_iter().map(|(k, v)| (k, Value::String(v))).collect()))
                .boxed()
        }
        "VisibilityTimeout" => (0i64..50).prop_map(Value::from).boxed(),
        _ => interesting_string(addr).prop_map(Value::String).boxed(),
    };
    prop_oneof![6 => right, 1 => json_value(addr)].boxed()
}

fn request(addr: SocketAddr, handles: Vec<String>) -> impl Strategy<Value = Request> {
    // DeleteQueue is rare: the live queue should mostly be there.
    let action = prop_oneof![30 => prop::sample::select(ACTIONS), 1 => Just("DeleteQueue")];
    let framed = action.prop_flat_map(move |action| {
        let fields: Vec<_> = required(action)
            .iter()
            .map(|&k| (Just(k.to_string()), value_for(k, addr, handles.clone()), prop::bool::weighted(0.95)))
            .collect();
        let extra = prop::collection::vec((key(), json_value(addr)), 0..2);
        let target = prop_oneof![
            18 => Just(Some(format!("AmazonSQS.{action}"))),
            1 => Just(None),
            1 => "[ -~]{0,30}".prop_map(Some),
        ];
        (target, fields, extra).prop_map(|(target, fields, extra)| {
            let mut object: Map<String, Value> = extra.into_iter().collect();
            object.extend(fields.into_iter().filter(|(_, _, keep)| *keep).map(|(k, v, _)| (k, v)));
            (target, serde_json::to_vec(&Value::Object(object)).unwrap())
        })
    });
    let content_type = prop_oneof![
        18 => Just("application/x-amz-json-1.0".to_string()),
        1 => Just("application/json".to_string()),
        1 => "[ -~]{0,30}",
    ];
    let body = prop_oneof![
        8 => framed,
        1 => json_value(addr).prop_map(|v| (Some("AmazonSQS.SendMessage".to_string()), serde_json::to_vec(&v).unwrap())),
        1 => prop::collection::vec(any::<u8>(), 0..200).prop_map(|b| (Some("AmazonSQS.ReceiveMessage".to_string()), b)),
    ];
    let json = (body, content_type).prop_map(|((target, body), content_type)| Request { target, content_type, body });
    prop_oneof![9 => json, 2 => form_request(addr)]
}

/// Query-protocol spellings of the parameters, flattened lists and maps and
/// batch entries among them, some numbered badly.
const FORM_KEYS: &[&str] = &[
    "QueueName",
    "QueueUrl",
    "MessageBody",
    "DelaySeconds",
    "MaxNumberOfMessages",
    "VisibilityTimeout",
    "WaitTimeSeconds",
    "ReceiptHandle",
    "Attribute.1.Name",
    "Attribute.1.Value",
    "Attribute.2.Name",
    "AttributeName.1",
    "AttributeName.0",
    "MessageAttributeName.1",
    "MessageAttribute.1.Name",
    "MessageAttribute.1.Value.DataType",
    "MessageAttribute.1.Value.StringValue",
    "MessageAttribute.1.Value.BinaryValue",
    "SendMessageBatchRequestEntry.1.Id",
    "SendMessageBatchRequestEntry.1.MessageBody",
    "SendMessageBatchRequestEntry.2.Id",
    "DeleteMessageBatchRequestEntry.1.Id",
    "DeleteMessageBatchRequestEntry.1.ReceiptHandle",
    "Tag.1.Key",
    "Tag.1.Value",
    "Action",
];

/// A query-protocol request: a form naming an action, with parameters.
fn form_request(addr: SocketAddr) -> impl Strategy<Value = Request> {
    let key = prop_oneof![6 => prop::sample::select(FORM_KEYS).prop_map(str::to_string), 1 => "[A-Za-z0-9.]{1,20}"];
    let pairs = prop::collection::vec((key, interesting_string(addr)), 0..8);
    (prop::sample::select(ACTIONS), pairs, prop::bool::weighted(0.9)).prop_map(|(action, pairs, named)| {
        let mut form = form_urlencoded::Serializer::new(String::new());
        if named {
            form.append_pair("Action", action);
        }
        for (k, v) in &pairs {
            form.append_pair(k, v);
        }
        Request {
            target: None,
            content_type: "application/x-www-form-urlencoded; charset=utf-8".into(),
            body: form.finish().into_bytes(),
        }
    })
}

/// Status and body of one exchange, or why there was none.
async fn exchange(addr: SocketAddr, bytes: &[u8]) -> Result<(u16, Vec<u8>), String> {
    let talk = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.map_err(|e| format!("connect: {e}"))?;
        let _ = stream.write_all(bytes).await;
        let mut response = Vec::new();
        let _ = stream.read_to_end(&mut response).await;
        Ok::<_, String>(response)
    };
    let response =
        tokio::time::timeout(Duration::from_secs(20), talk).await.map_err(|_| "no answer in 20 s".to_string())??;
    let split = response.windows(4).position(|w| w == b"\r\n\r\n").ok_or("no HTTP response")?;
    let head = String::from_utf8_lossy(&response[..split]).into_owned();
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).ok_or(format!("bad status line: {head}"))?;
    Ok((status, response[split + 4..].to_vec()))
}

fn encode(addr: SocketAddr, r: &Request) -> Vec<u8> {
    let mut head = format!("POST / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(target) = &r.target {
        head.push_str(&format!("X-Amz-Target: {target}\r\n"));
    }
    head.push_str(&format!("Content-Type: {}\r\nContent-Length: {}\r\n\r\n", r.content_type, r.body.len()));
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(&r.body);
    bytes
}

/// Checks one answer: a success, or a 4xx with an SQS error body (XML for
/// a query-protocol form).
fn check(status: u16, body: &[u8], form: bool) -> Result<(), String> {
    if status == 200 {
        return Ok(());
    }
    if !(400..500).contains(&status) {
        return Err(format!("status {status}: {}", String::from_utf8_lossy(body)));
    }
    if form {
        let text = String::from_utf8_lossy(body);
        let shaped = text.starts_with("<?xml") && text.contains("<ErrorResponse") && text.contains("<Code>");
        return if shaped { Ok(()) } else { Err(format!("status {status}, not a query-protocol error: {text}")) };
    }
    let json: Value = serde_json::from_slice(body).map_err(|e| format!("status {status}, error body not JSON: {e}"))?;
    match json["__type"].as_str() {
        Some(kind) if kind.starts_with("com.amazonaws.sqs#") && json["message"].is_string() => Ok(()),
        _ => Err(format!("status {status}, not an SQS error: {json}")),
    }
}

#[test]
fn generated_requests_get_answers_never_panics_or_hangs() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let server = runtime.block_on(TestServer::start());
    let addr = server.addr;
    runtime.block_on(server.create("fuzzed", &[]));
    // Messages to receive, delete and move, and real receipt handles (some
    // current, some made stale by a later receive) among the values.
    let handles = runtime.block_on(async {
        let mut handles = vec!["not-a-handle".to_string()];
        for i in 0..40 {
            server
                .client
                .send_message()
                .queue_url(server.url("fuzzed"))
                .message_body(format!("m{i}"))
                .send()
                .await
                .unwrap();
        }
        for _ in 0..2 {
            let got = server
                .client
                .receive_message()
                .queue_url(server.url("fuzzed"))
                .max_number_of_messages(10)
                .visibility_timeout(0)
                .send()
                .await
                .unwrap();
            handles.extend(got.messages.unwrap_or_default().into_iter().filter_map(|m| m.receipt_handle));
        }
        handles
    });

    let mut runner = TestRunner::new(Config { cases: 1000, failure_persistence: None, ..Config::default() });
    let outcome = runner.run(&request(addr, handles), |r| {
        let (status, body) = runtime.block_on(exchange(addr, &encode(addr, &r))).map_err(TestCaseError::fail)?;
        check(status, &body, r.content_type.starts_with("application/x-www-form-urlencoded"))
            .map_err(TestCaseError::fail)
    });
    if let Err(failure) = outcome {
        panic!("{failure}");
    }

    // Still serving, and a proper request still works.
    runtime.block_on(async {
        let url = server.create("after-fuzz", &[]).await;
        server.client.send_message().queue_url(&url).message_body("still here").send().await.expect("send");
        let got = server.client.receive_message().queue_url(&url).send().await.expect("receive");
        let message = &got.messages.expect("a message")[0];
        assert_eq!(message.body.as_deref(), Some("still here"));
        let handle = message.receipt_handle.clone().unwrap();
        server.client.delete_message().queue_url(&url).receipt_handle(handle).send().await.expect("delete");
    });
    runtime.block_on(server.stop());
}

#[test]
fn arbitrary_bytes_on_the_socket_never_take_the_server_down() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let server = runtime.block_on(TestServer::start());
    let addr = server.addr;

    // Whole requests of arbitrary bytes, and valid heads with garbage after.
    let garbage = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..300),
        prop::collection::vec(any::<u8>(), 0..300).prop_map(|tail| {
            let mut bytes = b"POST / HTTP/1.1\r\nHost: x\r\n".to_vec();
            bytes.extend(tail);
            bytes
        }),
    ];
    let mut runner = TestRunner::new(Config { cases: 300, failure_persistence: None, ..Config::default() });
    let outcome = runner.run(&garbage, |bytes| {
        // The server may answer 400 or just close; it must do one of them
        // in time (a request cut short is closed when the write half is).
        let answer = runtime.block_on(async {
            let talk = async {
                let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
                let _ = stream.write_all(&bytes).await;
                let _ = stream.shutdown().await;
                let mut response = Vec::new();
                let _ = stream.read_to_end(&mut response).await;
                response
            };
            tokio::time::timeout(Duration::from_secs(20), talk).await
        });
        let response = answer.map_err(|_| TestCaseError::fail("no answer and no close in 20 s"))?;
        if let Some(status) = response.get(9..12).and_then(|s| std::str::from_utf8(s).ok()) {
            prop_assert!(!status.starts_with('5'), "server error: {}", String::from_utf8_lossy(&response));
        }
        Ok(())
    });
    if let Err(failure) = outcome {
        panic!("{failure}");
    }

    let reply = runtime.block_on(exchange(
        addr,
        &encode(
            addr,
            &Request {
                target: Some("AmazonSQS.ListQueues".into()),
                content_type: "application/x-amz-json-1.0".into(),
                body: json!({}).to_string().into_bytes(),
            },
        ),
    ));
    assert_eq!(reply.map(|(status, _)| status), Ok(200), "a valid request after the garbage is served");
    runtime.block_on(server.stop());
}
