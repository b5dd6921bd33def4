//! The wire protocol with a raw HTTP/1.1 client: requests no SDK would send
//! still get SQS errors (never a panic or a hung connection), and
//! connections are kept alive.

mod common;

use std::time::Duration;

use common::{TestServer, raw_exchange};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const JSON: &str = "application/x-amz-json-1.0";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_sqs_errors() {
    let server = TestServer::start().await;
    let r = server.raw(Some("AmazonSQS.CreateQueue"), JSON, b"{\"QueueName\": ").await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json["__type"], "com.amazonaws.sqs#SerializationException");

    let r = server.raw(Some("AmazonSQS.CreateQueue"), JSON, br#"{"QueueName": 7}"#).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json["__type"], "com.amazonaws.sqs#SerializationException");

    let r = server.raw(Some("AmazonSQS.FlyToTheMoon"), JSON, b"{}").await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json["__type"], "com.amazonaws.sqs#UnknownOperationException");
    assert!(r.json["message"].as_str().unwrap().contains("FlyToTheMoon"));

    let r = server.raw(Some("AmazonSQS.AddPermission"), JSON, b"{}").await;
    assert_eq!(r.json["__type"], "com.amazonaws.sqs#UnsupportedOperation");
    assert_eq!(r.query_error.as_deref(), Some("AWS.SimpleQueueService.UnsupportedOperation;Sender"));

    let r = server.raw(None, JSON, b"{}").await;
    assert_eq!(r.status, 400);
    assert!(r.json["message"].as_str().unwrap().contains("JSON protocol"), "{}", r.body);
    server.stop().await;
}

/// The query protocol's errors are XML with the query code the SDKs map
/// (boto3 1.28 drives the whole protocol in server/tests/boto3.sh).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_protocol_requests_get_xml_answers_and_errors() {
    const FORM: &str = "application/x-www-form-urlencoded; charset=utf-8";
    let server = TestServer::start().await;
    let r = server
        .raw(None, FORM, b"Action=CreateQueue&QueueName=formq&Attribute.1.Name=DelaySeconds&Attribute.1.Value=2")
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("<CreateQueueResult><QueueUrl>http://"), "{}", r.body);
    let r = server.raw(None, FORM, b"Action=ListQueues").await;
    assert!(r.body.contains("/000000000000/formq</QueueUrl>"), "{}", r.body);
    let r = server.raw(None, FORM, b"Action=GetQueueUrl&QueueName=nowhere").await;
    assert_eq!(r.status, 400);
    assert!(r.body.contains("<Code>AWS.SimpleQueueService.NonExistentQueue</Code>"), "{}", r.body);
    assert!(r.body.starts_with("<?xml") && r.body.contains("<ErrorResponse"), "{}", r.body);
    for (form, code) in [
        (&b"QueueName=x"[..], "MissingParameter"),
        (b"Action=FlyToTheMoon", "InvalidAction"),
        (b"Action=GetQueueAttributes&AttributeName.0=All", "InvalidParameterValue"),
        (b"Action=ReceiveMessage&QueueUrl=http://h/000000000000/formq&MaxNumberOfMessages=11", "InvalidParameterValue"),
    ] {
        let r = server.raw(None, FORM, form).await;
        assert_eq!(r.status, 400, "{}", r.body);
        assert!(r.body.contains(&format!("<Code>{code}</Code>")), "{code}: {}", r.body);
    }
    // The protocol's GET form, and a form sent to the queue's own URL
    // without a QueueUrl parameter (as older clients do).
    let get = format!(
        "GET /?Action=ListQueues&Version=2012-11-05 HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        server.addr
    );
    let r = raw_exchange(server.addr, get.as_bytes()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("/000000000000/formq</QueueUrl>"), "{}", r.body);
    let form = "Action=SendMessage&MessageBody=to+the+path";
    let post = format!(
        "POST /000000000000/formq HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Type: {FORM}\r\nContent-Length: {}\r\n\r\n{form}",
        server.addr,
        form.len()
    );
    let r = raw_exchange(server.addr, post.as_bytes()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("<SendMessageResult>"), "{}", r.body);

    // The queue the form made is the one JSON requests see.
    let r = server
        .raw(
            Some("AmazonSQS.GetQueueAttributes"),
            JSON,
            br#"{"QueueUrl": "http://h/000000000000/formq", "AttributeNames": ["DelaySeconds"]}"#,
        )
        .await;
    assert_eq!(r.json["Attributes"]["DelaySeconds"], "2", "{}", r.body);

    let r = server.raw(Some("AmazonSQS.CreateQueue"), JSON, b"{}").await;
    assert_eq!(r.json["__type"], "com.amazonaws.sqs#MissingParameter");

    let r = server.raw(Some("AmazonSQS.GetQueueUrl"), JSON, br#"{"QueueName": "nowhere"}"#).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json["__type"], "com.amazonaws.sqs#QueueDoesNotExist");
    assert_eq!(r.json["message"], "The specified queue does not exist.");
    assert_eq!(r.query_error.as_deref(), Some("AWS.SimpleQueueService.NonExistentQueue;Sender"));

    let get = format!("GET / HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", server.addr);
    let r = raw_exchange(server.addr, get.as_bytes()).await;
    assert_eq!(r.status, 400);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversize_bodies_are_refused_with_413() {
    let server = TestServer::start().await;
    let body = vec![b' '; leaseq_server::MAX_BODY_BYTES + 1];
    let r = server.raw(Some("AmazonSQS.ListQueues"), JSON, &body).await;
    assert_eq!(r.status, 413);
    assert_eq!(r.json["__type"], "com.amazonaws.sqs#RequestEntityTooLarge");

    // A chunked body that grows past the limit is cut off too.
    let mut request =
        format!("POST / HTTP/1.1\r\nHost: x\r\nX-Amz-Target: AmazonSQS.ListQueues\r\nContent-Type: {JSON}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
            .into_bytes();
    let chunk = vec![b' '; 64 * 1024];
    for _ in 0..20 {
        request.extend(format!("{:x}\r\n", chunk.len()).as_bytes());
        request.extend(&chunk);
        request.extend(b"\r\n");
    }
    request.extend(b"0\r\n\r\n");
    let r = raw_exchange(server.addr, &request).await;
    assert_eq!(r.status, 413);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_connection_serves_several_requests() {
    let server = TestServer::start().await;
    let mut stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    for name in ["k1", "k2", "k3"] {
        let body = format!(r#"{{"QueueName": "{name}"}}"#);
        let request = format!(
            "POST / HTTP/1.1\r\nHost: {}\r\nX-Amz-Target: AmazonSQS.CreateQueue\r\nContent-Type: {JSON}\r\nContent-Length: {}\r\n\r\n{body}",
            server.addr,
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        // Read one response: headers, then Content-Length bytes.
        let mut buf = Vec::new();
        let response = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let mut chunk = [0u8; 4096];
                let n = stream.read(&mut chunk).await.unwrap();
                assert!(n > 0, "server closed a keep-alive connection");
                buf.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&buf).into_owned();
                if let Some((head, body)) = text.split_once("\r\n\r\n") {
                    let length: usize = head
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap())
                        })
                        .unwrap();
                    if body.len() >= length {
                        return (head.to_string(), body[..length].to_string());
                    }
                }
            }
        })
        .await
        .unwrap();
        assert!(response.0.starts_with("HTTP/1.1 200"), "{response:?}");
        assert!(response.1.contains(&format!("/000000000000/{name}")), "{response:?}");
    }
    server.stop().await;
}

