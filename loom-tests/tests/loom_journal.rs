//! The durable log's commit handshake (`engine/src/journal.rs`).
//!
//! Invariant: a caller that waits for its record never returns before the
//! writer's sync that covers it (it sees everything the writer did before
//! raising `durable`), never sleeps through that raise (no lost wake-up:
//! loom reports a deadlock), and learns a failed group as a failure.
#![cfg(loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::thread;
use loom_tests::{Bound, model};

use leaseq::loom_hooks::Commits;

/// The writer pops the caller's record, "syncs" it (sets `synced`), raises
/// `durable`; the caller waits and then must see the sync.
#[test]
fn a_caller_never_returns_before_the_sync_that_covers_it() {
    model("journal/commit_handshake", Bound::Exhaustive, || {
        let commits = Arc::new(Commits::default());
        let synced = Arc::new(AtomicBool::new(false));
        let caller = {
            let (commits, synced) = (commits.clone(), synced.clone());
            thread::spawn(move || {
                let seq = commits.push();
                assert!(commits.wait(seq), "the group did not fail");
                // Relaxed: only the handshake may order the writer's sync
                // before this load.
                assert!(synced.load(Ordering::Relaxed), "returned before the sync covering its record");
            })
        };
        let writer = thread::spawn(move || {
            let seq = loop {
                match commits.pop() {
                    Some(seq) => break seq,
                    None => thread::yield_now(),
                }
            };
            synced.store(true, Ordering::Relaxed);
            commits.mark_durable(seq + 1);
        });
        caller.join().unwrap();
        writer.join().unwrap();
    });
}

/// A group that failed: the caller is woken and told.
#[test]
fn a_failed_group_is_reported_to_its_caller() {
    model("journal/failed_group", Bound::Exhaustive, || {
        let commits = Arc::new(Commits::default());
        let caller = {
            let commits = commits.clone();
            thread::spawn(move || {
                let seq = commits.push();
                commits.wait(seq)
            })
        };
        let writer = thread::spawn(move || {
            let seq = loop {
                match commits.pop() {
                    Some(seq) => break seq,
                    None => thread::yield_now(),
                }
            };
            commits.mark_failed(seq, seq + 1);
            commits.mark_durable(seq + 1);
        });
        assert!(!caller.join().unwrap(), "a failed record was reported durable");
        writer.join().unwrap();
    });
}
