//! What a caller can do with `leaseq` alone: the types its API names are
//! reachable from the crate root, and the common payload forms send without
//! adapters. Each test here stopped compiling or failed before the API named
//! the type or accepted the form.

use std::time::{Duration, Instant};

use leaseq::{Bytes, Engine, Histogram, ManualClock, Queue, QueueConfig, ReceiveOptions};

fn queue() -> (Engine, Queue) {
    let engine = Engine::builder().clock(ManualClock::new()).build();
    let queue = engine.create_queue("jobs", QueueConfig::default()).unwrap();
    (engine, queue)
}

fn bodies(queue: &Queue, n: usize) -> Vec<Bytes> {
    queue.receive(n).unwrap().into_iter().map(|d| d.payload).collect()
}

#[test]
fn send_takes_literals_borrowed_slices_owned_buffers_and_bytes() {
    let (_engine, q) = queue();
    let scratch = vec![1u8, 2, 3, 4];
    let text = String::from("owned text");
    q.send(b"array").unwrap();
    q.send(&scratch[1..3]).unwrap();
    q.send("str").unwrap();
    q.send(&text).unwrap();
    q.send(text.clone()).unwrap();
    q.send(scratch.clone()).unwrap();
    q.send(Bytes::from_static(b"bytes")).unwrap();
    q.send_with(b"later", Duration::ZERO).unwrap();
    let expected: Vec<&[u8]> =
        vec![b"array", &[2, 3], b"str", b"owned text", b"owned text", &[1, 2, 3, 4], b"bytes", b"later"];
    assert_eq!(bodies(&q, 16), expected);
}

#[test]
fn send_batch_takes_borrowed_slices() {
    let (_engine, q) = queue();
    let rows: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i; 2]).collect();
    let sent = q.send_batch(rows.iter().map(Vec::as_slice));
    assert!(sent.iter().all(Result::is_ok));
    assert_eq!(bodies(&q, 3), vec![vec![0u8, 0], vec![1, 1], vec![2, 2]]);
}

#[test]
fn a_bytes_payload_reaches_the_consumer_without_a_copy() {
    let (_engine, q) = queue();
    let body = Bytes::from(vec![9u8; 256]);
    q.send(&body).unwrap();
    assert_eq!(bodies(&q, 1)[0].as_ptr(), body.as_ptr());
}

#[test]
fn stats_histograms_are_named_by_the_crate() {
    let (_engine, q) = queue();
    q.send(b"m").unwrap();
    let d = q.receive(1).unwrap().remove(0);
    q.ack(&d.receipt).unwrap();
    let stats = q.stats();
    let processing: &Histogram<u64> = &stats.processing_time;
    assert_eq!(processing.len(), 1);
}

#[test]
fn receive_options_chain_and_keep_each_setting() {
    let (_engine, q) = queue();
    q.send(b"m").unwrap();
    let options = ReceiveOptions::new().visibility(Duration::from_secs(5)).wait(Duration::from_secs(1));
    let d = q.receive_with(1, options).unwrap().remove(0);
    assert_eq!(d.deadline, q.now().saturating_add(Duration::from_secs(5)));
    assert_eq!(
        options,
        ReceiveOptions { visibility: Some(Duration::from_secs(5)), wait: Some(Duration::from_secs(1)) }
    );
}

#[test]
fn a_deadline_converts_to_an_instant_on_a_system_clock() {
    let engine = Engine::new();
    let q = engine.create_queue("jobs", QueueConfig::default()).unwrap();
    q.send(b"m").unwrap();
    let lease = Duration::from_secs(30);
    let before = Instant::now();
    let d = q.receive_with(1, ReceiveOptions::new().visibility(lease)).unwrap().remove(0);
    let after = Instant::now();
    let deadline = q.instant_of(d.deadline).expect("a system clock is real time");
    // Slack for the two clock reads each side and the counter's calibration.
    let slack = Duration::from_millis(100);
    assert!(deadline + slack >= before + lease && deadline <= after + lease + slack, "{:?}", deadline - before);
    assert_eq!(engine.instant_of(d.deadline).map(|i| i > before + lease - slack), Some(true));
    let left = q.time_until(d.deadline);
    assert!(left <= lease && left + slack >= lease, "{left:?}");
    // A time already passed maps before now.
    assert!(q.instant_of(leaseq::Nanos(0)).is_some_and(|i| i <= Instant::now()));
}

