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
            QueueConfig::default().visibility_timeout(visibility).max_receives(5).dead_letter_queue("jobs-dlq"),
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
        .policy(LeasePolicy::default().renew_after(0.5))
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
    let d = q.receive_with(1, ReceiveOptions::new().wait(Duration::from_secs(5))).unwrap().remove(0);
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
fn permanent_without_a_dead_letter_queue_waits_a_lease_instead_of_spinning() {
    let engine = Engine::new();
    // No dead-letter queue and the default `Backoff::None`.
    let q = engine.create_queue("no-dlq", QueueConfig::default().visibility_timeout(Duration::from_secs(30))).unwrap();
    let id = q.send(&b"can never succeed"[..]).unwrap();
    let pool = consumer::run(&q, 2, |_| Err(HandlerError::permanent("cannot parse"))).unwrap();
    wait_until("the answer applied", Duration::from_secs(10), || pool.stats().permanent_released == 1);
    thread::sleep(Duration::from_millis(300));
    let s = pool.stats();
    // Before: released with no delay and handled again at once, hundreds of
    // thousands of times a second.
    assert_eq!((s.handled, s.permanent_released, s.retried, s.dead_lettered), (1, 1, 0, 0), "{s:?}");
    let stats = q.stats();
    assert_eq!((stats.delayed, stats.ready, stats.in_flight), (1, 0, 0), "held back, not dropped: {stats:?}");
    let report = pool.shutdown(Duration::from_secs(5));
    assert!(report.clean, "{report:?}");
    // Still on the queue: receivable once the delay (one visibility timeout) passes.
    assert!(q.receive(1).unwrap().is_empty());
    assert_eq!(q.purge().unwrap(), 1);
    let _ = id;
}

#[test]
fn per_worker_state_is_built_once_per_worker() {
    let (_engine, q) = queues(Duration::from_secs(5));
    for _ in 0..20 {
        q.send(&b"job"[..]).unwrap();
    }
    let built = Arc::new(AtomicU32::new(0));
    let count = built.clone();
    let pool = Pool::builder(&q)
        .workers(3)
        .start_with_state(
            move |worker| {
                count.fetch_add(1, Ordering::SeqCst);
                Ok::<_, std::io::Error>((worker, 0u32))
            },
            |(_, handled), _guard| {
                *handled += 1;
                Ok(())
            },
        )
        .unwrap();
    assert!(pool.wait_drained(Duration::from_secs(20)), "{:?}", q.stats());
    assert_eq!(pool.stats().acked, 20, "the counters are final once drained: {:?}", pool.stats());
    let report = pool.shutdown(Duration::from_secs(5));
    assert!(report.clean);
    assert_eq!(built.load(Ordering::SeqCst), 3, "one state per worker, not per message");

    let refused = Pool::builder(&q)
        .workers(2)
        .start_with_state(|worker| if worker == 1 { Err("database unreachable") } else { Ok(()) }, |(), _guard| Ok(()))
        .unwrap_err();
    assert_eq!(refused, PoolError::WorkerState { worker: 1, reason: "database unreachable".into() });
}

#[test]
fn wait_drained_times_out_while_work_remains() {
    let (_engine, q) = queues(Duration::from_secs(5));
    q.send(&b"slow"[..]).unwrap();
    let pool = consumer::run(&q, 1, |_| {
        thread::sleep(Duration::from_millis(400));
        Ok(())
    })
    .unwrap();
    assert!(!pool.wait_drained(Duration::from_millis(100)), "the handler is still running");
    assert!(pool.wait_drained(Duration::from_secs(10)));
    assert_eq!(pool.shutdown(Duration::from_secs(1)).stats.acked, 1);
}

#[test]
fn question_mark_in_a_handler_keeps_the_error_and_picks_retry_or_permanent() {
    use std::error::Error as _;
    fn parse(payload: &[u8]) -> Result<u32, HandlerError> {
        Ok(std::str::from_utf8(payload)?.parse::<u32>()?)
    }
    let e = parse(b"not a number").unwrap_err();
    assert!(e.is_permanent(), "{e}");
    assert!(e.source().unwrap().downcast_ref::<std::num::ParseIntError>().is_some());
    let e = parse(&[0xff]).unwrap_err();
    assert!(e.is_permanent() && e.error().is::<std::str::Utf8Error>(), "{e}");
    let io = || -> Result<(), HandlerError> { Err(std::io::Error::other("backend busy"))? };
    let e = io().unwrap_err();
    assert!(!e.is_permanent());
    assert_eq!(e.to_string(), "transient failure, will retry: backend busy");
    assert_eq!(parse(b"42").unwrap(), 42);
}

#[test]
fn bad_pool_settings_are_typed_errors() {
    let (_engine, q) = queues(Duration::from_secs(1));
    let handler = |_: &consumer::LeaseGuard| Ok(());
    assert_eq!(Pool::builder(&q).workers(0).start(handler).unwrap_err(), PoolError::InvalidWorkers { requested: 0 });
    assert!(matches!(
        Pool::builder(&q).policy(LeasePolicy::default().renew_after(5.0)).start(handler),
        Err(PoolError::InvalidPolicy(_))
    ));
    assert!(matches!(
        Pool::builder(&q).visibility(Duration::from_secs(100 * 3600)).start(handler),
        Err(PoolError::InvalidReceive(_))
    ));
    assert_eq!(q.stats().received, 0, "nothing was received by a pool that did not start");
}

/// The shape of an application's `main`: every consumer call's error goes
/// through `?` into `leaseq::Error`.
fn serve(q: &Queue, workers: usize, policy: LeasePolicy) -> Result<u64, leaseq::Error> {
    let keeper = consumer::LeaseKeeper::manual(policy.clone())?; // PolicyError
    drop(keeper);
    let pool = Pool::builder(q).workers(workers).policy(policy).start(|_| Ok(()))?; // PoolError
    let drained = pool.wait_drained(Duration::from_secs(10));
    let report = pool.shutdown(Duration::from_secs(5));
    assert!(drained && report.clean, "{report:?}");
    Ok(report.stats.acked)
}

#[test]
fn pool_and_policy_errors_convert_into_leaseq_error() {
    let (_engine, q) = queues(Duration::from_secs(5));
    q.send(b"job").unwrap();
    assert_eq!(serve(&q, 2, LeasePolicy::default()), Ok(1));

    let bad_policy = LeasePolicy::default().renew_after(2.0);
    let err = serve(&q, 2, bad_policy).unwrap_err();
    assert!(matches!(&err, leaseq::Error::Policy(e) if e.field == "renew_after"), "{err:?}");
    assert!(std::error::Error::source(&err).is_some());

    let err = serve(&q, 0, LeasePolicy::default()).unwrap_err();
    assert!(matches!(&err, leaseq::Error::Pool(e) if **e == PoolError::InvalidWorkers { requested: 0 }), "{err:?}");
    assert_eq!(err.to_string(), "a pool needs 1..=1024 workers, not 0");
}
