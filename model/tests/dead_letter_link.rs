//! The differential run (engine against model, as `ops_vs_model` fuzzes it)
//! on a directed sequence around `Queue::set_dead_letter`: a link set while
//! a message is failing, refused cycles, an unlink, a delete of the freed
//! target, with and without a restart of a durable engine in the middle.

use leaseq_model::differential::{ConfigSpec, NameChoice, Op, Span, run};

/// A valid config with a 5 s lease and no link.
fn plain() -> ConfigSpec {
    ConfigSpec { visibility: Some(Span::Secs(5)), tidy: true, ..ConfigSpec::default() }
}

fn link(queue: u8, to: Option<u8>, max_receives: Option<u8>) -> Op {
    Op::SetDeadLetter { queue, to: to.map(NameChoice), max_receives }
}

fn fail_all(queue: u8) -> [Op; 2] {
    [Op::Receive { queue, max: 15, visibility: None }, Op::Advance { by: Span::Secs(6) }]
}

/// Queues 0, 1, 2 are "a", "b", "c" (`NameChoice(0..3)`).
fn sequence(restart: bool) -> Vec<Op> {
    let mut ops = vec![
        Op::Create { name: NameChoice(0), config: plain() },
        Op::Create { name: NameChoice(1), config: plain() },
        Op::Create { name: NameChoice(2), config: plain() },
        Op::Send { queue: 0, size: 10, delay: None },
        Op::Send { queue: 0, size: 20, delay: None },
    ];
    ops.extend(fail_all(0));
    ops.extend(fail_all(0));
    // a -> b with a ceiling below the count reached: the next failure moves.
    ops.push(link(0, Some(1), Some(1)));
    ops.push(Op::Stats { queue: 0 });
    if restart {
        ops.push(Op::Restart);
    }
    ops.extend(fail_all(0));
    ops.extend([
        Op::Stats { queue: 0 },
        Op::Stats { queue: 1 },
        // The moved messages, with their dead-letter records (compared).
        Op::Receive { queue: 1, max: 15, visibility: None },
        // b -> a closes a cycle; b -> b names itself; a ceiling of 0 and a
        // ceiling without a target break the config rules; a missing target.
        link(1, Some(0), Some(2)),
        link(1, Some(1), Some(2)),
        link(2, Some(1), Some(0)),
        link(2, None, Some(3)),
        link(2, Some(3), Some(3)),
        // c -> a, then a -> c would close a -> c -> a.
        link(2, Some(0), Some(2)),
        link(0, Some(2), Some(2)),
        Op::Send { queue: 2, size: 5, delay: None },
    ]);
    if restart {
        ops.push(Op::Restart);
    }
    ops.extend(fail_all(2));
    ops.extend(fail_all(2));
    ops.extend([
        Op::Stats { queue: 0 },
        Op::Stats { queue: 2 },
        // b is a's target: not deletable until a unlinks.
        Op::Delete { name: NameChoice(1) },
        link(0, None, None),
        Op::Delete { name: NameChoice(1) },
        Op::Send { queue: 0, size: 7, delay: None },
    ]);
    ops.extend(fail_all(0));
    ops.extend(fail_all(0));
    ops
}

#[test]
fn engine_and_model_agree_on_changed_links() {
    for restart in [false, true] {
        let outcome = run(&sequence(restart)).unwrap_or_else(|d| panic!("restart {restart}: {d}"));
        assert_eq!(outcome.stopped_at_ambiguity, None, "restart {restart}");
        assert_eq!(outcome.queues, 3, "restart {restart}");
        assert!(outcome.deliveries > 0, "restart {restart}: {outcome:?}");
    }
}
