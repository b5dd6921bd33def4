//! The model's own rules, checked directly: receive-choice legality and the
//! open points the differential relies on.

use std::time::Duration;

use bytes::Bytes;
use leaseq::{MessageId, QueueConfig};
use leaseq_model::Model;

fn id(n: u64) -> MessageId {
    MessageId::from_u64(n)
}

#[test]
fn receive_must_take_the_oldest_group_first() {
    let mut model = Model::new(1);
    let q = model.create_queue("a", QueueConfig::default()).unwrap();
    for n in 0..3 {
        model.send(q, Bytes::from_static(b"x"), Duration::ZERO, id(n)).unwrap();
    }
    let plan = model.receive_plan(q, 2, None).unwrap();
    assert_eq!(plan.count, 2);
    assert!(model.check_choice(q, plan, &[id(0), id(1)]).is_ok());
    assert!(model.check_choice(q, plan, &[id(1), id(2)]).is_err(), "skipping the oldest is refused");
    assert!(model.check_choice(q, plan, &[id(1), id(0)]).is_err(), "out of order is refused");
    assert!(model.check_choice(q, plan, &[id(0)]).is_err(), "too few is refused");
    assert!(model.check_choice(q, plan, &[id(0), id(0)]).is_err(), "a duplicate is refused");
}

#[test]
fn leases_that_run_out_together_come_back_as_one_group() {
    let mut model = Model::new(1);
    let q = model.create_queue("a", QueueConfig::default()).unwrap();
    for n in 0..3 {
        model.send(q, Bytes::from_static(b"x"), Duration::ZERO, id(n)).unwrap();
    }
    model.receive(q, 2, None).unwrap();
    model.advance(Duration::from_secs(31));
    assert_eq!(model.ready_groups(q), vec![vec![id(2)], vec![id(0), id(1)]]);
    let plan = model.receive_plan(q, 2, None).unwrap();
    assert!(model.check_choice(q, plan, &[id(2), id(1)]).is_ok(), "either of the group may come second");
    assert!(model.check_choice(q, plan, &[id(0), id(1)]).is_err());
}

#[test]
fn a_queue_with_shards_promises_no_order() {
    let mut model = Model::new(1);
    let q = model.create_queue("a", QueueConfig::default().shards(3)).unwrap();
    for n in 0..3 {
        model.send(q, Bytes::from_static(b"x"), Duration::ZERO, id(n)).unwrap();
    }
    let plan = model.receive_plan(q, 1, None).unwrap();
    assert!(model.check_choice(q, plan, &[id(2)]).is_ok());
}

#[test]
fn a_redrive_that_would_split_a_group_is_open() {
    let mut model = Model::new(1);
    let dlq = model.create_queue("dlq", QueueConfig::default()).unwrap();
    model.create_queue("a", QueueConfig::default()).unwrap();
    model.send(dlq, Bytes::from_static(b"x"), Duration::from_secs(1), id(0)).unwrap();
    model.send(dlq, Bytes::from_static(b"x"), Duration::from_secs(1), id(1)).unwrap();
    model.advance(Duration::from_secs(1));
    assert!(model.redrive_is_determined("dlq", "a", 2));
    assert!(!model.redrive_is_determined("dlq", "a", 1));
    assert_eq!(model.redrive("dlq", "a", 2), Ok(2));
}
