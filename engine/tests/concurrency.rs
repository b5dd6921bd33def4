//! Real threads: stress tests that nothing is lost or duplicated beyond what
//! expiries explain, and long polling (blocking and async) woken by sends,
//! releases and expiries. Bounds are generous: these assert behaviour, not
//! speed.

use std::collections::HashMap;
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use leaseq::{Engine, LeaseError, ManualClock, MessageId, Queue, QueueConfig, ReceiveOptions};

/// Runs producers and consumers; consumers ack everything they receive
/// (sometimes after sleeping past a short lease). Returns per-id successful
/// ack counts and the sent ids.
fn run_stress(
    queue: &Queue,
    producers: usize,
    consumers: usize,
    per_producer: usize,
    slow_every: usize,
) -> (HashMap<MessageId, u32>, Vec<MessageId>) {
    let sent = Arc::new(Mutex::new(Vec::new()));
    let acked = Arc::new(Mutex::new(HashMap::<MessageId, u32>::new()));
    let done_sending = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for p in 0..producers {
        let (queue, sent) = (queue.clone(), sent.clone());
        handles.push(thread::spawn(move || {
            let mut mine = Vec::with_capacity(per_producer);
            for i in 0..per_producer {
                let payload = Bytes::from(format!("{p}-{i}"));
                loop {
                    match queue.send(payload.clone()) {
                        Ok(id) => {
                            mine.push(id);
                            break;
                        }
                        Err(e) if e.is_queue_full() => thread::yield_now(),
                        Err(e) => panic!("send failed: {e}"),
                    }
                }
            }
            sent.lock().unwrap().extend(mine);
        }));
    }
    let total = producers * per_producer;
    let mut consumer_handles = Vec::new();
    for c in 0..consumers {
        let (queue, acked, done_sending) = (queue.clone(), acked.clone(), done_sending.clone());
        consumer_handles.push(thread::spawn(move || {
            let mut local: HashMap<MessageId, u32> = HashMap::new();
            let mut n = 0usize;
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let batch = queue.receive_with(8, ReceiveOptions::new().wait(Duration::from_millis(20))).unwrap();
                if batch.is_empty() {
                    let s = queue.stats();
                    if done_sending.load(Ordering::Acquire) && s.ready + s.delayed + s.in_flight == 0 {
                        break;
                    }
                    assert!(Instant::now() < deadline, "consumer {c} stuck: {s:?}");
                    continue;
                }
                for d in batch {
                    n += 1;
                    if slow_every > 0 && n % slow_every == 0 {
                        thread::sleep(Duration::from_millis(3)); // outlive a short lease
                    }
                    match queue.ack(&d.receipt) {
                        Ok(()) => *local.entry(d.id).or_default() += 1,
                        Err(LeaseError::Stale) => {} // redelivered meanwhile: the other attempt acks
                        Err(e) => panic!("ack failed: {e}"),
                    }
                }
            }
            let mut all = acked.lock().unwrap();
            for (id, k) in local {
                *all.entry(id).or_default() += k;
            }
        }));
    }
    for h in handles {
        h.join().unwrap();
    }
    done_sending.store(true, Ordering::Release);
    for h in consumer_handles {
        h.join().unwrap();
    }
    let sent = Arc::try_unwrap(sent).unwrap().into_inner().unwrap();
    assert_eq!(sent.len(), total);
    (Arc::try_unwrap(acked).unwrap().into_inner().unwrap(), sent)
}

#[test]
fn stress_every_message_acked_exactly_once_without_expiry() {
    let engine = Engine::new();
    let queue = engine.create_queue("stress", QueueConfig::default().shards(2).max_messages(4096)).unwrap();
    let (acked, sent) = run_stress(&queue, 2, 2, 20_000, 0);
    assert_eq!(acked.len(), sent.len(), "every sent id acked");
    assert!(acked.values().all(|&k| k == 1), "no id acked twice");
    let s = queue.stats();
    assert_eq!((s.sent, s.received, s.acked, s.redelivered), (40_000, 40_000, 40_000, 0), "{s:?}");
    assert_eq!((s.ready, s.delayed, s.in_flight), (0, 0, 0));
}