/// A long poll whose client went away must not take a message: the next
/// receiver gets it at once instead of after a visibility timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disconnected_long_poll_takes_no_message() {
    let server = TestServer::start().await;
    let url = server.create("abandoned", &[]).await;
    let body = format!(r#"{{"QueueUrl": "{url}", "WaitTimeSeconds": 20}}"#);
    let request = format!(
        "POST / HTTP/1.1\r\nHost: {}\r\nX-Amz-Target: AmazonSQS.ReceiveMessage\r\nContent-Type: {JSON}\r\nContent-Length: {}\r\n\r\n{body}",
        server.addr,
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(stream);
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.client.send_message().queue_url(&url).message_body("for the living").send().await.unwrap();
    let got = server.client.receive_message().queue_url(&url).wait_time_seconds(5).send().await.unwrap();
    assert_eq!(got.messages().len(), 1, "the abandoned poll took the message");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_report_requests_and_queue_depths() {
    let server = TestServer::start().await;
    let url = server.create("metered", &[]).await;
    for i in 0..3 {
        server.client.send_message().queue_url(&url).message_body(format!("m{i}")).send().await.unwrap();
    }
    server.client.receive_message().queue_url(&url).send().await.unwrap();
    let _ = server.client.get_queue_url().queue_name("absent").send().await;
    let text = server.metrics().await;
    for line in [
        "leaseq_sqs_requests_total{action=\"SendMessage\",outcome=\"ok\"} 3",
        "leaseq_sqs_requests_total{action=\"GetQueueUrl\",outcome=\"QueueDoesNotExist\"} 1",
        "leaseq_queue_messages{queue=\"metered\",state=\"ready\"} 2",
        "leaseq_queue_messages{queue=\"metered\",state=\"in_flight\"} 1",
        "leaseq_queue_events_total{queue=\"metered\",event=\"received\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line} in\n{text}");
    }
    server.stop().await;
}
