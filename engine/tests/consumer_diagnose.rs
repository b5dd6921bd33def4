//! `Queue::diagnose` on constructed workloads (ManualClock, deterministic):
//! it must tell a timeout set too short from poison messages.

use std::collections::HashSet;
use std::time::Duration;

use leaseq::consumer::Verdict;
use leaseq::{Delivery, Engine, ManualClock, MessageId, Queue, QueueConfig};

const VIS: Duration = Duration::from_secs(10);
const STEP: Duration = Duration::from_secs(1);

fn queue(clock: &ManualClock, with_dead_letter: bool) -> Queue {
    let engine = Engine::builder().clock(clock.clone()).build();
    let mut config = QueueConfig::default().visibility_timeout(VIS).shards(2);
    if with_dead_letter {
        engine.create_queue("jobs-dlq", QueueConfig::default()).unwrap();
        config.max_receives = Some(3);
        config.dead_letter_queue = Some("jobs-dlq".into());
    }
    engine.create_queue("jobs", config).unwrap()
}

/// How a simulated worker treats one delivery.
#[derive(Clone, Copy)]
enum Fate {
    /// Work this long, then ack (whatever became of the lease meanwhile).
    AckAfter(Duration),
    /// Crash: never call back.
    Crash,
    /// Fail at once: release for a retry.
    Fail,
}

/// Runs `workers` simulated workers until the queue is drained (or a time
/// limit), one clock step at a time.
fn run(clock: &ManualClock, q: &Queue, workers: usize, fate: impl Fn(&Delivery) -> Fate) {
    let mut busy: Vec<Option<(Delivery, Duration)>> = vec![None; workers];
    for _ in 0..2_000 {
        for slot in busy.iter_mut() {
            if slot.is_none() {
                if let Some(d) = q.receive(1).unwrap().pop() {
                    match fate(&d) {
                        Fate::AckAfter(work) => *slot = Some((d, work)),
                        Fate::Crash => {}
                        Fate::Fail => q.release(&d.receipt, Duration::ZERO).unwrap(),
                    }
                }
            }
        }
        clock.advance(STEP);
        for slot in busy.iter_mut() {
            if let Some((d, left)) = slot {
                *left = left.saturating_sub(STEP);
                if left.is_zero() {
                    // The result does not matter to the worker: it already did the work.
                    let _ = q.ack(&d.receipt);
                    *slot = None;
                }
            }
        }
        let s = q.stats();
        if s.ready + s.delayed + s.in_flight == 0 && busy.iter().all(Option::is_none) {
            return;
        }
    }
    panic!("workload did not drain: {:?}", q.stats());
}

#[test]
fn slow_work_is_diagnosed_as_a_short_timeout_with_a_suggestion() {
    let clock = ManualClock::new();
    let q = queue(&clock, true);
    for i in 0..20 {
        q.send(format!("job-{i}")).unwrap();
    }
    // Every job takes 15 s against a 10 s timeout.
    run(&clock, &q, 3, |_| Fate::AckAfter(Duration::from_secs(15)));
    let d = q.diagnose();
    println!("{d}");
    assert_eq!(d.verdict, Verdict::TimeoutTooShort, "{d}");
    assert!(d.poison.is_empty(), "slow work is not poison: {d}");
    let t = d.timeout.as_ref().unwrap();
    assert!(t.late_acks + t.stale_acks > 0);
    assert!(t.p99_at_timeout);
    let suggested = d.suggested_visibility.unwrap();
    assert!(suggested >= Duration::from_secs(15) && suggested <= Duration::from_secs(30), "{suggested:?}");
    assert!(d.summary().contains("too short"), "{d}");
}

#[test]
fn poison_messages_are_named_and_the_timeout_is_not_blamed() {
    let clock = ManualClock::new();
    let q = queue(&clock, true);
    let mut poison = HashSet::new();
    for i in 0..30 {
        let payload = match i {
            7 => "crash",
            19 => "fail",
            _ => "ok",
        };
        let id = q.send(payload).unwrap();
        if payload != "ok" {
            poison.insert(id);
        }
    }
    run(&clock, &q, 2, |d| match &d.payload[..] {
        b"crash" => Fate::Crash,
        b"fail" => Fate::Fail,
        _ => Fate::AckAfter(Duration::from_secs(2)),
    });
    let d = q.diagnose();
    println!("{d}");
    assert_eq!(d.verdict, Verdict::PoisonMessages, "{d}");
    assert!(d.timeout.is_none(), "{d}");
    let named: HashSet<MessageId> = d.poison.iter().map(|p| p.id).collect();
    assert_eq!(named, poison);
    let crashed = d.poison.iter().find(|p| p.expired_attempts == 3).expect("the crashing one expired 3 times");
    assert_eq!(crashed.deliveries, 3);
    assert!(d.poison.iter().any(|p| p.released_attempts == 3), "{d}");
    for id in &poison {
        assert!(d.summary().contains(&id.to_string()), "{d}");
    }
}