#[test]
fn stress_short_leases_duplicate_deliveries_but_each_message_completes_once() {
    let engine = Engine::builder().tick(Duration::from_micros(200)).build();
    let queue = engine
        .create_queue(
            "stress",
            QueueConfig::default().shards(2).visibility_timeout(Duration::from_millis(1)).max_messages(1024),
        )
        .unwrap();
    let (acked, sent) = run_stress(&queue, 2, 2, 3_000, 50);
    assert_eq!(acked.len(), sent.len(), "every sent id acked");
    assert!(acked.values().all(|&k| k == 1), "an id completed twice");
    let s = queue.stats();
    assert_eq!(s.acked, 6_000);
    assert_eq!(s.received, s.acked + s.stale_acks, "every delivery ended in one ack or one stale refusal: {s:?}");
    assert!(s.redelivered >= s.stale_acks, "{s:?}");
    assert!(s.expired > 0, "the slow consumers outlived some leases: {s:?}");
    assert_eq!((s.ready, s.delayed, s.in_flight), (0, 0, 0));
}

#[test]
fn stress_manual_clock_advanced_concurrently() {
    let clock = ManualClock::new();
    let engine = Engine::builder().clock(clock.clone()).build();
    let queue = engine
        .create_queue("m", QueueConfig::default().shards(2).visibility_timeout(Duration::from_millis(5)))
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let ticker = {
        let (clock, stop) = (clock.clone(), stop.clone());
        thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                clock.advance(Duration::from_millis(1));
                thread::yield_now();
            }
        })
    };
    let (acked, sent) = run_stress(&queue, 1, 2, 5_000, 0);
    stop.store(true, Ordering::Release);
    ticker.join().unwrap();
    assert_eq!(acked.len(), sent.len());
    assert!(acked.values().all(|&k| k == 1));
    let s = queue.stats();
    assert_eq!(s.acked, 5_000);
    assert_eq!((s.ready, s.in_flight), (0, 0));
}

#[test]
fn blocking_receive_is_woken_by_a_send() {
    let engine = Engine::new();
    let queue = engine.create_queue("poll", QueueConfig::default()).unwrap();
    let receiver = {
        let queue = queue.clone();
        thread::spawn(move || {
            let started = Instant::now();
            let got = queue.receive_with(1, ReceiveOptions::new().wait(Duration::from_secs(30))).unwrap();
            (got, started.elapsed())
        })
    };
    thread::sleep(Duration::from_millis(50));
    queue.send(&b"wake"[..]).unwrap();
    let (got, waited) = receiver.join().unwrap();
    assert_eq!(got.len(), 1);
    assert!(waited < Duration::from_secs(10), "woken by the send, not the timeout: {waited:?}");
}

#[test]
fn blocking_receive_is_woken_by_an_expiry_and_times_out_empty() {
    let engine = Engine::new();
    let queue =
        engine.create_queue("poll", QueueConfig::default().visibility_timeout(Duration::from_millis(30))).unwrap();
    let started = Instant::now();
    let empty = queue.receive_with(1, ReceiveOptions::new().wait(Duration::from_millis(40))).unwrap();
    assert!(empty.is_empty());
    assert!(started.elapsed() >= Duration::from_millis(40), "waited the full time");

    queue.send(&b"x"[..]).unwrap();
    let first = queue.receive(1).unwrap();
    assert_eq!(first.len(), 1);
    let started = Instant::now();
    let again = queue.receive_with(1, ReceiveOptions::new().wait(Duration::from_secs(30))).unwrap();
    assert_eq!(again.len(), 1, "the expiry made it ready and woke us");
    assert_eq!(again[0].delivery_count, 2);
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(25) && waited < Duration::from_secs(10), "{waited:?}");
}

