//! The history checker: hand-written histories, real engine runs, and a
//! mutation that must be caught.

use std::time::Duration;

use bytes::Bytes;
use leaseq::{Engine, ManualClock, MessageId, QueueConfig, Receipt, ReceiveOptions};
use leaseq_model::differential::error_key;
use leaseq_model::history::{Call, CheckError, History, Op, OpId, Outcome, check};

const HOUR: Duration = Duration::from_secs(3600);

fn queues(shards: usize) -> Vec<(String, QueueConfig)> {
    vec![("q".to_string(), QueueConfig::default().shards(shards).visibility_timeout(HOUR))]
}

fn id(n: u64) -> MessageId {
    MessageId::from_u64(n)
}

/// A tiny history builder: ops with explicit (invoke, respond) stamps.
struct H(Vec<Op>);

impl H {
    fn op(&mut self, process: usize, call: Call, invoked: u64, done: Option<(u64, Outcome)>) -> OpId {
        self.0.push(Op { process, call, invoked, completed: done });
        self.0.len() - 1
    }
    fn send(&mut self, p: usize, at: (u64, u64), out: Outcome) -> OpId {
        self.op(p, Call::Send { queue: "q".into(), payload: Bytes::from_static(b"x") }, at.0, Some((at.1, out)))
    }
    fn recv(&mut self, p: usize, at: (u64, u64), got: Vec<(MessageId, u32)>) -> OpId {
        let call = Call::Receive { queue: "q".into(), max: 1, visibility: HOUR };
        self.op(p, call, at.0, Some((at.1, Outcome::Received(got))))
    }
    fn ack(&mut self, p: usize, at: (u64, u64), receive: OpId, out: Outcome) -> OpId {
        self.op(p, Call::Ack { queue: "q".into(), receive, index: 0 }, at.0, Some((at.1, out)))
    }
}

fn violation_names(ops: &[Op], bad: OpId) -> String {
    match check(ops, &queues(1), 1) {
        Err(CheckError::Violation(v)) => {
            assert!(v.stuck.iter().any(|(op, _)| *op == bad), "op {bad} not named: {v:?}");
            CheckError::Violation(v).to_string()
        }
        other => panic!("expected a violation, got {other:?}"),
    }
}

#[test]
fn valid_concurrent_history_passes() {
    let mut h = H(Vec::new());
    // Two sends overlap; a receive overlapping both returns the second.
    h.send(0, (1, 4), Outcome::Sent(id(1)));
    h.send(1, (2, 5), Outcome::Sent(id(2)));
    let r = h.recv(2, (3, 6), vec![(id(2), 1)]);
    h.ack(2, (7, 8), r, Outcome::Acked);
    let r2 = h.recv(0, (9, 10), vec![(id(1), 1)]);
    h.ack(0, (11, 12), r2, Outcome::Acked);
    h.recv(1, (13, 14), vec![]);
    let report = check(&h.0, &queues(1), 1).unwrap();
    assert_eq!(report.order.len(), 7);
}

#[test]
fn double_delivery_inside_a_lease_fails() {
    let mut h = H(Vec::new());
    h.send(0, (1, 2), Outcome::Sent(id(1)));
    h.recv(1, (3, 5), vec![(id(1), 1)]);
    let bad = h.recv(2, (4, 6), vec![(id(1), 1)]);
    let text = violation_names(&h.0, bad);
    assert!(text.contains("the contract says 0"), "{text}");
}

#[test]
fn acked_message_received_again_fails() {
    let mut h = H(Vec::new());
    h.send(0, (1, 2), Outcome::Sent(id(1)));
    let r = h.recv(1, (3, 4), vec![(id(1), 1)]);
    h.ack(1, (5, 6), r, Outcome::Acked);
    let bad = h.recv(2, (7, 8), vec![(id(1), 2)]);
    violation_names(&h.0, bad);
}

#[test]
fn lost_acknowledged_send_fails() {
    let mut h = H(Vec::new());
    h.send(0, (1, 2), Outcome::Sent(id(1)));
    let bad = h.recv(1, (3, 4), vec![]);
    let text = violation_names(&h.0, bad);
    assert!(text.contains("returned 0 messages"), "{text}");
}

