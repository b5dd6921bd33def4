//! Message actions end to end through the official aws-sdk-sqs client:
//! send and receive with attributes and digests, the lease (visibility)
//! cases, dead-lettering, long polling and the batch actions.

mod common;

use std::time::{Duration, Instant};

use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, DeleteMessageBatchRequestEntry, MessageAttributeValue,
    MessageSystemAttributeName, QueueAttributeName, SendMessageBatchRequestEntry,
};
use common::{TestServer, code_of, redrive_policy, visible};
use md5::{Digest, Md5};

fn hex_md5(bytes: &[u8]) -> String {
    Md5::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

fn string_attribute(data_type: &str, value: &str) -> MessageAttributeValue {
    MessageAttributeValue::builder().data_type(data_type).string_value(value).build().unwrap()
}

/// The SQS attribute digest, computed here independently of the server.
fn attributes_digest(attributes: &[(&str, &str, &[u8], u8)]) -> String {
    let mut sorted = attributes.to_vec();
    sorted.sort_by_key(|a| a.0);
    let mut bytes = Vec::new();
    for (name, data_type, value, transport) in sorted {
        for field in [name.as_bytes(), data_type.as_bytes()] {
            bytes.extend((field.len() as u32).to_be_bytes());
            bytes.extend(field);
        }
        bytes.push(transport);
        bytes.extend((value.len() as u32).to_be_bytes());
        bytes.extend(value);
    }
    hex_md5(&bytes)
}

/// The X-Ray header that SDKs with tracing on send as a system attribute is
/// kept with the message and returned when asked for, with SQS's digest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trace_header_system_attribute_is_kept_and_returned() {
    use aws_sdk_sqs::types::{MessageSystemAttributeNameForSends, MessageSystemAttributeValue};
    let server = TestServer::start().await;
    let client = &server.client;
    let url = server.create("traced", &[]).await;
    let trace = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
    let header = MessageSystemAttributeValue::builder().data_type("String").string_value(trace).build().unwrap();
    let sent = client
        .send_message()
        .queue_url(&url)
        .message_body("traced")
        .message_system_attributes(MessageSystemAttributeNameForSends::AwsTraceHeader, header.clone())
        .send()
        .await
        .unwrap();
    let digest = attributes_digest(&[("AWSTraceHeader", "String", trace.as_bytes(), 1)]);
    assert_eq!(sent.md5_of_message_system_attributes(), Some(digest.as_str()));
    assert_eq!(sent.md5_of_message_attributes(), None);
    let got = client
        .receive_message()
        .queue_url(&url)
        .message_system_attribute_names(MessageSystemAttributeName::AwsTraceHeader)
        .send()
        .await
        .unwrap();
    let system = got.messages()[0].attributes().unwrap();
    assert_eq!(system[&MessageSystemAttributeName::AwsTraceHeader], trace);
    assert_eq!(system.len(), 1, "only what was asked for: {system:?}");

    // Any other system attribute, or another type, is refused.
    let number = MessageSystemAttributeValue::builder().data_type("Number").string_value("1").build().unwrap();
    let refused = client
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .message_system_attributes(MessageSystemAttributeNameForSends::AwsTraceHeader, number)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code_of(&refused), "InvalidParameterValue");
    let other = client
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .message_system_attributes(MessageSystemAttributeNameForSends::from("SenderId"), header)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code_of(&other), "InvalidParameterValue");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_and_receive_carry_body_attributes_and_digests() {
    let server = TestServer::start().await;
    let url = server.create("orders", &[]).await;
    let client = &server.client;
    let before = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let sent = client
        .send_message()
        .queue_url(&url)
        .message_body("order #1 ✓")
        .message_attributes("kind", string_attribute("String", "book"))
        .message_attributes("qty", string_attribute("Number", "3"))
        .message_attributes(
            "blob",
            MessageAttributeValue::builder()
                .data_type("Binary")
                .binary_value(Blob::new(vec![0, 1, 2]))
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let expected_attrs = attributes_digest(&[
        ("kind", "String", b"book", 1),
        ("qty", "Number", b"3", 1),
        ("blob", "Binary", &[0, 1, 2], 2),
    ]);
    assert_eq!(sent.md5_of_message_body(), Some(hex_md5("order #1 ✓".as_bytes()).as_str()));
    assert_eq!(sent.md5_of_message_attributes(), Some(expected_attrs.as_str()));

    let received = client
        .receive_message()
        .queue_url(&url)
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .message_attribute_names("All")
        .send()
        .await
        .unwrap();
    let messages = received.messages();
    assert_eq!(messages.len(), 1);
    let m = &messages[0];
    assert_eq!(m.body(), Some("order #1 ✓"));
    assert_eq!(m.message_id(), sent.message_id());
    assert_eq!(m.md5_of_body(), sent.md5_of_message_body());
    assert_eq!(m.md5_of_message_attributes(), Some(expected_attrs.as_str()));
    let attrs = m.message_attributes().unwrap();
    assert_eq!(attrs["kind"].string_value(), Some("book"));
    assert_eq!(attrs["qty"].data_type(), "Number");
    assert_eq!(attrs["blob"].binary_value().unwrap().as_ref(), &[0, 1, 2]);
    let system = m.attributes().unwrap();
    assert_eq!(system[&MessageSystemAttributeName::ApproximateReceiveCount], "1");
    let sent_at: u64 = system[&MessageSystemAttributeName::SentTimestamp].parse().unwrap();
    let first: u64 = system[&MessageSystemAttributeName::ApproximateFirstReceiveTimestamp].parse().unwrap();
    assert!(sent_at >= before && first >= sent_at, "{before} {sent_at} {first}");

    // A filter returns only the named attributes, with a digest over those.
    client
        .send_message()
        .queue_url(&url)
        .message_body("b")
        .message_attributes("kind", string_attribute("String", "x"))
        .message_attributes("other", string_attribute("String", "y"))
        .send()
        .await
        .unwrap();
    let filtered = client.receive_message().queue_url(&url).message_attribute_names("kind").send().await.unwrap();
    let m = &filtered.messages()[0];
    assert_eq!(m.message_attributes().unwrap().len(), 1);
    assert_eq!(m.md5_of_message_attributes(), Some(attributes_digest(&[("kind", "String", b"x", 1)]).as_str()));
    assert!(m.attributes().is_none(), "no system attributes unless asked");

    client.delete_message().queue_url(&url).receipt_handle(m.receipt_handle().unwrap()).send().await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unacknowledged_message_is_redelivered_and_the_old_handle_is_refused() {
    let server = TestServer::start().await;
    let url = server.create("crashy", &[("VisibilityTimeout", "1")]).await;
    let client = &server.client;
    client.send_message().queue_url(&url).message_body("work").send().await.unwrap();

    let first = client.receive_message().queue_url(&url).send().await.unwrap();
    let first = first.messages()[0].clone();
    // The consumer "crashes": no delete. The lease runs out after 1 s.
    let second = client
        .receive_message()
        .queue_url(&url)
        .wait_time_seconds(10)
        .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
        .send()
        .await
        .unwrap();
    let second = second.messages()[0].clone();
    assert_eq!(second.message_id(), first.message_id());
    assert_eq!(second.attributes().unwrap()[&MessageSystemAttributeName::ApproximateReceiveCount], "2");
    assert_ne!(second.receipt_handle(), first.receipt_handle());

    let stale = client
        .delete_message()
        .queue_url(&url)
        .receipt_handle(first.receipt_handle().unwrap())
        .send()
        .await
        .unwrap_err();
    assert!(stale.as_service_error().unwrap().is_receipt_handle_is_invalid(), "{stale:?}");
    client.delete_message().queue_url(&url).receipt_handle(second.receipt_handle().unwrap()).send().await.unwrap();

    let garbage = client.delete_message().queue_url(&url).receipt_handle("not-a-handle").send().await.unwrap_err();
    assert_eq!(code_of(&garbage), "ReceiptHandleIsInvalid");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_visibility_extends_a_lease_and_zero_makes_it_visible() {
    let server = TestServer::start().await;
    let url = server.create("slow", &[("VisibilityTimeout", "1")]).await;
    let client = &server.client;
    client.send_message().queue_url(&url).message_body("long job").send().await.unwrap();
    let got = client.receive_message().queue_url(&url).send().await.unwrap();
    let handle = got.messages()[0].receipt_handle().unwrap().to_string();
    client
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(&handle)
        .visibility_timeout(4)
        .send()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2000)).await;
    // Past the original 1 s lease, still hidden.
    let none = client.receive_message().queue_url(&url).send().await.unwrap();
    assert!(none.messages().is_empty());
    // Zero: visible again at once, counted as a receive.
    client
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(&handle)
        .visibility_timeout(0)
        .send()
        .await
        .unwrap();
    let again = client.receive_message().queue_url(&url).wait_time_seconds(5).send().await.unwrap();
    assert_eq!(again.messages().len(), 1);
    let bad = client
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(&handle)
        .visibility_timeout(43_201)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code_of(&bad), "InvalidParameterValue");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_message_moves_to_the_dead_letter_queue() {
    let server = TestServer::start().await;
    let client = &server.client;
    let dlq = server.create("poison-dlq", &[]).await;
    let policy = r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:poison-dlq","maxReceiveCount":"2"}"#;
    let url = server.create("poison", &[("VisibilityTimeout", "1"), ("RedrivePolicy", policy)]).await;
    client.send_message().queue_url(&url).message_body("bad input").send().await.unwrap();
    for _ in 0..2 {
        let got = client.receive_message().queue_url(&url).wait_time_seconds(10).send().await.unwrap();
        assert_eq!(got.messages().len(), 1);
    }
    // Received twice, never deleted: after the second lease it is dead-lettered.
    let dead = client.receive_message().queue_url(&dlq).wait_time_seconds(10).send().await.unwrap();
    assert_eq!(dead.messages()[0].body(), Some("bad input"));
    let source = client.receive_message().queue_url(&url).send().await.unwrap();
    assert!(source.messages().is_empty());

    let sources = client.list_dead_letter_source_queues().queue_url(&dlq).send().await.unwrap();
    assert_eq!(sources.queue_urls(), std::slice::from_ref(&url));
    let reported = redrive_policy(client, &url).await.expect("a policy");
    assert_eq!(reported["maxReceiveCount"], 2);
    assert_eq!(reported["deadLetterTargetArn"], "arn:aws:sqs:us-east-1:000000000000:poison-dlq");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_is_woken_by_a_send_and_an_empty_one_times_out() {
    let server = TestServer::start().await;
    let url = server.create("waiting", &[]).await;
    let client = server.client.clone();
    let poll_url = url.clone();
    let started = Instant::now();
    let poll =
        tokio::spawn(async move { client.receive_message().queue_url(&poll_url).wait_time_seconds(20).send().await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.client.send_message().queue_url(&url).message_body("wake up").send().await.unwrap();
    let got =
        tokio::time::timeout(Duration::from_secs(10), poll).await.expect("woken well before 20 s").unwrap().unwrap();
    assert_eq!(got.messages()[0].body(), Some("wake up"));
    assert!(started.elapsed() < Duration::from_secs(10));

    let started = Instant::now();
    let empty = server.client.receive_message().queue_url(&url).wait_time_seconds(1).send().await.unwrap();
    assert!(empty.messages().is_empty());
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(900) && waited < Duration::from_secs(8), "{waited:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_open_long_polls() {
    let server = TestServer::start().await;
    let url = server.create("draining", &[]).await;
    let client = server.client.clone();
    let poll = tokio::spawn(async move { client.receive_message().queue_url(&url).wait_time_seconds(20).send().await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    server.stop().await;
    assert!(started.elapsed() < Duration::from_secs(10), "shutdown did not wait out the 20 s poll");
    let answered = tokio::time::timeout(Duration::from_secs(10), poll).await.unwrap().unwrap().unwrap();
    assert!(answered.messages().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_report_each_entry() {
    let server = TestServer::start().await;
    let url = server.create("batch", &[("VisibilityTimeout", "30")]).await;
    let client = &server.client;
    let entry =
        |id: &str, body: &str| SendMessageBatchRequestEntry::builder().id(id).message_body(body).build().unwrap();
    let sent = client
        .send_message_batch()
        .queue_url(&url)
        .entries(entry("a", "one"))
        .entries(entry("b", "bad \u{1} body"))
        .entries(
            SendMessageBatchRequestEntry::builder().id("c").message_body("three").delay_seconds(901).build().unwrap(),
        )
        // Sent on its own (delayed), between entries sent as one engine batch.
        .entries(
            SendMessageBatchRequestEntry::builder().id("e").message_body("later").delay_seconds(900).build().unwrap(),
        )
        .entries(entry("d", "four"))
        .send()
        .await
        .unwrap();
    let ok: Vec<&str> = sent.successful().iter().map(|s| s.id()).collect();
    assert_eq!(ok, ["a", "e", "d"]);
    assert_eq!(sent.successful()[2].md5_of_message_body(), hex_md5(b"four"));
    assert_eq!(sent.successful()[0].md5_of_message_body(), hex_md5(b"one"));
    let failed: Vec<(&str, &str, bool)> = sent.failed().iter().map(|f| (f.id(), f.code(), f.sender_fault())).collect();
    assert_eq!(failed, [("b", "InvalidMessageContents", true), ("c", "InvalidParameterValue", true)]);

    let got =
        client.receive_message().queue_url(&url).max_number_of_messages(10).wait_time_seconds(2).send().await.unwrap();
    let mut handles: Vec<String> = got.messages().iter().map(|m| m.receipt_handle().unwrap().to_string()).collect();
    // Another poll picks up the rest if the first returned early.
    if handles.len() < 2 {
        let more = client
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .wait_time_seconds(2)
            .send()
            .await
            .unwrap();
        handles.extend(more.messages().iter().map(|m| m.receipt_handle().unwrap().to_string()));
    }
    assert_eq!(handles.len(), 2);

    let changed = client
        .change_message_visibility_batch()
        .queue_url(&url)
        .entries(
            ChangeMessageVisibilityBatchRequestEntry::builder()
                .id("x")
                .receipt_handle(&handles[0])
                .visibility_timeout(60)
                .build()
                .unwrap(),
        )
        .entries(
            ChangeMessageVisibilityBatchRequestEntry::builder()
                .id("y")
                .receipt_handle("forged")
                .visibility_timeout(60)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(changed.successful().len(), 1);
    assert_eq!(changed.failed()[0].code(), "ReceiptHandleIsInvalid");

    let delete = |id: &str, handle: &str| {
        DeleteMessageBatchRequestEntry::builder().id(id).receipt_handle(handle).build().unwrap()
    };
    let deleted = client
        .delete_message_batch()
        .queue_url(&url)
        .entries(delete("1", &handles[0]))
        .entries(delete("3", "lq1.0.0.0.0.0.0"))
        .entries(delete("2", &handles[1]))
        .send()
        .await
        .unwrap();
    let ok: Vec<&str> = deleted.successful().iter().map(|s| s.id()).collect();
    assert_eq!(ok, ["1", "2"]);
    assert_eq!(deleted.failed()[0].id(), "3");

    // Whole-request rules.
    let mut eleven = client.send_message_batch().queue_url(&url);
    for i in 0..11 {
        eleven = eleven.entries(entry(&format!("e{i}"), "x"));
    }
    let err = eleven.send().await.unwrap_err();
    assert!(err.as_service_error().unwrap().is_too_many_entries_in_batch_request(), "{err:?}");
    let err = client
        .send_message_batch()
        .queue_url(&url)
        .entries(entry("same", "x"))
        .entries(entry("same", "y"))
        .send()
        .await
        .unwrap_err();
    assert!(err.as_service_error().unwrap().is_batch_entry_ids_not_distinct(), "{err:?}");
    let err = client.delete_message_batch().queue_url(&url).set_entries(Some(vec![])).send().await.unwrap_err();
    assert!(err.as_service_error().unwrap().is_empty_batch_request(), "{err:?}");
    let err = client.send_message_batch().queue_url(&url).entries(entry("bad id!", "x")).send().await.unwrap_err();
    assert!(err.as_service_error().unwrap().is_invalid_batch_entry_id(), "{err:?}");
    let big = "x".repeat(100_000);
    let err = client
        .send_message_batch()
        .queue_url(&url)
        .entries(entry("p", &big))
        .entries(entry("q", &big))
        .entries(entry("r", &big))
        .send()
        .await
        .unwrap_err();
    assert!(err.as_service_error().unwrap().is_batch_request_too_long(), "{err:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_message_parameters_get_sqs_errors() {
    let server = TestServer::start().await;
    let url = server.create("strict", &[("MaximumMessageSize", "1024")]).await;
    let client = &server.client;
    let too_many = client.receive_message().queue_url(&url).max_number_of_messages(11).send().await.unwrap_err();
    assert_eq!(code_of(&too_many), "InvalidParameterValue");
    let too_long = client.receive_message().queue_url(&url).wait_time_seconds(21).send().await.unwrap_err();
    assert_eq!(code_of(&too_long), "InvalidParameterValue");
    let big = client.send_message().queue_url(&url).message_body("x".repeat(1025)).send().await.unwrap_err();
    assert_eq!(code_of(&big), "InvalidParameterValue");
    let nul = client.send_message().queue_url(&url).message_body("a\u{0}b").send().await.unwrap_err();
    assert!(nul.as_service_error().unwrap().is_invalid_message_contents(), "{nul:?}");
    let delay = client.send_message().queue_url(&url).message_body("x").delay_seconds(901).send().await.unwrap_err();
    assert_eq!(code_of(&delay), "InvalidParameterValue");
    let reserved = client
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .message_attributes("AWS.thing", string_attribute("String", "v"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code_of(&reserved), "InvalidParameterValue");
    let not_number = client
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .message_attributes("n", string_attribute("Number", "twelve"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code_of(&not_number), "InvalidParameterValue");
    let missing = client.send_message().queue_url(server.url("nope")).message_body("x").send().await.unwrap_err();
    assert!(missing.as_service_error().unwrap().is_queue_does_not_exist(), "{missing:?}");

    // A delayed message is counted as delayed, then becomes receivable.
    client.send_message().queue_url(&url).message_body("later").delay_seconds(1).send().await.unwrap();
    let attrs =
        client.get_queue_attributes().queue_url(&url).attribute_names(QueueAttributeName::All).send().await.unwrap();
    assert_eq!(attrs.attributes().unwrap()[&QueueAttributeName::ApproximateNumberOfMessagesDelayed], "1");
    let got = client.receive_message().queue_url(&url).wait_time_seconds(10).send().await.unwrap();
    assert_eq!(got.messages()[0].body(), Some("later"));
    server.stop().await;
}

/// The status of the newest move task of `source_arn` once it reads
/// `wanted`, or the last one read within 5 s.
async fn newest_task_status_after(client: &aws_sdk_sqs::Client, source_arn: &str, wanted: &str) -> String {
    let mut status = String::new();
    for _ in 0..100 {
        let listed = client.list_message_move_tasks().source_arn(source_arn).send().await.unwrap();
        status = listed.results()[0].status().unwrap_or_default().to_string();
        if status == wanted {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    status
}

/// A task with MaxNumberOfMessagesPerSecond runs in the background at that
/// rate, reports RUNNING with its progress, and can be cancelled; one
/// task per source runs at a time. Rates are set so that the assertions hold
/// with seconds to spare (1 message a second for 20 messages).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_move_task_runs_at_its_rate_and_can_be_cancelled() {
    let server = TestServer::start().await;
    let client = &server.client;
    let dlq = server.create("slow-dlq", &[]).await;
    let dlq_arn = "arn:aws:sqs:us-east-1:000000000000:slow-dlq";
    let policy = format!(r#"{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":"1"}}"#);
    let url = server.create("slow", &[("RedrivePolicy", &policy)]).await;
    for i in 0..20 {
        client.send_message().queue_url(&dlq).message_body(format!("d{i}")).send().await.unwrap();
    }
    let task = client.start_message_move_task().source_arn(dlq_arn).max_number_of_messages_per_second(1).send().await;
    let handle = task.unwrap().task_handle().unwrap().to_string();
    let listed = client.list_message_move_tasks().source_arn(dlq_arn).send().await.unwrap();
    let running = &listed.results()[0];
    assert_eq!(running.status(), Some("RUNNING"), "{running:?}");
    assert_eq!(running.approximate_number_of_messages_to_move(), Some(20));
    assert_eq!(running.max_number_of_messages_per_second(), Some(1));
    let second = client.start_message_move_task().source_arn(dlq_arn).send().await.unwrap_err();
    assert_eq!(code_of(&second), "InvalidParameterValue", "one running task per source");

    let cancelled = client.cancel_message_move_task().task_handle(&handle).send().await.unwrap();
    let moved_at_cancel = cancelled.approximate_number_of_messages_moved() as u64;
    assert!(moved_at_cancel < 20, "{moved_at_cancel} moved at 1 a second");
    assert_eq!(newest_task_status_after(client, dlq_arn, "CANCELLED").await, "CANCELLED");
    let listed = client.list_message_move_tasks().source_arn(dlq_arn).send().await.unwrap();
    let moved = listed.results()[0].approximate_number_of_messages_moved() as u64;
    assert!(moved >= moved_at_cancel.max(1) && moved < 20, "{moved}");
    assert_eq!(
        (visible(client, &url).await, visible(client, &dlq).await),
        (moved, 20 - moved),
        "nothing lost or doubled"
    );
    let again = client.cancel_message_move_task().task_handle(&handle).send().await.unwrap_err();
    assert_eq!(code_of(&again), "AWS.SimpleQueueService.UnsupportedOperation");

    // A fast rate moves the rest and completes.
    client.start_message_move_task().source_arn(dlq_arn).max_number_of_messages_per_second(500).send().await.unwrap();
    assert_eq!(newest_task_status_after(client, dlq_arn, "COMPLETED").await, "COMPLETED");
    assert_eq!((visible(client, &url).await, visible(client, &dlq).await), (20, 0));
    let listed = client.list_message_move_tasks().source_arn(dlq_arn).max_results(2).send().await.unwrap();
    assert_eq!(listed.results().len(), 2, "the two tasks, newest first");
    assert_eq!(listed.results()[1].status(), Some("CANCELLED"));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_move_task_returns_dead_letters_to_their_queue() {
    let server = TestServer::start().await;
    let client = &server.client;
    let dlq = server.create("mv-dlq", &[]).await;
    let dlq_arn = "arn:aws:sqs:us-east-1:000000000000:mv-dlq";
    let policy = format!(r#"{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":"1"}}"#);
    let url = server.create("mv", &[("VisibilityTimeout", "1"), ("RedrivePolicy", &policy)]).await;
    client.send_message().queue_url(&url).message_body("retry me").send().await.unwrap();
    let first = client.receive_message().queue_url(&url).send().await.unwrap();
    assert_eq!(first.messages().len(), 1);
    // After the lease runs out the message is in the dead-letter queue.
    let mut dead = 0;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        dead = visible(client, &dlq).await;
        if dead == 1 {
            break;
        }
    }
    assert_eq!(dead, 1);

    let task = client.start_message_move_task().source_arn(dlq_arn).send().await.unwrap();
    let listed = client.list_message_move_tasks().source_arn(dlq_arn).send().await.unwrap();
    let result = &listed.results()[0];
    assert_eq!(result.status(), Some("COMPLETED"));
    assert_eq!(result.approximate_number_of_messages_moved(), 1);
    assert_eq!(result.destination_arn(), Some("arn:aws:sqs:us-east-1:000000000000:mv"));
    let back = client.receive_message().queue_url(&url).wait_time_seconds(5).send().await.unwrap();
    assert_eq!(back.messages()[0].body(), Some("retry me"));

    let cancel = client.cancel_message_move_task().task_handle(task.task_handle().unwrap()).send().await.unwrap_err();
    assert_eq!(code_of(&cancel), "AWS.SimpleQueueService.UnsupportedOperation");
    let not_dlq =
        client.start_message_move_task().source_arn("arn:aws:sqs:us-east-1:000000000000:mv").send().await.unwrap_err();
    assert_eq!(code_of(&not_dlq), "InvalidParameterValue");
    let missing = client
        .start_message_move_task()
        .source_arn("arn:aws:sqs:us-east-1:000000000000:nope")
        .send()
        .await
        .unwrap_err();
    assert!(missing.as_service_error().unwrap().is_resource_not_found_exception(), "{missing:?}");
    // A move back into the dead-letter queue itself is refused up front, and
    // no failed task is left to list.
    let onto_itself =
        client.start_message_move_task().source_arn(dlq_arn).destination_arn(dlq_arn).send().await.unwrap_err();
    assert_eq!(code_of(&onto_itself), "InvalidParameterValue");
    let listed = client.list_message_move_tasks().source_arn(dlq_arn).send().await.unwrap();
    assert_eq!(listed.results().len(), 1, "{listed:?}");
    server.stop().await;
}
