//! A sweep over timeouts for both policies: the trade-off as a CSV and charts.
//!
//! Invariant: every point of every chart is one `simulate` run of the same
//! workload and seed, differing only in the policy, so the curves are
//! comparable.

use std::fmt::Write as _;
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
        keeper: LeasePolicy::default()
            .renew_after(0.5)
            .min_margin(Duration::from_secs(2))
            .max_total(Duration::from_secs(4 * 3600)),
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

/// How many duplicate executions more than the fewest a run may have and
/// still count as "fewest" for the recommendation: runs within this many
/// (or 1% of the fewest, if more) are told apart by their crash stall.
pub const DUPLICATE_TOLERANCE: u64 = 2;

/// The sweep's advice: which run to start from, and the best one without
/// renewal for callers that cannot run a lease keeper.
#[derive(Debug, Clone, PartialEq)]
pub struct Recommendation {
    /// Index in `SweepOutput::reports` of the recommended run.
    pub best: usize,
    /// Index of the best fixed-timeout run, by the same rule.
    pub best_fixed: Option<usize>,
}

impl SweepOutput {
    /// The printed summary: a header line, then one line per run, in the
    /// order of `reports`. Deterministic (no wall time), so the docs can
    /// quote it.
    pub fn table(&self) -> String {
        let mut out = format!(
            "{:<9} {:>7}  {:>10}  {:>6}  {:>16}  {:>11}  {:>11}  {}\n",
            "policy", "timeout", "duplicates", "wasted", "crash stall p50", "e2e p99", "dlq healthy", "unfinished"
        );
        for r in &self.reports {
            let _ = writeln!(
                out,
                "{:<9} {:>6.0}s  {:>10}  {:>5.1}%  {:>15.1}s  {:>10.1}s  {:>11}  {}",
                r.policy_kind,
                r.timeout_secs,
                r.duplicate_executions,
                wasted_percent(r),
                r.recovery.p50,
                r.end_to_end.p99,
                r.dead_lettered_healthy,
                r.unfinished
            );
        }
        out
    }

    /// The recommendation, `None` for an empty sweep. The rule: among runs
    /// that dead-lettered no healthy message (all runs if none qualifies),
    /// take those with the fewest duplicate executions (within
    /// [`DUPLICATE_TOLERANCE`] or 1%), then the shortest crash stall (p50),
    /// then the shorter timeout.
    pub fn recommendation(&self) -> Option<Recommendation> {
        let all: Vec<usize> = (0..self.reports.len()).collect();
        let best = pick(&self.reports, &all)?;
        let fixed: Vec<usize> = all.iter().copied().filter(|&i| self.reports[i].policy_kind == "fixed").collect();
        Some(Recommendation { best, best_fixed: pick(&self.reports, &fixed) })
    }

    /// The recommendation as sentences (empty for an empty sweep).
    pub fn recommendation_text(&self) -> String {
        let Some(rec) = self.recommendation() else {
            return String::new();
        };
        let describe = |r: &Report| {
            format!(
                "{}: {} duplicate executions, {:.1}% of worker time wasted, crash stall p50 {:.1} s",
                if r.policy_kind == "renewing" {
                    format!("a {:.0} s timeout renewed by a lease keeper", r.timeout_secs)
                } else {
                    format!("a fixed {:.0} s timeout", r.timeout_secs)
                },
                r.duplicate_executions,
                wasted_percent(r),
                r.recovery.p50
            )
        };
        let best = &self.reports[rec.best];
        let mut text = format!(
            "recommendation: {} (fewest duplicates, within {DUPLICATE_TOLERANCE} or 1%, then the shortest crash stall)\n",
            describe(best)
        );
        if let Some(fixed) = rec.best_fixed.filter(|&i| i != rec.best) {
            let _ = writeln!(text, "without renewal: {}", describe(&self.reports[fixed]));
        }
        text
    }
}

fn wasted_percent(r: &Report) -> f64 {
    100.0 * r.wasted_worker_secs / r.busy_worker_secs.max(1e-9)
}

/// The recommendation rule over the runs at `candidates`.
fn pick(reports: &[Report], candidates: &[usize]) -> Option<usize> {
    let healthy: Vec<usize> = candidates.iter().copied().filter(|&i| reports[i].dead_lettered_healthy == 0).collect();
    let pool = if healthy.is_empty() { candidates } else { &healthy[..] };
    let fewest = pool.iter().map(|&i| reports[i].duplicate_executions).min()?;
    let limit = fewest.saturating_add(DUPLICATE_TOLERANCE.max(fewest / 100));
    pool.iter().copied().filter(|&i| reports[i].duplicate_executions <= limit).min_by(|&a, &b| {
        let (a, b) = (&reports[a], &reports[b]);
        a.recovery.p50.total_cmp(&b.recovery.p50).then(a.timeout_secs.total_cmp(&b.timeout_secs))
    })
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
    let wasted = |r: &Report| wasted_percent(r);
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