#[test]
fn stale_ack_that_succeeds_fails() {
    let mut h = H(Vec::new());
    h.send(0, (1, 2), Outcome::Sent(id(1)));
    let r = h.recv(1, (3, 4), vec![(id(1), 1)]);
    h.ack(1, (5, 6), r, Outcome::Acked);
    let bad = h.ack(2, (7, 8), r, Outcome::Acked);
    violation_names(&h.0, bad);
}

#[test]
fn stale_ack_refused_passes() {
    let mut h = H(Vec::new());
    h.send(0, (1, 2), Outcome::Sent(id(1)));
    let r = h.recv(1, (3, 4), vec![(id(1), 1)]);
    h.ack(1, (5, 6), r, Outcome::Acked);
    h.ack(2, (7, 8), r, Outcome::Failed("Stale".into()));
    check(&h.0, &queues(1), 1).unwrap();
}

#[test]
fn delivery_count_going_backwards_fails() {
    // Only one receive can be first; claiming count 2 on a first delivery is
    // already wrong, so use a released-then-redelivered shape: counts must
    // start at 1.
    let mut h = H(Vec::new());
    h.send(0, (1, 2), Outcome::Sent(id(1)));
    let bad = h.recv(1, (3, 4), vec![(id(1), 0)]);
    let text = violation_names(&h.0, bad);
    assert!(text.contains("delivery count"), "{text}");
}

#[test]
fn indeterminate_send_passes_either_way() {
    let call = Call::Send { queue: "q".into(), payload: Bytes::from_static(b"x") };
    // Taken effect: a later receive sees an id no completed send returned.
    let mut h = H(Vec::new());
    h.op(0, call.clone(), 1, None);
    h.recv(1, (2, 3), vec![(id(9), 1)]);
    check(&h.0, &queues(1), 1).unwrap();
    // Not taken effect: a later receive sees nothing.
    let mut h = H(Vec::new());
    h.op(0, call, 1, None);
    h.recv(1, (2, 3), vec![]);
    check(&h.0, &queues(1), 1).unwrap();
}

/// A receive whose client gave up (no response): `max` messages at most.
fn lost_receive(h: &mut H, p: usize, invoked: u64, max: usize) -> OpId {
    h.op(p, Call::Receive { queue: "q".into(), max, visibility: HOUR }, invoked, None)
}

#[test]
fn timed_out_receive_may_have_leased_what_the_drain_misses() {
    // One message, a receive that never answered, then a drain that finds
    // nothing: the lost receive leased it (its lease outlives the history).
    let mut h = H(Vec::new());
    h.send(0, (1, 2), Outcome::Sent(id(1)));
    lost_receive(&mut h, 1, 3, 1);
    h.recv(0, (5, 6), vec![]);
    let report = check(&h.0, &queues(1), 1).unwrap();
    assert_eq!(report.order, vec![0, 1, 2], "the lost receive is placed before the drain");

    // A batch that never answered may have taken part of what it asked for.
    for drained in [vec![], vec![(id(2), 1)]] {
        let mut h = H(Vec::new());
        h.send(0, (1, 2), Outcome::Sent(id(1)));
        h.send(0, (3, 4), Outcome::Sent(id(2)));
        lost_receive(&mut h, 1, 5, 2);
        h.recv(0, (6, 7), drained.clone());
        if !drained.is_empty() {
            h.recv(0, (8, 9), vec![]);
        }
        check(&h.0, &queues(1), 1).unwrap_or_else(|e| panic!("drained {drained:?}: {e}"));
    }

    // And it may have taken nothing: the drain sees the message.
    let mut h = H(Vec::new());
    h.send(0, (1, 2), Outcome::Sent(id(1)));
    lost_receive(&mut h, 1, 3, 1);
    h.recv(0, (5, 6), vec![(id(1), 1)]);
    check(&h.0, &queues(1), 1).unwrap();
}

#[test]
fn timed_out_receive_does_not_excuse_more_than_it_could_take() {
    // It asked for one; two are missing.
    let mut h = H(Vec::new());
    h.send(0, (1, 2), Outcome::Sent(id(1)));
    h.send(0, (3, 4), Outcome::Sent(id(2)));
    lost_receive(&mut h, 1, 5, 1);
    let bad = h.recv(0, (6, 7), vec![]);
    let text = violation_names(&h.0, bad);
    assert!(text.contains("returned 0 messages"), "{text}");

    // It was invoked after the empty receive answered: it cannot have
    // taken the message before.
    let mut h = H(Vec::new());
    h.send(0, (1, 2), Outcome::Sent(id(1)));
    let bad = h.recv(0, (3, 4), vec![]);
    lost_receive(&mut h, 1, 5, 1);
    violation_names(&h.0, bad);
}

