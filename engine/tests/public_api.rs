//! What a caller can do with `leaseq` alone: the types its API names are
//! reachable from the crate root, and the common payload forms send without
//! adapters. Each test here stopped compiling or failed before the API named
//! the type or accepted the form.

use std::time::Duration;

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
