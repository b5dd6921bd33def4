//! What the simulator must always show, on small runs of the real engine.

use std::time::Duration;

use leaseq_sim::{Durations, Policy, Report, Scenario, renewing_policy, simulate};

/// A heavy-tailed workload small enough for a debug-build test: jobs with a
/// median of 10 s and a p99 of 200 s, 20 workers for 3 simulated hours.
fn heavy_tail(policy: Policy) -> Scenario {
    Scenario {
        name: "heavy-tail".into(),
        workers: 20,
        arrival_rate: 0.3,
        arrivals_for: Duration::from_secs(3 * 3600),
        durations: Durations::LogNormal { median: 10.0, p99: 200.0 },
        crash_probability: 0.02,
        poison_fraction: 0.01,
        drain_for: Duration::from_secs(2 * 3600),
        ..Scenario::media_rendering(policy)
    }
}

fn fixed(secs: u64) -> Policy {
    Policy::Fixed { timeout: Duration::from_secs(secs) }
}

fn check_accounting(r: &Report) {
    assert_eq!(r.lost, 0, "a message was lost: {r}");
    assert!(r.sent > 500, "the run is too small to mean anything: {r}");
    // The engine's own counters agree with what the simulator saw happen.
    assert_eq!(r.engine_acked, r.acks, "{r}");
    assert_eq!(r.engine_stale_acks, r.stale_acks, "{r}");
    assert_eq!(r.engine_extensions, r.renewals, "{r}");
    assert_eq!(r.engine_redelivered, r.redeliveries, "{r}");
    assert_eq!(
        r.engine_dead_lettered,
        r.dead_lettered_poison + r.dead_lettered_healthy + r.dead_lettered_after_commit,
        "{r}"
    );
}

#[test]
fn the_same_seed_gives_the_same_report() {
    let a = simulate(&heavy_tail(fixed(30))).unwrap();
    let b = simulate(&heavy_tail(fixed(30))).unwrap();
    assert_eq!(a.csv_row(), b.csv_row());
    let other = simulate(&Scenario { seed: 99, ..heavy_tail(fixed(30)) }).unwrap();
    assert_ne!(a.csv_row(), other.csv_row(), "the seed should matter");
}

#[test]
fn a_timeout_at_the_median_duplicates_more_than_one_at_p99_and_renewal_removes_duplicates() {
    let at_median = simulate(&heavy_tail(fixed(10))).unwrap();
    let at_p99 = simulate(&heavy_tail(fixed(200))).unwrap();
    let renewing = simulate(&heavy_tail(renewing_policy(Duration::from_secs(10)))).unwrap();
    for r in [&at_median, &at_p99, &renewing] {
        check_accounting(r);
    }
    assert!(
        at_median.duplicate_executions > 5 * at_p99.duplicate_executions.max(1),
        "median {} vs p99 {}",
        at_median.duplicate_executions,
        at_p99.duplicate_executions
    );
    assert_eq!(renewing.duplicate_executions, 0, "{renewing}");
    assert!(renewing.renewals > 0);
    // Renewal keeps the short timeout's fast recovery from crashes.
    assert!(renewing.recovery.p50 < at_p99.recovery.p50, "renewing {} vs p99 {}", renewing.recovery, at_p99.recovery);
}

#[test]
fn with_idempotent_effects_committed_effects_equal_completed_messages() {
    let idempotent = simulate(&heavy_tail(fixed(10))).unwrap();
    assert_eq!(idempotent.effects, idempotent.completed, "{idempotent}");
    assert!(idempotent.duplicate_effects > 0, "the short timeout should have produced duplicate attempts");
    let naive = simulate(&Scenario { idempotent: false, ..heavy_tail(fixed(10)) }).unwrap();
    assert_eq!(naive.effects, naive.completed + naive.duplicate_effects);
    assert!(naive.effects > naive.completed, "without idempotency the duplicates are real effects");
}

#[test]
fn poison_messages_are_dead_lettered_and_named_by_diagnose() {
    let poisoned = Scenario { poison_fraction: 0.05, crash_probability: 0.0, ..heavy_tail(fixed(600)) };
    let r = simulate(&poisoned).unwrap();
    check_accounting(&r);
    assert!(r.dead_lettered_poison > 0, "{r}");
    assert_eq!(r.dead_lettered_healthy, 0, "a generous timeout never dead-letters healthy jobs: {r}");
    assert!(r.diagnosis.to_lowercase().contains("poison"), "{}", r.diagnosis);
    let short = simulate(&Scenario { poison_fraction: 0.0, ..heavy_tail(fixed(5)) }).unwrap();
    assert!(short.diagnosis.to_lowercase().contains("short"), "{}", short.diagnosis);
}

#[test]
fn bad_scenarios_are_refused() {
    for bad in [
        Scenario { workers: 0, ..heavy_tail(fixed(10)) },
        Scenario { arrival_rate: 0.0, ..heavy_tail(fixed(10)) },
        Scenario { crash_probability: 1.5, ..heavy_tail(fixed(10)) },
        Scenario { max_receives: 0, ..heavy_tail(fixed(10)) },
        heavy_tail(fixed(13 * 3600)),
    ] {
        assert!(simulate(&bad).is_err(), "{bad:?}");
    }
}
