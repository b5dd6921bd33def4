//! The lease keeper on the real clock, with short intervals and generous
//! bounds (these must hold on a loaded 2-core machine).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use leaseq::consumer::{LeaseKeeper, LeasePolicy, LossReason};
use leaseq::{Delivery, Engine, LeaseError, Queue, QueueConfig, ReceiveOptions};

const VIS: Duration = Duration::from_millis(200);

fn queue() -> Queue {
    let engine = Engine::new();
    engine.create_queue("jobs", QueueConfig::default().visibility_timeout(VIS).shards(1)).unwrap()
}

/// Renew at 40% of the grant: 120 ms of slack against a 200 ms lease.
fn policy() -> LeasePolicy {
    LeasePolicy::default().renew_after(0.4)
}

/// A competing consumer polling until `stop`, acking what it gets; returns
/// what it received.
fn competitor(q: &Queue, stop: Arc<AtomicBool>) -> thread::JoinHandle<Vec<Delivery>> {
    let q = q.clone();
    thread::spawn(move || {
        let mut got = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            for d in q.receive_with(1, ReceiveOptions::new().wait(Duration::from_millis(10))).unwrap() {
                q.ack(&d.receipt).unwrap();
                got.push(d);
            }
        }
        got
    })
}

fn spin_for(d: Duration) {
    let start = Instant::now();
    while start.elapsed() < d {
        std::hint::spin_loop();
    }
}

#[test]
fn a_worker_blocking_its_thread_for_three_timeouts_keeps_its_lease_with_the_keeper() {
    for cpu_bound in [false, true] {
        let q = queue();
        q.send(&b"long job"[..]).unwrap();
        let keeper = LeaseKeeper::spawn(policy()).unwrap();
        let guard = keeper.keep(&q, q.receive(1).unwrap().remove(0)).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let other = competitor(&q, stop.clone());
        let worker = thread::spawn(move || {
            if cpu_bound {
                spin_for(VIS * 3)
            } else {
                thread::sleep(VIS * 3)
            }
            let held = guard.is_held();
            (held, guard.ack())
        });
        let (held, acked) = worker.join().unwrap();
        stop.store(true, Ordering::SeqCst);
        let stolen = other.join().unwrap();
        assert!(stolen.is_empty(), "cpu_bound={cpu_bound}: the message was redelivered while kept");
        assert!(held, "cpu_bound={cpu_bound}");
        assert_eq!(acked, Ok(()), "cpu_bound={cpu_bound}");
        let stats = q.stats();
        assert_eq!((stats.acked, stats.redelivered, stats.expired), (1, 0, 0), "{stats:?}");
        assert!(stats.extensions >= 3, "renewed through 600 ms of a 200 ms lease: {stats:?}");
    }
}

#[test]
fn without_the_keeper_the_same_worker_loses_its_lease() {
    let q = queue();
    q.send(&b"long job"[..]).unwrap();
    let d = q.receive(1).unwrap().remove(0);
    let stop = Arc::new(AtomicBool::new(false));
    let other = competitor(&q, stop.clone());
    thread::sleep(VIS * 3);
    let acked = q.ack(&d.receipt);
    stop.store(true, Ordering::SeqCst);
    let stolen = other.join().unwrap();
    assert_eq!(stolen.len(), 1, "the lease ran out and another consumer took the message");
    assert_eq!(acked, Err(LeaseError::Stale));
}

#[test]
fn a_worker_that_stops_making_progress_loses_its_lease_and_the_message_comes_back() {
    let q = queue();
    q.send(&b"job that hangs"[..]).unwrap();
    let heartbeat = Duration::from_millis(150);
    let keeper = LeaseKeeper::spawn(policy().heartbeat(heartbeat)).unwrap();
    let guard = keeper.keep(&q, q.receive(1).unwrap().remove(0)).unwrap();
    let signal = guard.loss_signal();
    let stop = Arc::new(AtomicBool::new(false));
    let other = competitor(&q, stop.clone());
    let (went_silent, silent_since) = std::sync::mpsc::channel();
    let unstick = Arc::new(AtomicBool::new(false));
    let worker = {
        let unstick = unstick.clone();
        thread::spawn(move || {
            // Healthy for 3 timeouts, reporting progress...
            let start = Instant::now();
            while start.elapsed() < VIS * 3 {
                guard.progress();
                thread::sleep(Duration::from_millis(20));
            }
            let held = guard.is_held();
            went_silent.send(Instant::now()).unwrap();
            // ...then stuck: no progress, no calls, until the test lets it go.
            while !unstick.load(Ordering::SeqCst) {
                thread::sleep(Duration::from_millis(5));
            }
            (held, guard.ack())
        })
    };
    let silent_since = silent_since.recv().unwrap();
    let reason = signal.wait(Duration::from_secs(10)).expect("the lease was lost");
    let took = silent_since.elapsed();
    assert!(matches!(reason, LossReason::HeartbeatMissing { .. }), "{reason}");
    // Bound: heartbeat + a renewal interval + a grant, plus generous slack for a loaded machine.
    assert!(took >= heartbeat, "{took:?}");
    assert!(took <= heartbeat + VIS * 2 + Duration::from_secs(2), "{took:?}");
    // The message comes back to the competing consumer.
    let deadline = Instant::now() + Duration::from_secs(5);
    while q.stats().acked == 0 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::SeqCst);
    let stolen = other.join().unwrap();
    assert_eq!(stolen.len(), 1);
    assert_eq!(stolen[0].delivery_count, 2);
    unstick.store(true, Ordering::SeqCst);
    let (held_while_progressing, late_ack) = worker.join().unwrap();
    assert!(held_while_progressing, "renewed while making progress");
    assert_eq!(late_ack, Err(LeaseError::Stale), "the stuck worker cannot complete the new attempt");
}

