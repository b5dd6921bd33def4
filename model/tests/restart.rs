//! Restarts of a durable engine against the model's `restart`, one scenario
//! per rule of docs/durability.md's "Restart: what leases become", through
//! the same differential run the fuzz target uses (random sequences with
//! restarts run in `engine/tests/model_equivalence.rs` and `ops_vs_model`).

use leaseq_model::differential::{BackoffSpec, ConfigSpec, NameChoice, Op, ReceiptPick, Span, run};

// Indexes into `NAMES`: "a", "b", "dlq".
const A: NameChoice = NameChoice(0);
const B: NameChoice = NameChoice(1);
const DLQ: NameChoice = NameChoice(3);

fn config() -> ConfigSpec {
    ConfigSpec { visibility: Some(Span::Secs(30)), shards: Some(1), ..ConfigSpec::default() }
}

/// Runs `ops` and fails on a divergence; returns how many deliveries the
/// run compared (the scenario's own plus the final drain).
fn check(ops: &[Op]) -> usize {
    match run(ops) {
        Ok(outcome) => {
            assert_eq!(outcome.stopped_at_ambiguity, None, "the scenario has one outcome");
            assert_eq!(outcome.steps, ops.len());
            // Operations on a queue that does not exist are skipped: every
            // create of a scenario must succeed, or it tests nothing.
            let creates = ops.iter().filter(|op| matches!(op, Op::Create { .. })).count();
            assert_eq!(outcome.queues, creates, "every queue of the scenario was created");
            outcome.deliveries
        }
        Err(divergence) => panic!("{divergence}"),
    }
}

fn send(queue: u8) -> Op {
    Op::Send { queue, size: 8, delay: None }
}

fn receive(queue: u8) -> Op {
    Op::Receive { queue, max: 8, visibility: None }
}

fn stats(queue: u8) -> Op {
    Op::Stats { queue }
}

#[test]
fn in_flight_messages_are_ready_again_and_keep_their_counts() {
    let ops = [
        Op::Create { name: A, config: config() },
        send(0),
        send(0),
        receive(0),
        Op::Restart,
        stats(0),
        receive(0),
        stats(0),
    ];
    // Two before the restart, the same two again, nothing left to drain.
    assert_eq!(check(&ops), 4);
}

#[test]
fn receipts_from_before_a_restart_complete_nothing() {
    let mut ops = vec![Op::Create { name: A, config: config() }, send(0), receive(0), Op::Restart];
    for back in 0..2 {
        ops.push(Op::Ack { queue: 0, receipt: ReceiptPick::Issued(back) });
        ops.push(Op::Extend { queue: 0, receipt: ReceiptPick::Issued(back), visibility: Span::Secs(5) });
        ops.push(Op::Release { queue: 0, receipt: ReceiptPick::Issued(back), delay: None });
    }
    ops.extend([stats(0), receive(0), Op::Ack { queue: 0, receipt: ReceiptPick::Issued(0) }, stats(0)]);
    check(&ops);
}

#[test]
fn a_send_delay_survives_and_release_and_backoff_delays_do_not() {
    let backoff = ConfigSpec { backoff: BackoffSpec::Fixed(Span::Secs(600)), ..config() };
    let ops = [
        Op::Create { name: A, config: backoff },
        Op::Send { queue: 0, size: 4, delay: Some(Span::Secs(90)) },
        send(0),
        receive(0),
        // Released for ten minutes (the backoff): the log does not know.
        Op::Release { queue: 0, receipt: ReceiptPick::Issued(0), delay: None },
        Op::Advance { by: Span::Secs(30) },
        stats(0),
        Op::Restart,
        // The released one is ready; the delayed send still has 60 s to go.
        stats(0),
        receive(0),
        Op::Advance { by: Span::Secs(59) },
        receive(0),
        Op::Advance { by: Span::Secs(1) },
        stats(0),
        receive(0),
    ];
    check(&ops);
}