#[test]
fn a_manual_clock_deadline_has_time_left_but_no_instant() {
    let clock = ManualClock::new();
    let engine = Engine::builder().clock(clock.clone()).build();
    let q = engine.create_queue("jobs", QueueConfig::default()).unwrap();
    q.send(b"m").unwrap();
    let d = q.receive_with(1, ReceiveOptions::new().visibility(Duration::from_secs(30))).unwrap().remove(0);
    assert_eq!(q.instant_of(d.deadline), None);
    clock.advance(Duration::from_secs(10));
    assert_eq!(q.time_until(d.deadline), Duration::from_secs(20));
    assert_eq!(d.lease_left(q.now()), Duration::from_secs(20));
    clock.advance(Duration::from_secs(25));
    assert_eq!(q.time_until(d.deadline), Duration::ZERO);
}

#[test]
fn a_guard_reports_its_lease_left_after_each_renewal() {
    use leaseq::consumer::{LeaseKeeper, LeasePolicy};
    let clock = ManualClock::new();
    let engine = Engine::builder().clock(clock.clone()).build();
    let config = QueueConfig::default().visibility_timeout(Duration::from_secs(10));
    let q = engine.create_queue("jobs", config).unwrap();
    q.send(b"m").unwrap();
    let keeper = LeaseKeeper::manual(LeasePolicy::default()).unwrap();
    let guard = keeper.keep(&q, q.receive(1).unwrap().remove(0)).unwrap();
    assert_eq!((guard.lease_left(), guard.deadline_instant()), (Duration::from_secs(10), None));
    clock.advance(Duration::from_secs(6)); // past half the grant: renewal due
    keeper.tick(q.now());
    assert_eq!(guard.lease_left(), Duration::from_secs(10), "renewed for another grant from now");
    guard.ack().unwrap();
}

#[test]
fn stats_print_every_counter_and_distribution() {
    let clock = ManualClock::new();
    let engine = Engine::builder().clock(clock.clone()).build();
    let q = engine.create_queue("jobs", QueueConfig::default().visibility_timeout(Duration::from_secs(10))).unwrap();
    for i in 0..7u32 {
        q.send(i.to_le_bytes()).unwrap();
    }
    let first = q.receive(3).unwrap();
    clock.advance(Duration::from_millis(40));
    q.ack(&first[0].receipt).unwrap();
    q.release(&first[1].receipt, Duration::ZERO).unwrap();
    q.extend(&first[2].receipt, Duration::from_secs(5)).unwrap();
    let stats = q.stats();

    let pretty = format!("{stats:#?}");
    assert!(!pretty.contains(".."), "nothing hidden: {pretty}");
    for field in ["sent: 7", "received: 3", "acked: 1", "released: 1", "extensions: 1", "ready: 5", "in_flight: 1"] {
        assert!(pretty.contains(field), "{field} missing from {pretty}");
    }
    assert!(pretty.contains("processing_time: 1 samples, p50 4"), "{pretty}");

    let text = stats.to_string();
    println!("{text}");
    for line in [
        "ready 5, delayed 0, in flight 1",
        "sent 7, received 3 (0 redelivered), acked 1 (0 late)",
        "leases: 0 expired, 1 released, 1 extended (0 refused); visibility timeout 10s",
        "processing time (receive to ack): 1 samples",
        "time in queue (send to first receive): 3 samples",
    ] {
        assert!(text.contains(line), "{line:?} missing from:\n{text}");
    }
}