#[test]
fn a_refused_renewal_is_reported_through_the_guard_before_the_next_effect() {
    let q = queue();
    q.send(&b"job"[..]).unwrap();
    let keeper = LeaseKeeper::spawn(policy()).unwrap();
    let d = q.receive(1).unwrap().remove(0);
    let receipt = d.receipt;
    let guard = keeper.keep(&q, d).unwrap();
    let effects = Arc::new(AtomicU64::new(0));
    let effects_at_loss = Arc::new(AtomicU64::new(u64::MAX));
    {
        let effects = effects.clone();
        let at_loss = effects_at_loss.clone();
        guard.on_lost(move |_| at_loss.store(effects.load(Ordering::SeqCst), Ordering::SeqCst));
    }
    let worker = {
        let effects = effects.clone();
        thread::spawn(move || {
            // Each loop: check the lease, then perform one effect.
            let reason = loop {
                if let Err(lost) = guard.check() {
                    break lost.reason;
                }
                effects.fetch_add(1, Ordering::SeqCst);
                thread::sleep(Duration::from_millis(5));
            };
            (reason, guard.ack())
        })
    };
    thread::sleep(Duration::from_millis(30));
    // Another holder of the same receipt releases it and a second consumer takes the
    // message: the worker's receipt is now stale, and only a renewal can find out.
    q.release(&receipt, Duration::ZERO).unwrap();
    let second = q.receive(1).unwrap().remove(0);
    let (reason, ack) = worker.join().unwrap();
    assert_eq!(reason, LossReason::Refused(LeaseError::Stale));
    assert_eq!(ack, Err(LeaseError::Stale));
    let at_loss = effects_at_loss.load(Ordering::SeqCst);
    assert_ne!(at_loss, u64::MAX, "the loss callback ran");
    // At most the one effect already past its check when the keeper heard.
    assert!(effects.load(Ordering::SeqCst) <= at_loss + 1, "effects after the loss was reported");
    q.ack(&second.receipt).unwrap();
}

/// The keeper holds a lease for the whole of `max_lease`: the last renewal,
/// sized by the policy to end at the cap from the keeper's clock reading,
/// is granted up to the cap even though the queue reads its clock later
/// (with `extend` it landed past the cap, was refused, and the lease ended
/// one grant early, at 200 of 250 ms).
#[test]
fn the_keeper_holds_a_lease_up_to_max_lease() {
    let engine = Engine::new();
    let vis = Duration::from_millis(100);
    let max_lease = Duration::from_millis(250);
    let config = QueueConfig::default().visibility_timeout(vis).max_visibility(vis).max_lease(max_lease).shards(1);
    let q = engine.create_queue("capped", config).unwrap();
    q.send(&b"long job"[..]).unwrap();
    let policy = LeasePolicy::default().min_margin(Duration::from_millis(20)).no_max_total();
    let keeper = LeaseKeeper::spawn(policy).unwrap();
    let delivery = q.receive(1).unwrap().remove(0);
    let received_at = delivery.received_at;
    let guard = keeper.keep(&q, delivery).expect("a receipt of this queue");
    let reason = guard.wait_lost(Duration::from_secs(10)).expect("the cap ends the lease");
    assert_eq!(reason, LossReason::CapReached { max_total: max_lease });
    assert_eq!(guard.deadline(), received_at.saturating_add(max_lease), "held to the cap, not a grant short");
    let stats = q.stats();
    assert_eq!((stats.extensions, stats.extensions_refused), (3, 0), "{stats:?}");
}