#[test]
fn a_message_at_the_ceiling_moves_to_its_dead_letter_queue_at_open() {
    let jobs = ConfigSpec { max_receives: Some(2), dead_letter_queue: Some(DLQ), ..config() };
    let ops = [
        Op::Create { name: DLQ, config: config() },
        Op::Create { name: A, config: jobs },
        send(1),
        send(1),
        receive(1),
        Op::Release { queue: 1, receipt: ReceiptPick::Issued(0), delay: Some(Span::Zero) },
        // Both in flight, one at its second delivery (the ceiling).
        receive(1),
        Op::Restart,
        stats(0),
        stats(1),
        receive(0),
        // A second restart keeps the move (it was logged) and moves nothing.
        Op::Restart,
        stats(0),
        stats(1),
    ];
    check(&ops);
}

#[test]
fn a_full_dead_letter_queue_keeps_its_own_messages_and_the_poison_stays() {
    let small = ConfigSpec { max_messages: Some(2), ..config() };
    let jobs = ConfigSpec { max_receives: Some(1), dead_letter_queue: Some(DLQ), ..config() };
    let ops = [
        Op::Create { name: DLQ, config: small },
        Op::Create { name: A, config: jobs },
        send(1),
        send(0),
        send(0),
        receive(1),
        // The lease runs out at the ceiling; the full dead-letter queue keeps
        // the message on its queue (an overflow), then the restart.
        Op::Advance { by: Span::Secs(31) },
        stats(1),
        Op::Restart,
        stats(0),
        stats(1),
    ];
    check(&ops);
}

#[test]
fn a_deleted_queue_stays_deleted_and_its_name_can_be_reused() {
    let ops = [
        Op::Create { name: A, config: config() },
        Op::Create { name: B, config: config() },
        send(0),
        Op::Delete { name: A },
        Op::Restart,
        // Queue 0 is the deleted one: refused as deleted.
        send(0),
        receive(0),
        Op::Purge { queue: 0 },
        Op::Create { name: A, config: config() },
        send(2),
        Op::Restart,
        stats(2),
        receive(2),
    ];
    check(&ops);
}

#[test]
fn ids_never_repeat_across_restarts() {
    let mut ops = vec![Op::Create { name: A, config: config() }];
    for _ in 0..4 {
        ops.extend([send(0), Op::SendBatch { queue: 0, sizes: vec![1, 2, 3] }, Op::Restart]);
    }
    ops.push(stats(0));
    // Every send's id is checked fresh; sixteen messages drained at the end.
    assert_eq!(check(&ops), 16);
}

#[test]
fn retention_counts_from_arrival_across_a_restart() {
    let kept = ConfigSpec { retention: Some(Span::Secs(10)), ..config() };
    let ops = [
        Op::Create { name: A, config: kept },
        send(0),
        Op::Advance { by: Span::Secs(4) },
        send(0),
        receive(0),
        Op::Restart,
        // 9 s after the first send: both still there (the leased one is
        // ready again).
        Op::Advance { by: Span::Secs(5) },
        stats(0),
        // 10 s: the first goes, the second has 4 s left.
        Op::Advance { by: Span::Secs(1) },
        stats(0),
        Op::Restart,
        Op::Advance { by: Span::Secs(4) },
        // Past retention at open or at the next look.
        Op::Restart,
        stats(0),
        receive(0),
    ];
    check(&ops);
}

/// Enough churn between restarts that the log writer cleans (the runs use
/// 64 KiB segments; about 140 KiB of sends are purged here, so the oldest
/// segment is dropped and the messages homed there rewritten forward): the
/// early messages still come back first, in the model's order.
#[test]
fn cleaning_keeps_the_arrival_order_across_restarts() {
    let mut ops = vec![Op::Create { name: A, config: config() }, Op::Create { name: B, config: config() }];
    ops.extend((0..5).map(|_| send(0)));
    for round in 0..2 {
        ops.extend((0..114).map(|_| Op::Send { queue: 1, size: 599, delay: None }));
        ops.push(Op::Purge { queue: 1 });
        if round == 0 {
            ops.push(Op::Restart);
        }
    }
    ops.extend([send(0), send(0), Op::Restart, stats(0), stats(1)]);
    assert!(ops.len() <= 256, "{} steps", ops.len());
    // The seven of A, drained at the end in order.
    assert_eq!(check(&ops), 7);
}
