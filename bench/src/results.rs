//! Figures of one run: the table rows (engine, baseline, ratio) and the
//! per-scenario detail the report draws its charts from.
//!
//! Invariant: every row carries both figures measured in this process, and
//! its ratio is always engine/baseline with a stated direction, so "better"
//! never depends on the reader guessing the unit.

use serde_json::{Map, Value, json};

/// Which way a figure improves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Better {
    Higher,
    Lower,
}

/// One line of the table.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub(crate) scenario: String,
    pub(crate) metric: String,
    pub(crate) unit: &'static str,
    pub(crate) engine: f64,
    pub(crate) baseline: Option<f64>,
    pub(crate) better: Better,
}

impl Row {
    /// engine/baseline.
    pub(crate) fn ratio(&self) -> Option<f64> {
        self.baseline.filter(|b| *b > 0.0).map(|b| self.engine / b)
    }
}

/// Everything a run measured.
#[derive(Debug, Default)]
pub(crate) struct Results {
    pub(crate) rows: Vec<Row>,
    pub(crate) detail: Map<String, Value>,
    pub(crate) targets: Vec<Value>,
}

impl Results {
    pub(crate) fn row(
        &mut self,
        scenario: &str,
        metric: impl Into<String>,
        unit: &'static str,
        engine: f64,
        baseline: Option<f64>,
        better: Better,
    ) {
        let row = Row { scenario: scenario.into(), metric: metric.into(), unit, engine, baseline, better };
        println!("{}", format_row(&row));
        self.rows.push(row);
    }

    pub(crate) fn detail(&mut self, scenario: &str, value: Value) {
        self.detail.insert(scenario.to_string(), value);
    }

    /// A target from the issue: what was required, what was measured, met or not.
    pub(crate) fn target(&mut self, name: &str, required: &str, measured: String, met: bool) {
        self.targets.push(json!({"target": name, "required": required, "measured": measured, "met": met}));
    }

    pub(crate) fn to_json(&self, machine: Value, mode: &str, wall_s: f64) -> Value {
        let rows: Vec<Value> = self
            .rows
            .iter()
            .map(|r| {
                json!({
                    "scenario": r.scenario, "metric": r.metric, "unit": r.unit,
                    "engine": r.engine, "baseline": r.baseline, "ratio": r.ratio(),
                    "better": if r.better == Better::Higher { "higher" } else { "lower" },
                })
            })
            .collect();
        json!({
            "format": "leaseq-bench/1",
            "mode": mode,
            "wall_seconds": wall_s,
            "machine": machine,
            "rows": rows,
            "targets": self.targets,
            "scenarios": self.detail,
        })
    }
}

pub(crate) fn header() -> String {
    format!("{:<12} {:<44} {:>14} {:>14} {:>8}  {}", "scenario", "metric", "engine", "baseline", "ratio", "unit")
}

pub(crate) fn format_row(r: &Row) -> String {
    let baseline = r.baseline.map_or_else(|| "-".to_string(), human);
    let ratio = r.ratio().map_or_else(|| "-".to_string(), |x| format!("{x:.2}x"));
    let arrow = if r.better == Better::Higher { "(higher is better)" } else { "(lower is better)" };
    format!(
        "{:<12} {:<44} {:>14} {:>14} {:>8}  {} {}",
        r.scenario,
        r.metric,
        human(r.engine),
        baseline,
        ratio,
        r.unit,
        arrow
    )
}

/// A number with thousands grouping or a few significant digits.
pub(crate) fn human(x: f64) -> String {
    if x.abs() >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x.abs() >= 1e4 {
        format!("{:.1}k", x / 1e3)
    } else if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}
