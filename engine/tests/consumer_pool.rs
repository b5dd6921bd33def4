//! The worker pool on the real clock: outcomes by handler answer, and
//! graceful shutdown.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use leaseq::consumer::{self, HandlerError, LeasePolicy, LossReason, Pool, PoolError};
use leaseq::{Engine, Queue, QueueConfig, ReceiveOptions};

fn queues(visibility: Duration) -> (Engine, Queue) {
    let engine = Engine::new();
    engine.create_queue("jobs-dlq", QueueConfig::default()).unwrap();
    let q = engine
        .create_queue(
            "jobs",
            QueueConfig {
                visibility_timeout: visibility,
                max_receives: Some(5),
                dead_letter_queue: Some("jobs-dlq".into()),
                ..QueueConfig::default()
            },
        )
        .unwrap();
    (engine, q)
}

fn wait_until(what: &str, limit: Duration, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn handler_answers_ack_retry_and_dead_letter() {
    let (engine, q) = queues(Duration::from_secs(5));
    for _ in 0..10 {
        q.send(&b"ok"[..]).unwrap();
    }
    q.send(&b"flaky"[..]).unwrap();
    q.send(&b"panics-once"[..]).unwrap();
    let permanent = q.send(&b"permanent"[..]).unwrap();
    let flaky_failures = Arc::new(AtomicU32::new(0));
    let failures = flaky_failures.clone();
    let pool = consumer::run(&q, 3, move |guard| match &guard.payload()[..] {
        b"flaky" if guard.delivery().delivery_count == 1 => {
            failures.fetch_add(1, Ordering::SeqCst);
            Err(HandlerError::retry("backend busy"))
        }
        b"panics-once" if guard.delivery().delivery_count == 1 => panic!("handler bug"),
        b"permanent" => Err(HandlerError::permanent("cannot parse")),
        _ => Ok(()),
    })
    .unwrap();
    wait_until("every message finished", Duration::from_secs(20), || pool.stats().acked == 12);
    let report = pool.shutdown(Duration::from_secs(5));
    assert!(report.clean, "{report:?}");
    assert_eq!(report.detached, 0);
    let s = report.stats;
    assert_eq!((s.acked, s.retried, s.dead_lettered, s.panicked, s.ack_refused), (12, 2, 1, 1, 0), "{s:?}");
    assert_eq!(flaky_failures.load(Ordering::SeqCst), 1);
    let stats = q.stats();
    assert_eq!(stats.ready + stats.delayed + stats.in_flight, 0, "{stats:?}");
    let dead = engine.queue("jobs-dlq").unwrap().receive(10).unwrap();
    assert_eq!(dead.iter().map(|d| d.id).collect::<Vec<_>>(), vec![permanent]);
}

#[test]
fn graceful_shutdown_finishes_work_inside_the_deadline() {
    let (_engine, q) = queues(Duration::from_secs(5));
    for _ in 0..4 {
        q.send(&b"150 ms of work"[..]).unwrap();
    }
    let started = Arc::new(AtomicU32::new(0));
    let seen = started.clone();
    let pool = Pool::builder(&q)
        .workers(2)
        .start(move |_| {
            seen.fetch_add(1, Ordering::SeqCst);
            thread::sleep(Duration::from_millis(150));
            Ok(())
        })
        .unwrap();
    wait_until("two handlers running", Duration::from_secs(10), || started.load(Ordering::SeqCst) >= 2);
    let report = pool.shutdown(Duration::from_secs(10));
    assert!(report.clean, "{report:?}");
    assert_eq!(report.released, 0);
    // Every handler that started was allowed to finish and its message acked.
    assert_eq!(report.stats.acked, u64::from(started.load(Ordering::SeqCst)));
    let stats = q.stats();
    assert_eq!(stats.in_flight, 0);
    assert_eq!(stats.acked + stats.ready, 4, "the rest stay ready for the next consumer: {stats:?}");
}

#[test]
fn graceful_shutdown_releases_unfinished_work_for_another_consumer_at_once() {
    // A long timeout: waiting it out would take 30 s.
    let (_engine, q) = queues(Duration::from_secs(30));
    let id = q.send(&b"never finishes in time"[..]).unwrap();
    let running = Arc::new(AtomicU32::new(0));
    let reasons = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (seen, told) = (running.clone(), reasons.clone());
    let pool = Pool::builder(&q)
        .workers(2)
        .policy(LeasePolicy { renew_after: 0.5, ..LeasePolicy::default() })
        .start(move |guard| {
            seen.fetch_add(1, Ordering::SeqCst);
            // Long work that watches its lease, and stops when told it is gone.
            let lost = guard.wait_lost(Duration::from_secs(60));
            told.lock().unwrap().push(lost);
            Ok(())
        })
        .unwrap();
    wait_until("the handler running", Duration::from_secs(10), || running.load(Ordering::SeqCst) == 1);
    let begun = Instant::now();
    let report = pool.shutdown(Duration::from_millis(100));
    assert!(!report.clean);
    assert_eq!(report.released, 1, "{report:?}");
    assert_eq!(report.detached, 0, "the handler noticed its lost lease and returned: {report:?}");
    assert_eq!(report.stats.ack_refused, 1, "its late ack is refused: {report:?}");
    assert_eq!(*reasons.lock().unwrap(), vec![Some(LossReason::ReleasedByKeeper)]);
    // Another consumer gets the message now, not after 30 s.
    let d = q.receive_with(1, ReceiveOptions::wait(Duration::from_secs(5))).unwrap().remove(0);
    // Delivery 2, unless an idle worker's last poll caught it and handed it straight back.
    assert_eq!((d.id, d.delivery_count), (id, 2 + report.stats.returned_unhandled as u32), "{report:?}");
    assert!(begun.elapsed() < Duration::from_secs(10), "{:?}", begun.elapsed());
    q.ack(&d.receipt).unwrap();
}

/// A shutdown deadline (or poll wait) with no practical limit is one without
/// a limit, not an `Instant` overflow.
#[test]
fn shutdown_without_a_time_limit_finishes_the_work() {
    let (_engine, q) = queues(Duration::from_secs(5));
    q.send(&b"ok"[..]).unwrap();
    let pool = Pool::builder(&q).workers(1).poll_wait(Duration::from_millis(20)).start(|_| Ok(())).unwrap();
    wait_until("the message acked", Duration::from_secs(20), || pool.stats().acked == 1);
    let report = pool.shutdown(Duration::MAX);
    assert!(report.clean, "{report:?}");
}

#[test]
fn bad_pool_settings_are_typed_errors() {
    let (_engine, q) = queues(Duration::from_secs(1));
    let handler = |_: &consumer::LeaseGuard| Ok(());
    assert_eq!(Pool::builder(&q).workers(0).start(handler).unwrap_err(), PoolError::InvalidWorkers { requested: 0 });
    assert!(matches!(
        Pool::builder(&q).policy(LeasePolicy { renew_after: 5.0, ..LeasePolicy::default() }).start(handler),
        Err(PoolError::InvalidPolicy(_))
    ));
    assert!(matches!(
        Pool::builder(&q).visibility(Duration::from_secs(100 * 3600)).start(handler),
        Err(PoolError::InvalidReceive(_))
    ));
    assert_eq!(q.stats().received, 0, "nothing was received by a pool that did not start");
}