#[test]
fn timed_out_receive_cannot_have_taken_a_message_received_later() {
    // One shard, so oldest first. The lost receive could explain b coming
    // out before a only by having taken a, but a is received afterwards: it
    // did not, and b overtook a.
    let mut h = H(Vec::new());
    h.send(0, (1, 2), Outcome::Sent(id(1)));
    h.send(0, (3, 4), Outcome::Sent(id(2)));
    let lost = lost_receive(&mut h, 1, 5, 1);
    let overtaking = h.recv(0, (6, 7), vec![(id(2), 1)]);
    let late = h.recv(0, (8, 9), vec![(id(1), 1)]);
    match check(&h.0, &queues(1), 1) {
        Err(CheckError::Violation(v)) => {
            assert!(v.stuck.iter().any(|(op, _)| *op == overtaking || *op == late), "{v:?}");
            assert!(v.stuck.iter().all(|(op, _)| *op != lost), "the lost receive is never a reason: {v:?}");
        }
        other => panic!("expected a violation, got {other:?}"),
    }
    // Without the later receive of a, the same prefix passes.
    h.0.pop();
    check(&h.0, &queues(1), 1).unwrap();
}

#[test]
fn timed_out_receive_with_zero_visibility_only_counts_a_delivery() {
    // A zero-visibility lease is over at once: the message stays ready and
    // its next delivery is the second.
    let mut h = H(Vec::new());
    h.send(0, (1, 2), Outcome::Sent(id(1)));
    h.op(1, Call::Receive { queue: "q".into(), max: 1, visibility: Duration::ZERO }, 3, None);
    h.recv(0, (5, 6), vec![(id(1), 2)]);
    check(&h.0, &queues(1), 1).unwrap();
}

#[test]
fn malformed_ack_is_an_error_not_a_panic() {
    let mut h = H(Vec::new());
    h.ack(0, (1, 2), 42, Outcome::Acked);
    assert!(matches!(check(&h.0, &queues(1), 1), Err(CheckError::Malformed(_))));
}

/// Four threads of random send/receive/ack against a real engine.
/// Operations each recording thread makes: enough for hundreds of
/// interleavings per history, few enough that the search stays small (its
/// cost grows with how many operations overlap, and 50 per thread sometimes
/// took tens of seconds in a debug build).
const OPS_PER_THREAD: usize = 25;

fn record(shards: usize, batch: usize, seed: u64) -> Vec<Op> {
    record_with(4, shards, batch, seed)
}