#[test]
fn both_causes_at_once() {
    let clock = ManualClock::new();
    let q = queue(&clock, true);
    let crash = q.send("crash").unwrap();
    for _ in 0..10 {
        q.send("slow").unwrap();
    }
    run(&clock, &q, 2, |d| match &d.payload[..] {
        b"crash" => Fate::Crash,
        _ => Fate::AckAfter(Duration::from_secs(14)),
    });
    let d = q.diagnose();
    assert_eq!(d.verdict, Verdict::Both, "{d}");
    assert_eq!(d.poison.iter().map(|p| p.id).collect::<Vec<_>>(), vec![crash]);
}

#[test]
fn healthy_and_unexplained() {
    let clock = ManualClock::new();
    let q = queue(&clock, false);
    for _ in 0..10 {
        q.send("ok").unwrap();
    }
    run(&clock, &q, 2, |_| Fate::AckAfter(Duration::from_secs(1)));
    let d = q.diagnose();
    assert_eq!(d.verdict, Verdict::Healthy, "{d}");
    assert_eq!(d.redelivery_rate, 0.0);

    // Crashes with no retry ceiling: redeliveries, no late acks, nobody named.
    let id = q.send("crash-twice").unwrap();
    for _ in 0..2 {
        let d = q.receive(1).unwrap().remove(0);
        assert_eq!(d.id, id);
        clock.advance(VIS);
    }
    let last = q.receive(1).unwrap().remove(0);
    q.ack(&last.receipt).unwrap();
    let d = q.diagnose();
    assert_eq!(d.verdict, Verdict::Unexplained, "{d}");
    assert!(d.summary().contains("max_receives"), "{d}");
}

#[test]
fn long_work_under_a_lease_keeper_is_healthy() {
    use leaseq::consumer::{LeaseKeeper, LeasePolicy};
    let clock = ManualClock::new();
    let q = queue(&clock, true);
    let keeper = LeaseKeeper::manual(LeasePolicy::default()).unwrap();
    for _ in 0..25 {
        q.send("35 s of work").unwrap();
        let guard = keeper.keep(&q, q.receive(1).unwrap().remove(0)).unwrap();
        for _ in 0..35 {
            clock.advance(STEP);
            keeper.tick(q.now());
        }
        guard.ack().unwrap();
    }
    let d = q.diagnose();
    assert_eq!(d.verdict, Verdict::Healthy, "{d}");
    assert!(d.processing_p99.unwrap() > VIS, "processing exceeds the timeout: {d}");
    assert!(d.extensions > 0);
}

#[test]
fn messages_a_consumer_dead_lettered_are_named_as_poison_with_their_reason() {
    use leaseq::consumer::{HandlerError, Pool};

    // A real clock: the pool's workers and keeper run on threads.
    let engine = Engine::new();
    engine.create_queue("jobs-dlq", QueueConfig::default()).unwrap();
    let q = engine.create_queue("jobs", QueueConfig::default().max_receives(5).dead_letter_queue("jobs-dlq")).unwrap();
    let mut declared = HashSet::new();
    for i in 0..20 {
        let id = q.send(if i % 7 == 3 { "unparsable" } else { "ok" }).unwrap();
        if i % 7 == 3 {
            declared.insert(id);
        }
    }
    let pool = Pool::builder(&q)
        .workers(2)
        .poll_wait(Duration::from_millis(20))
        .start(|guard: &leaseq::consumer::LeaseGuard| match &guard.delivery().payload[..] {
            b"unparsable" => Err(HandlerError::permanent("the body is not a job")),
            _ => Ok(()),
        })
        .unwrap();
    assert!(pool.wait_drained(Duration::from_secs(30)), "{:?}", q.stats());
    let _ = pool.shutdown(Duration::from_secs(5));

    let d = q.diagnose();
    println!("{d}");
    assert_eq!(d.verdict, Verdict::PoisonMessages, "{d}");
    let named: HashSet<MessageId> = d.poison.iter().map(|p| p.id).collect();
    assert_eq!(named, declared, "every Permanent failure is named, nothing else");
    for p in &d.poison {
        let reason = p.declared.as_deref().expect("declared by the handler");
        assert!(reason.contains("the body is not a job"), "{reason}");
        assert_eq!(p.deliveries, 1, "dead-lettered on the first delivery");
        assert!(d.summary().contains(&p.id.to_string()), "{d}");
    }
    assert!(d.summary().contains("dead-lettered by a consumer"), "{d}");
}