#[test]
fn blocking_receive_on_a_manual_clock_waits_in_virtual_time() {
    let clock = ManualClock::new();
    let engine = Engine::builder().clock(clock.clone()).build();
    let queue = engine.create_queue("v", QueueConfig::default()).unwrap();
    queue.send(&b"x"[..]).unwrap();
    let held = queue.receive(1).unwrap().remove(0);
    let receiver = {
        let queue = queue.clone();
        thread::spawn(move || queue.receive_with(1, ReceiveOptions::new().wait(Duration::from_secs(60))).unwrap())
    };
    thread::sleep(Duration::from_millis(50));
    assert!(!receiver.is_finished(), "nothing can happen until virtual time moves");
    clock.advance(Duration::from_secs(30)); // the lease expires: the waiter is woken and gets it
    let got = receiver.join().unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].id, held.id);

    let receiver = {
        let queue = queue.clone();
        thread::spawn(move || queue.receive_with(1, ReceiveOptions::new().wait(Duration::from_secs(10))).unwrap())
    };
    thread::sleep(Duration::from_millis(20));
    clock.advance(Duration::from_secs(11));
    assert!(receiver.join().unwrap().is_empty(), "the virtual wait ran out");
}

struct ThreadWaker(thread::Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// A minimal executor: polls on this thread, parks between wake-ups.
fn block_on<F: Future>(future: F) -> F::Output {
    let waker = Waker::from(Arc::new(ThreadWaker(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        thread::park();
    }
}

#[test]
fn async_receive_is_woken_by_a_send_and_by_its_timeout() {
    let engine = Engine::new();
    let queue = engine.create_queue("async", QueueConfig::default()).unwrap();
    let sender = {
        let queue = queue.clone();
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(50));
            queue.send(&b"hello"[..]).unwrap();
        })
    };
    let started = Instant::now();
    let got = block_on(queue.receive_async(1, ReceiveOptions::new().wait(Duration::from_secs(30)))).unwrap();
    sender.join().unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(&got[0].payload[..], b"hello");
    assert!(started.elapsed() < Duration::from_secs(10));

    let started = Instant::now();
    let none = block_on(queue.receive_async(1, ReceiveOptions::new().wait(Duration::from_millis(30)))).unwrap();
    assert!(none.is_empty());
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(30) && waited < Duration::from_secs(10), "{waited:?}");
    let bad = block_on(queue.receive_async(0, ReceiveOptions::default()));
    assert!(bad.is_err());
}

/// An async receive's timeout runs out on time even when the driver is in a
/// long idle sleep (a 10 ms tick makes it a whole second): registering the
/// waiter tells the driver about the earlier deadline.
#[test]
fn async_timeout_wakes_an_idle_driver() {
    let engine = Engine::builder().tick(Duration::from_millis(10)).build();
    let queue = engine.create_queue("idle", QueueConfig::default()).unwrap();
    thread::sleep(Duration::from_millis(100));
    let started = Instant::now();
    let none = block_on(queue.receive_async(1, ReceiveOptions::new().wait(Duration::from_millis(50)))).unwrap();
    let waited = started.elapsed();
    assert!(none.is_empty());
    assert!(waited >= Duration::from_millis(50) && waited < Duration::from_millis(500), "{waited:?}");
}

#[test]
fn a_release_wakes_a_long_poller() {
    let engine = Engine::new();
    let queue = engine.create_queue("rel", QueueConfig::default()).unwrap();
    queue.send(&b"x"[..]).unwrap();
    let d = queue.receive(1).unwrap().remove(0);
    let receiver = {
        let queue = queue.clone();
        thread::spawn(move || queue.receive_with(1, ReceiveOptions::new().wait(Duration::from_secs(30))).unwrap())
    };
    thread::sleep(Duration::from_millis(50));
    let started = Instant::now();
    queue.release(&d.receipt, Duration::ZERO).unwrap();
    let got = receiver.join().unwrap();
    assert_eq!(got.len(), 1);
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn a_long_poll_on_a_queue_deleted_under_it_returns_queue_deleted() {
    let engine = Engine::new();
    let queue = engine.create_queue("doomed", QueueConfig::default()).unwrap();
    let receiver = {
        let queue = queue.clone();
        thread::spawn(move || queue.receive_with(1, ReceiveOptions::new().wait(Duration::from_secs(30))))
    };
    thread::sleep(Duration::from_millis(50));
    let started = Instant::now();
    engine.delete_queue("doomed").unwrap();
    let result = receiver.join().unwrap();
    assert_eq!(result.unwrap_err(), leaseq::Error::QueueDeleted { name: "doomed".into() });
    assert!(started.elapsed() < Duration::from_secs(10), "woken by the deletion, not the timeout");
}
