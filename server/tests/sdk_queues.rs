//! Queue actions end to end through the official aws-sdk-sqs client, and a
//! durable server's restart.

mod common;

use std::time::Duration;

use aws_sdk_sqs::types::QueueAttributeName;
use common::{TestServer, code_of, redrive_policy, redrive_to, set_redrive_policy, visible};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_get_list_and_delete_queues() {
    let server = TestServer::start().await;
    let client = &server.client;
    let url = server.create("alpha", &[]).await;
    assert_eq!(url, server.url("alpha"));
    for name in ["beta-1", "beta-2", "beta-3"] {
        server.create(name, &[]).await;
    }
    // Creating again with the same attributes is success; different ones are not.
    assert_eq!(server.create("alpha", &[]).await, url);
    let clash = client
        .create_queue()
        .queue_name("alpha")
        .attributes(QueueAttributeName::VisibilityTimeout, "5")
        .send()
        .await
        .unwrap_err();
    assert!(clash.as_service_error().unwrap().is_queue_name_exists(), "{clash:?}");

    let got = client.get_queue_url().queue_name("beta-2").send().await.unwrap();
    assert_eq!(got.queue_url(), Some(server.url("beta-2").as_str()));
    let missing = client.get_queue_url().queue_name("gamma").send().await.unwrap_err();
    assert!(missing.as_service_error().unwrap().is_queue_does_not_exist(), "{missing:?}");

    let all = client.list_queues().send().await.unwrap();
    assert_eq!(all.queue_urls().len(), 4);
    let page = client.list_queues().queue_name_prefix("beta").max_results(2).send().await.unwrap();
    assert_eq!(page.queue_urls(), [server.url("beta-1"), server.url("beta-2")]);
    let rest = client
        .list_queues()
        .queue_name_prefix("beta")
        .max_results(2)
        .next_token(page.next_token().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(rest.queue_urls(), [server.url("beta-3")]);
    assert!(rest.next_token().is_none());

    client.delete_queue().queue_url(&url).send().await.unwrap();
    let gone = client.get_queue_attributes().queue_url(&url).send().await.unwrap_err();
    assert!(gone.as_service_error().unwrap().is_queue_does_not_exist(), "{gone:?}");
    let again = client.delete_queue().queue_url(&url).send().await.unwrap_err();
    assert!(again.as_service_error().unwrap().is_queue_does_not_exist());
    let bad_url = client.delete_queue().queue_url("not a url").send().await.unwrap_err();
    assert_eq!(code_of(&bad_url), "InvalidAddress");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_queues_and_bad_names_are_refused() {
    let server = TestServer::start().await;
    let client = &server.client;
    let fifo = client.create_queue().queue_name("jobs.fifo").send().await.unwrap_err();
    assert_eq!(code_of(&fifo), "InvalidParameterValue");
    let fifo_attr = client
        .create_queue()
        .queue_name("jobs")
        .attributes(QueueAttributeName::FifoQueue, "true")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code_of(&fifo_attr), "InvalidParameterValue");
    let bad_name = client.create_queue().queue_name("has space").send().await.unwrap_err();
    assert_eq!(code_of(&bad_name), "InvalidParameterValue");
    let too_long = client.create_queue().queue_name("q".repeat(81)).send().await.unwrap_err();
    assert_eq!(code_of(&too_long), "InvalidParameterValue");
    assert!(client.list_queues().send().await.unwrap().queue_urls().is_empty(), "nothing was created");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_attributes_are_validated_reported_and_changed() {
    let server = TestServer::start().await;
    let client = &server.client;
    let url = server.create("attrs", &[("DelaySeconds", "2"), ("MessageRetentionPeriod", "3600")]).await;
    let all =
        client.get_queue_attributes().queue_url(&url).attribute_names(QueueAttributeName::All).send().await.unwrap();
    let a = all.attributes().unwrap();
    assert_eq!(a[&QueueAttributeName::VisibilityTimeout], "30");
    assert_eq!(a[&QueueAttributeName::DelaySeconds], "2");
    assert_eq!(a[&QueueAttributeName::MessageRetentionPeriod], "3600");
    assert_eq!(a[&QueueAttributeName::MaximumMessageSize], "262144");
    assert_eq!(a[&QueueAttributeName::QueueArn], "arn:aws:sqs:us-east-1:000000000000:attrs");
    assert_eq!(a[&QueueAttributeName::ApproximateNumberOfMessages], "0");
    assert!(a[&QueueAttributeName::CreatedTimestamp].parse::<u64>().unwrap() > 1_600_000_000);
    assert!(!a.contains_key(&QueueAttributeName::RedrivePolicy));

    client
        .set_queue_attributes()
        .queue_url(&url)
        .attributes(QueueAttributeName::VisibilityTimeout, "7")
        .attributes(QueueAttributeName::ReceiveMessageWaitTimeSeconds, "1")
        .attributes(QueueAttributeName::DelaySeconds, "0")
        .send()
        .await
        .unwrap();
    let some = client
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::VisibilityTimeout)
        .attribute_names(QueueAttributeName::ReceiveMessageWaitTimeSeconds)
        .send()
        .await
        .unwrap();
    let a = some.attributes().unwrap();
    assert_eq!(a.len(), 2);
    assert_eq!(a[&QueueAttributeName::VisibilityTimeout], "7");

    // Counts come from the engine's stats.
    client.send_message().queue_url(&url).message_body("m1").send().await.unwrap();
    client.send_message().queue_url(&url).message_body("m2").send().await.unwrap();
    client.receive_message().queue_url(&url).send().await.unwrap();
    let counts =
        client.get_queue_attributes().queue_url(&url).attribute_names(QueueAttributeName::All).send().await.unwrap();
    let a = counts.attributes().unwrap();
    assert_eq!(a[&QueueAttributeName::ApproximateNumberOfMessages], "1");
    assert_eq!(a[&QueueAttributeName::ApproximateNumberOfMessagesNotVisible], "1");

    for (name, value, code) in [
        ("VisibilityTimeout", "43201", "InvalidAttributeValue"),
        ("DelaySeconds", "abc", "InvalidAttributeValue"),
        ("MaximumMessageSize", "100", "InvalidAttributeValue"),
        ("ReceiveMessageWaitTimeSeconds", "21", "InvalidAttributeValue"),
        ("RedrivePolicy", "{not json", "InvalidAttributeValue"),
        ("Policy", "{}", "InvalidAttributeName"),
    ] {
        let err = client
            .set_queue_attributes()
            .queue_url(&url)
            .attributes(QueueAttributeName::from(name), value)
            .send()
            .await
            .unwrap_err();
        assert_eq!(code_of(&err), code, "{name}={value}");
    }
    let unknown = client
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::from("Colour"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code_of(&unknown), "InvalidAttributeName");

    // A redrive policy can be set after creation (more in
    // a_redrive_policy_set_later_moves_poison_and_can_be_removed).
    server.create("attrs-dlq", &[]).await;
    set_redrive_policy(client, &url, &redrive_to("attrs-dlq", 3)).await.unwrap();
    let policy = redrive_policy(client, &url).await.expect("a policy");
    assert!(policy["deadLetterTargetArn"].as_str().unwrap().ends_with(":attrs-dlq"), "{policy}");
    let no_target = client
        .create_queue()
        .queue_name("orphan")
        .attributes(
            QueueAttributeName::RedrivePolicy,
            r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:missing","maxReceiveCount":3}"#,
        )
        .send()
        .await
        .unwrap_err();
    assert_eq!(code_of(&no_target), "InvalidAttributeValue");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redrive_policy_set_later_moves_poison_and_can_be_removed() {
    let clock = leaseq::ManualClock::new();
    let server = TestServer::on_clock(clock.clone()).await;
    let client = &server.client;
    let url = server.create("later", &[("VisibilityTimeout", "5")]).await;
    let dlq = server.create("later-dlq", &[]).await;
    client.send_message().queue_url(&url).message_body("poison").send().await.unwrap();
    let receive_count = |url: String| async move {
        let got =
            client.receive_message().queue_url(url).message_system_attribute_names("All".into()).send().await.unwrap();
        let m = got.messages().first().cloned().expect("a message");
        m.attributes().unwrap()[&aws_sdk_sqs::types::MessageSystemAttributeName::ApproximateReceiveCount].clone()
    };
    assert_eq!(receive_count(url.clone()).await, "1");
    clock.advance(Duration::from_secs(6));

    // Set while the message is failing: its next failure at the ceiling moves it.
    set_redrive_policy(client, &url, &redrive_to("later-dlq", 2)).await.unwrap();
    let set = redrive_policy(client, &url).await.expect("a policy");
    assert_eq!(set["maxReceiveCount"], 2);
    assert_eq!(set["deadLetterTargetArn"], "arn:aws:sqs:us-east-1:000000000000:later-dlq");
    let sources = client.list_dead_letter_source_queues().queue_url(&dlq).send().await.unwrap();
    assert_eq!(sources.queue_urls(), std::slice::from_ref(&url));
    assert_eq!(receive_count(url.clone()).await, "2");
    clock.advance(Duration::from_secs(6));
    assert!(client.receive_message().queue_url(&url).send().await.unwrap().messages().is_empty());
    let moved = client.receive_message().queue_url(&dlq).send().await.unwrap();
    assert_eq!(moved.messages()[0].body(), Some("poison"));

    // A cycle is refused and changes nothing.
    let cycle = set_redrive_policy(client, &dlq, &redrive_to("later", 2)).await;
    assert_eq!(cycle, Err("InvalidAttributeValue".to_string()));
    assert_eq!(redrive_policy(client, &dlq).await, None);

    // An empty policy removes it; the dead-letter queue can then go.
    let in_use = client.delete_queue().queue_url(&dlq).send().await.unwrap_err();
    assert_eq!(code_of(&in_use), "InvalidParameterValue");
    set_redrive_policy(client, &url, "").await.unwrap();
    assert_eq!(redrive_policy(client, &url).await, None);
    assert!(client.list_dead_letter_source_queues().queue_url(&dlq).send().await.unwrap().queue_urls().is_empty());
    client.delete_queue().queue_url(&dlq).send().await.unwrap();
    server.stop().await;
}

async fn tags_of(client: &aws_sdk_sqs::Client, url: &str) -> std::collections::BTreeMap<String, String> {
    let listed = client.list_queue_tags().queue_url(url).send().await.unwrap();
    listed.tags().map(|t| t.iter().map(|(k, v)| (k.clone(), v.clone())).collect()).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_tags_are_kept_changed_and_listed() {
    let server = TestServer::start().await;
    let client = &server.client;
    let created = client.create_queue().queue_name("tagged").tags("team", "payments").tags("env", "dev").send().await;
    let url = created.unwrap().queue_url().unwrap().to_string();
    let tags = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    assert_eq!(tags_of(client, &url).await, tags(&[("env", "dev"), ("team", "payments")]));
    // A key given again takes the new value; untagging an absent key is fine.
    client.tag_queue().queue_url(&url).tags("env", "prod").tags("cost-centre", "42 / ops").send().await.unwrap();
    client.untag_queue().queue_url(&url).tag_keys("team").tag_keys("never-set").send().await.unwrap();
    assert_eq!(tags_of(client, &url).await, tags(&[("cost-centre", "42 / ops"), ("env", "prod")]));

    // Bad tags are refused and change nothing.
    let before = tags_of(client, &url).await;
    let mut many = client.tag_queue().queue_url(&url);
    for i in 0..49 {
        many = many.tags(format!("k{i}"), "v");
    }
    assert_eq!(code_of(&many.send().await.unwrap_err()), "InvalidParameterValue", "51 tags in all");
    for (key, value) in [("aws:reserved", "v"), ("", "v"), ("k", "bad\u{1}"), (&"k".repeat(129)[..], "v")] {
        let refused = client.tag_queue().queue_url(&url).tags(key, value).send().await.unwrap_err();
        assert_eq!(code_of(&refused), "InvalidParameterValue", "{key:?}={value:?}");
    }
    let refused = client.create_queue().queue_name("never").tags("aws:x", "v").send().await.unwrap_err();
    assert_eq!(code_of(&refused), "InvalidParameterValue");
    assert_eq!(tags_of(client, &url).await, before);
    assert!(client.get_queue_url().queue_name("never").send().await.is_err(), "a refused create made nothing");

    // Tags are not attributes: creating the queue again with others keeps its own.
    client.create_queue().queue_name("tagged").tags("other", "x").send().await.unwrap();
    assert_eq!(tags_of(client, &url).await, before);
    let plain = server.create("untagged", &[]).await;
    assert!(client.list_queue_tags().queue_url(&plain).send().await.unwrap().tags().is_none());
    let missing = client.list_queue_tags().queue_url(server.url("nowhere")).send().await.unwrap_err();
    assert_eq!(code_of(&missing), "AWS.SimpleQueueService.NonExistentQueue");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_empties_a_queue_and_a_used_dead_letter_queue_is_kept() {
    let server = TestServer::start().await;
    let client = &server.client;
    let dlq = server.create("keep-dlq", &[]).await;
    let policy = r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:keep-dlq","maxReceiveCount":5}"#;
    let url = server.create("keep", &[("RedrivePolicy", policy)]).await;
    for i in 0..3 {
        client.send_message().queue_url(&url).message_body(format!("m{i}")).send().await.unwrap();
    }
    client.purge_queue().queue_url(&url).send().await.unwrap();
    assert!(client.receive_message().queue_url(&url).send().await.unwrap().messages().is_empty());

    let in_use = client.delete_queue().queue_url(&dlq).send().await.unwrap_err();
    assert_eq!(code_of(&in_use), "InvalidParameterValue");
    client.delete_queue().queue_url(&url).send().await.unwrap();
    client.delete_queue().queue_url(&dlq).send().await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_server_keeps_queues_attributes_and_messages_across_restarts() {
    let dir = std::env::temp_dir().join(format!("leaseq-server-durable-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    let server = TestServer::durable(dir.clone()).await;
    let url = server.create("kept", &[("DelaySeconds", "0"), ("ReceiveMessageWaitTimeSeconds", "3")]).await;
    server
        .client
        .send_message()
        .queue_url(&url)
        .message_body("survives")
        .message_attributes(
            "k",
            aws_sdk_sqs::types::MessageAttributeValue::builder().data_type("String").string_value("v").build().unwrap(),
        )
        .send()
        .await
        .unwrap();
    // A redrive policy set after both queues were created (the source first).
    server.create("kept-dlq", &[]).await;
    set_redrive_policy(&server.client, &url, &redrive_to("kept-dlq", 4)).await.unwrap();
    server.client.tag_queue().queue_url(&url).tags("kept", "yes").send().await.unwrap();
    server.stop().await;

    let server = TestServer::durable(dir.clone()).await;
    let url = server.url("kept");
    let kept = redrive_policy(&server.client, &url).await.expect("the policy survived the restart");
    assert_eq!(kept["maxReceiveCount"], 4);
    assert_eq!(tags_of(&server.client, &url).await.get("kept").map(String::as_str), Some("yes"));
    let attrs = server
        .client
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::ReceiveMessageWaitTimeSeconds)
        .send()
        .await
        .unwrap();
    assert_eq!(attrs.attributes().unwrap()[&QueueAttributeName::ReceiveMessageWaitTimeSeconds], "3");
    let got = server.client.receive_message().queue_url(&url).message_attribute_names("All").send().await.unwrap();
    let m = &got.messages()[0];
    assert_eq!(m.body(), Some("survives"));
    assert_eq!(m.message_attributes().unwrap()["k"].string_value(), Some("v"));
    server.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_retention_period_is_enforced_by_the_engine() {
    let clock = leaseq::ManualClock::new();
    let server = TestServer::on_clock(clock.clone()).await;
    let client = &server.client;
    let short = server.create("short", &[("MessageRetentionPeriod", "60")]).await;
    let default = server.create("default", &[]).await;
    for url in [&short, &default] {
        client.send_message().queue_url(url).message_body("m").send().await.unwrap();
    }
    clock.advance(Duration::from_secs(59));
    assert_eq!(visible(client, &short).await, 1);
    clock.advance(Duration::from_secs(1));
    assert_eq!(visible(client, &short).await, 0, "60 s after the send the message is gone");
    let got = client.receive_message().queue_url(&short).send().await.unwrap();
    assert!(got.messages().is_empty());

    // SQS's default is four days.
    clock.advance(Duration::from_secs(4 * 86_400 - 61));
    assert_eq!(visible(client, &default).await, 1);
    clock.advance(Duration::from_secs(1));
    assert_eq!(visible(client, &default).await, 0);

    // A change applies to the engine queue.
    client
        .set_queue_attributes()
        .queue_url(&short)
        .attributes(QueueAttributeName::MessageRetentionPeriod, "120")
        .send()
        .await
        .unwrap();
    client.send_message().queue_url(&short).message_body("m").send().await.unwrap();
    clock.advance(Duration::from_secs(100));
    assert_eq!(visible(client, &short).await, 1, "kept past the old 60 s");
    clock.advance(Duration::from_secs(20));
    assert_eq!(visible(client, &short).await, 0);

    let metrics = server.metrics().await;
    assert!(metrics.contains("leaseq_queue_events_total{queue=\"short\",event=\"retention_dropped\"} 2"), "{metrics}");
    assert!(metrics.contains("leaseq_queue_events_total{queue=\"default\",event=\"retention_dropped\"} 1"));
    server.stop().await;
}
