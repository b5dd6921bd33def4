//! A sweep over timeouts for both policies: the trade-off as a CSV and charts.
//!
//! Invariant: every point of every chart is one `simulate` run of the same
//! workload and seed, differing only in the policy, so the curves are
//! comparable.

use std::time::Duration;

use leaseq::consumer::LeasePolicy;

use crate::chart::{Chart, Series};
use crate::report::Report;
use crate::scenario::{Policy, Scenario};
use crate::simulation::simulate;

/// The keeper policy the sweep pairs with short timeouts: renew at half the
/// grant with at least 2 s of slack, at most 4 h per attempt.
pub fn renewing_policy(timeout: Duration) -> Policy {
    Policy::Renewing {
        timeout,
        keeper: LeasePolicy {
            renew_after: 0.5,
            min_margin: Duration::from_secs(2),
            max_total: Some(Duration::from_secs(4 * 3600)),
            ..LeasePolicy::default()
        },
    }
}

impl Series {
    /// The same series with x taken from `x` of the matching reports, in
    /// order (for charts whose x axis is another measurement).
    fn with_x(mut self, reports: &[Report], kind: &str, x: &dyn Fn(&Report) -> f64) -> Self {
        let xs = reports.iter().filter(|r| r.policy_kind == kind).map(x);
        for (point, x) in self.points.iter_mut().zip(xs) {
            point.0 = x;
        }
        self
    }
}

/// Everything a sweep produced.
#[derive(Debug, Clone)]
pub struct SweepOutput {
    /// One report per (policy, timeout).
    pub reports: Vec<Report>,
    /// The reports as CSV.
    pub csv: String,
    /// Named SVG charts: (file stem, document).
    pub charts: Vec<(String, String)>,
}

/// Runs `base` with a fixed timeout and with renewal for every timeout in
/// `timeouts`.
pub fn sweep(base: &Scenario, timeouts: &[Duration]) -> Result<SweepOutput, String> {
    let mut reports = Vec::new();
    for &timeout in timeouts {
        for policy in [Policy::Fixed { timeout }, renewing_policy(timeout)] {
            let scenario = Scenario { policy, ..base.clone() };
            reports.push(simulate(&scenario)?);
        }
    }
    let mut csv = String::from(Report::csv_header());
    csv.push('\n');
    for r in &reports {
        csv.push_str(&r.csv_row());
        csv.push('\n');
    }
    let series = |kind: &str, label: &str, y: &dyn Fn(&Report) -> f64| Series {
        label: label.to_string(),
        points: reports.iter().filter(|r| r.policy_kind == kind).map(|r| (r.timeout_secs, y(r))).collect(),
    };
    let wasted = |r: &Report| 100.0 * r.wasted_worker_secs / r.busy_worker_secs.max(1e-9);
    let charts = vec![
        (
            "duplicates-vs-timeout".to_string(),
            Chart {
                title: format!("{}: duplicate executions vs timeout", base.name),
                x_label: "visibility timeout (s, log scale)".into(),
                y_label: "attempts overlapping another attempt".into(),
                log_x: true,
                series: vec![
                    series("fixed", "fixed timeout", &|r| r.duplicate_executions as f64),
                    series("renewing", "timeout + renewal", &|r| r.duplicate_executions as f64),
                ],
            }
            .to_svg(),
        ),
        (
            "recovery-vs-timeout".to_string(),
            Chart {
                title: format!("{}: crash recovery stall vs timeout", base.name),
                x_label: "visibility timeout (s, log scale)".into(),
                y_label: "crash to eligible again (lease stall), p50 (s)".into(),
                log_x: true,
                series: vec![
                    series("fixed", "fixed timeout", &|r| r.recovery.p50),
                    series("renewing", "timeout + renewal", &|r| r.recovery.p50),
                ],
            }
            .to_svg(),
        ),
        (
            "tradeoff".to_string(),
            Chart {
                title: format!("{}: duplicates vs crash stall, one point per timeout", base.name),
                x_label: "crash to eligible again, p50 (s)".into(),
                y_label: "duplicate executions".into(),
                log_x: false,
                series: vec![
                    series("fixed", "fixed timeout", &|r| r.duplicate_executions as f64).with_x(
                        &reports,
                        "fixed",
                        &|r| r.recovery.p50,
                    ),
                    series("renewing", "timeout + renewal", &|r| r.duplicate_executions as f64).with_x(
                        &reports,
                        "renewing",
                        &|r| r.recovery.p50,
                    ),
                ],
            }
            .to_svg(),
        ),
        (
            "wasted-vs-timeout".to_string(),
            Chart {
                title: format!("{}: wasted worker time vs timeout", base.name),
                x_label: "visibility timeout (s, log scale)".into(),
                y_label: "wasted worker time (% of busy time)".into(),
                log_x: true,
                series: vec![
                    series("fixed", "fixed timeout", &wasted),
                    series("renewing", "timeout + renewal", &wasted),
                ],
            }
            .to_svg(),
        ),
    ];
    Ok(SweepOutput { reports, csv, charts })
}