/// `threads` threads of random send/receive/ack.
fn record_with(threads: usize, shards: usize, batch: usize, seed: u64) -> Vec<Op> {
    let clock = ManualClock::new();
    let engine = Engine::builder().clock(clock).build();
    let queue = engine.create_queue("q", queues(shards).remove(0).1).unwrap();
    let history = History::new();
    std::thread::scope(|s| {
        for p in 0..threads {
            let (queue, history) = (&queue, &history);
            s.spawn(move || {
                let mut rng = seed ^ (p as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let mut next = || {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng
                };
                let mut held: Vec<(OpId, usize, Receipt)> = Vec::new();
                for _ in 0..OPS_PER_THREAD {
                    match next() % 3 {
                        0 => {
                            let payload = Bytes::from(vec![p as u8]);
                            let op = history.invoke(p, Call::Send { queue: "q".into(), payload: payload.clone() });
                            let out = match queue.send(payload) {
                                Ok(id) => Outcome::Sent(id),
                                Err(e) => Outcome::Failed(error_key(&e)),
                            };
                            history.complete(op, out);
                        }
                        1 => {
                            let max = batch.min(1 + (next() % 2) as usize);
                            let op = history.invoke(p, Call::Receive { queue: "q".into(), max, visibility: HOUR });
                            let out = match queue.receive_with(max, ReceiveOptions::default().visibility(HOUR)) {
                                Ok(got) => {
                                    let seen = got.iter().map(|d| (d.id, d.delivery_count)).collect();
                                    for (index, d) in got.into_iter().enumerate() {
                                        held.push((op, index, d.receipt));
                                    }
                                    Outcome::Received(seen)
                                }
                                Err(e) => Outcome::Failed(error_key(&e)),
                            };
                            history.complete(op, out);
                        }
                        _ if !held.is_empty() => {
                            let pick = (next() as usize) % held.len();
                            // Keep acked receipts around sometimes: re-acks must be refused.
                            let (receive, index, receipt) =
                                if next() % 4 == 0 { held[pick] } else { held.swap_remove(pick) };
                            let op = history.invoke(p, Call::Ack { queue: "q".into(), receive, index });
                            let out = match queue.ack(&receipt) {
                                Ok(()) => Outcome::Acked,
                                Err(e) => Outcome::Failed(format!("{e:?}")),
                            };
                            history.complete(op, out);
                        }
                        _ => {}
                    }
                }
            });
        }
    });
    history.ops()
}

#[test]
fn real_engine_one_shard_is_linearizable() {
    for seed in 1..=3 {
        let ops = record(1, 1, seed);
        let report = check(&ops, &queues(1), 1).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert_eq!(report.order.len(), ops.len());
    }
}

#[test]
fn real_engine_multi_shard_is_linearizable() {
    for seed in 1..=3 {
        let ops = record(4, 1, seed);
        check(&ops, &queues(4), 1).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    }
}

#[test]
fn corrupted_real_history_is_caught() {
    let mut ops = record(1, 1, 7);
    // Duplicate a delivered id into a later receive that returned something else.
    let delivered: Vec<(usize, MessageId)> = ops
        .iter()
        .enumerate()
        .filter_map(|(i, o)| match &o.completed {
            Some((_, Outcome::Received(got))) if !got.is_empty() => Some((i, got[0].0)),
            _ => None,
        })
        .collect();
    assert!(delivered.len() >= 2, "the run received at least twice");
    let (_, first_id) = delivered[0];
    let (target, _) = *delivered.iter().find(|(_, id)| *id != first_id).expect("another delivered id");
    if let Some((_, Outcome::Received(got))) = &mut ops[target].completed {
        got[0].0 = first_id;
    }
    assert!(matches!(check(&ops, &queues(1), 1), Err(CheckError::Violation(_))));
}

#[test]
fn real_engine_sequential_batch_receives_pass() {
    for seed in 1..=5 {
        for shards in [1, 4] {
            let ops = record_with(1, shards, 2, seed);
            check(&ops, &queues(shards), 1).unwrap_or_else(|e| panic!("shards {shards} seed {seed}: {e}"));
        }
    }
}

/// Batch receives (max 2) under contention: a batch takes its messages one
/// at a time inside the call, and the checker splits it so (this failed in 9
/// of 10 runs when it took a batch as one atomic step: a receive of 2 spanning
/// a long pause returned the oldest message and one sent near its end).
#[test]
fn real_engine_batch_receives_are_linearizable() {
    for seed in 1..=4 {
        for shards in [1, 4] {
            let ops = record(shards, 2, seed);
            check(&ops, &queues(shards), 1).unwrap_or_else(|e| panic!("shards {shards} seed {seed}: {e}"));
        }
    }
}

/// Replays a history kept by a cluster test (`LEASEQ_HISTORY_FILE`, written
/// by `write_ops`; queue visibility 600 s, `LEASEQ_HISTORY_SHARDS` shards,
/// default 2): `cargo test -p leaseq-model --test history -- --ignored`.
#[test]
#[ignore = "needs LEASEQ_HISTORY_FILE"]
fn replay_history_file() {
    let path = std::env::var("LEASEQ_HISTORY_FILE").expect("LEASEQ_HISTORY_FILE");
    let shards = std::env::var("LEASEQ_HISTORY_SHARDS").ok().and_then(|s| s.parse().ok()).unwrap_or(2);
    let ops = leaseq_model::read_ops(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let name = match &ops[0].call {
        Call::Send { queue, .. } | Call::Receive { queue, .. } | Call::Ack { queue, .. } => queue.clone(),
    };
    let config = QueueConfig::default().shards(shards).visibility_timeout(Duration::from_secs(600));
    let started = std::time::Instant::now();
    let result = check(&ops, &[(name, config)], 1);
    eprintln!("{} ops, {:?}: {:?}", ops.len(), started.elapsed(), result.as_ref().map(|r| r.steps));
    let report = result.unwrap();
    let placed: Vec<Op> =
        report.order.iter().filter(|&&i| ops[i].completed.is_none()).map(|&i| ops[i].clone()).collect();
    eprintln!("indeterminate ops placed as taking effect:\n{}", leaseq_model::write_ops(&placed));
}
