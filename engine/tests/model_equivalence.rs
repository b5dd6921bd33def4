//! The engine against the reference model (`leaseq-model`): random operation
//! sequences on one engine with a `ManualClock` must give the same result as
//! the model at every step, and the same final state (stats of every queue,
//! the queue list, and every message left, dead-letter records included).
//!
//! Operations are decoded from random bytes by the same decoder the fuzz
//! target `ops_vs_model` uses, so proptest's shrinking of the bytes shrinks
//! the operation sequence. What the comparison leaves open (order inside one
//! ready group, order across shards) is documented in `leaseq_model::Model`.

use leaseq_model::differential::{self, Op};
use proptest::prelude::*;

fn check(ops: &[Op]) {
    if let Err(divergence) = differential::run(ops) {
        panic!("{divergence}\nops: {ops:#?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_model(bytes in proptest::collection::vec(any::<u8>(), 0..3000)) {
        check(&differential::ops_from_bytes(&bytes));
    }
}
