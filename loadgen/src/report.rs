//! Runs as JSON lines, and the report made of them: throughput and latency
//! tables with ranges over the alternating rounds, ratios of leaseq-server to
//! the fastest peer paired within each round (same machine, same minute),
//! the targets as met or missed, named ratios between two systems
//! paired the same way (`--ratio a/b`), failover times, and a chart.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::chart;
use crate::error::LoadError;
use crate::failover::FailoverResult;
use crate::recorder::{Percentiles, Recorder};
use crate::workload::Workload;

/// One run's outcome.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RunResult {
    pub(crate) label: String,
    pub(crate) protocol: String,
    pub(crate) round: u32,
    pub(crate) connections: usize,
    pub(crate) batch: usize,
    pub(crate) body_size: usize,
    /// Open-loop rate in messages per second; `None` for the closed loop.
    pub(crate) rate: Option<f64>,
    pub(crate) duration_s: f64,
    pub(crate) sent: u64,
    pub(crate) acked: u64,
    pub(crate) empty_receives: u64,
    /// Deletes refused because the lease was lost (the message comes again).
    #[serde(default)]
    pub(crate) lost_leases: u64,
    /// Messages sent, received and deleted per second.
    pub(crate) msgs_per_s: f64,
    pub(crate) operations: BTreeMap<String, Percentiles>,
}

impl RunResult {
    pub(crate) fn new(label: &str, protocol: &str, round: u32, workload: &Workload, recorder: &Recorder) -> Self {
        let seconds = workload.duration.as_secs_f64();
        RunResult {
            label: label.to_string(),
            protocol: protocol.to_string(),
            round,
            connections: workload.connections,
            batch: workload.batch,
            body_size: workload.body_size,
            rate: workload.rate,
            duration_s: seconds,
            sent: recorder.sent,
            acked: recorder.acked,
            empty_receives: recorder.empty_receives,
            lost_leases: recorder.lost_leases,
            msgs_per_s: recorder.acked as f64 / seconds,
            operations: recorder.percentiles(),
        }
    }

    /// One line for the terminal.
    pub(crate) fn summary(&self) -> String {
        let mut line = format!(
            "{} batch {} {}: {:.0} msg/s acked ({} sent, {} empty receives, {} lost leases)",
            self.label,
            self.batch,
            self.rate.map_or("closed loop".to_string(), |r| format!("at {r:.0} msg/s")),
            self.msgs_per_s,
            self.sent,
            self.empty_receives,
            self.lost_leases
        );
        for (op, p) in &self.operations {
            let _ = write!(line, "; {op} p50 {:.0} p99 {:.0} p99.9 {:.0} us", p.p50_us, p.p99_us, p.p999_us);
        }
        line
    }

    fn mode(&self) -> Mode {
        Mode { batch: self.batch, rate: self.rate.map(|r| r.round() as u64) }
    }
}

/// What a run measured: batch size and open- or closed-loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Mode {
    batch: usize,
    rate: Option<u64>,
}

impl Mode {
    fn name(&self) -> String {
        let shape = if self.batch == 1 { "single".to_string() } else { format!("batch {}", self.batch) };
        match self.rate {
            None => shape,
            Some(rate) => format!("{shape} at {} msg/s", rate),
        }
    }
}

/// Flags of `leaseq-loadgen report`.
#[derive(Debug, clap::Args)]
pub(crate) struct ReportArgs {
    /// JSON-lines files written by `run --json`.
    #[arg(long, required = true)]
    input: Vec<PathBuf>,
    /// The label of the system under test; every other label is a peer.
    #[arg(long, default_value = "leaseq-server")]
    subject: String,
    /// Write the markdown here (else stdout).
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Write the throughput chart (SVG) here.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// The single-message cycles/s target.
    #[arg(long, default_value_t = 30_000.0)]
    single_target: f64,
    /// The batch-of-10 msg/s target.
    #[arg(long, default_value_t = 100_000.0)]
    batch_target: f64,
    /// The p99 target in microseconds, at the open-loop rate.
    #[arg(long, default_value_t = 1000.0)]
    p99_target_us: f64,
    /// Leave out the issue-19 targets and the ratio to the fastest peer
    /// (they are about the in-memory server).
    #[arg(long)]
    no_targets: bool,
    /// `a/b` or `a/b>=x`: a's msg/s over b's, paired by round, per mode;
    /// with a target, met or missed. Repeatable.
    #[arg(long)]
    ratio: Vec<String>,
    /// JSON-lines files written by `failover --json`.
    #[arg(long)]
    failover: Vec<PathBuf>,
}

/// A `--ratio` flag: numerator, denominator and an optional least value.
#[derive(Debug, Clone, PartialEq)]
struct RatioSpec {
    numerator: String,
    denominator: String,
    at_least: Option<f64>,
}

impl std::str::FromStr for RatioSpec {
    type Err = LoadError;

    fn from_str(text: &str) -> Result<Self, LoadError> {
        let bad = || LoadError::new(format!("--ratio '{text}' is not a/b or a/b>=x (labels, x a number)"));
        let (pair, at_least) = match text.split_once(">=") {
            Some((pair, x)) => (pair, Some(x.trim().parse::<f64>().map_err(|_| bad())?)),
            None => (text, None),
        };
        let (numerator, denominator) = pair.split_once('/').ok_or_else(bad)?;
        let (numerator, denominator) = (numerator.trim(), denominator.trim());
        if numerator.is_empty() || denominator.is_empty() {
            return Err(bad());
        }
        Ok(RatioSpec { numerator: numerator.to_string(), denominator: denominator.to_string(), at_least })
    }
}

fn load<T: serde::de::DeserializeOwned>(paths: &[PathBuf]) -> Result<Vec<T>, LoadError> {
    let mut runs = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(path)
            .map_err(|e| LoadError::new(format!("cannot read {}: {e}", path.display())))?;
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            runs.push(serde_json::from_str(line)?);
        }
    }
    Ok(runs)
}

/// Min, median and max.
#[derive(Debug, Clone, Copy)]
struct Spread {
    min: f64,
    median: f64,
    max: f64,
}

fn spread(values: &[f64]) -> Option<Spread> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(Spread { min: v[0], median: v[v.len() / 2], max: v[v.len() - 1] })
}

fn rate_text(s: Spread) -> String {
    format!("{} ({}–{})", leaseq_charts::short(s.median), leaseq_charts::short(s.min), leaseq_charts::short(s.max))
}

fn us_text(us: f64) -> String {
    if us >= 10_000.0 {
        format!("{:.0} ms", us / 1000.0)
    } else if us >= 1000.0 {
        format!("{:.1} ms", us / 1000.0)
    } else {
        format!("{us:.0} µs")
    }
}

fn latency_cell(runs: &[&RunResult], op: &str) -> String {
    let pick = |f: fn(&Percentiles) -> f64| {
        spread(&runs.iter().filter_map(|r| r.operations.get(op).map(f)).collect::<Vec<_>>())
    };
    match (pick(|p| p.p50_us), pick(|p| p.p99_us), pick(|p| p.p999_us)) {
        (Some(a), Some(b), Some(c)) => format!("{} / {} / {}", us_text(a.median), us_text(b.median), us_text(c.median)),
        _ => "–".to_string(),
    }
}

/// All runs of one label and mode.
fn group(runs: &[RunResult]) -> BTreeMap<(Mode, String), Vec<&RunResult>> {
    let mut groups: BTreeMap<(Mode, String), Vec<&RunResult>> = BTreeMap::new();
    for run in runs {
        groups.entry((run.mode(), run.label.clone())).or_default().push(run);
    }
    groups
}

/// One round of one mode: the subject's msg/s, and the fastest peer's with its name.
#[derive(Debug, Default)]
struct RoundPair {
    subject: Option<f64>,
    fastest_peer: Option<(f64, String)>,
}

/// Per round, the subject's msg/s over the fastest peer's in the same mode.
fn ratios(runs: &[RunResult], subject: &str, mode: Mode) -> (Vec<f64>, Option<String>) {
    let mut by_round: BTreeMap<u32, RoundPair> = BTreeMap::new();
    for run in runs.iter().filter(|r| r.mode() == mode) {
        let entry = by_round.entry(run.round).or_default();
        if run.label == subject {
            entry.subject = Some(run.msgs_per_s);
        } else if entry.fastest_peer.as_ref().is_none_or(|(best, _)| run.msgs_per_s > *best) {
            entry.fastest_peer = Some((run.msgs_per_s, run.label.clone()));
        }
    }
    let mut fastest = BTreeMap::<String, usize>::new();
    let values = by_round
        .values()
        .filter_map(|pair| {
            let (theirs, name) = pair.fastest_peer.as_ref()?;
            *fastest.entry(name.clone()).or_default() += 1;
            Some(pair.subject? / theirs)
        })
        .collect();
    (values, fastest.into_iter().max_by_key(|(_, n)| *n).map(|(name, _)| name))
}

/// Per round in which both ran, `numerator`'s msg/s over `denominator`'s.
fn paired(runs: &[RunResult], numerator: &str, denominator: &str, mode: Mode) -> Vec<f64> {
    let mut by_round: BTreeMap<u32, (Option<f64>, Option<f64>)> = BTreeMap::new();
    for run in runs.iter().filter(|r| r.mode() == mode) {
        let entry = by_round.entry(run.round).or_default();
        if run.label == numerator {
            entry.0 = Some(run.msgs_per_s);
        } else if run.label == denominator {
            entry.1 = Some(run.msgs_per_s);
        }
    }
    by_round.values().filter_map(|&(a, b)| Some(a? / b?)).collect()
}

fn render_ratios(md: &mut String, runs: &[RunResult], specs: &[RatioSpec]) {
    let _ = writeln!(md, "\nRatios of msg/s, paired by round (same machine, same minutes), median (min–max):\n");
    for spec in specs {
        for mode in [Mode { batch: 1, rate: None }, Mode { batch: 10, rate: None }] {
            let values = paired(runs, &spec.numerator, &spec.denominator, mode);
            let head = format!("- {} / {}, {}", spec.numerator, spec.denominator, mode.name());
            let Some(s) = spread(&values) else {
                let missing = [&spec.numerator, &spec.denominator]
                    .into_iter()
                    .filter(|label| !runs.iter().any(|r| &r.label == *label && r.mode() == mode))
                    .map(String::as_str)
                    .collect::<Vec<_>>();
                let why = if missing.is_empty() {
                    "never in the same round".to_string()
                } else {
                    missing.join(", ") + " not run"
                };
                let _ = writeln!(md, "{head}: – ({why})");
                continue;
            };
            let mut line =
                format!("{head}: {:.2}x ({:.2}–{:.2}x over {} rounds)", s.median, s.min, s.max, values.len());
            if let Some(x) = spec.at_least {
                let _ = write!(line, "; at least {x}x in every round: {}", verdict(s.min >= x));
            }
            let _ = writeln!(md, "{line}");
        }
    }
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms_cell(values: &[f64]) -> String {
    let mut v: Vec<f64> = values.to_vec();
    if v.is_empty() {
        return "–".to_string();
    }
    v.sort_by(f64::total_cmp);
    let ms = |x: f64| format!("{x:.0}");
    format!("{} / {} / {} ms", ms(percentile(&v, 50.0)), ms(percentile(&v, 99.0)), ms(v[v.len() - 1]))
}

fn render_failover(md: &mut String, kills: &[FailoverResult]) {
    let _ = writeln!(
        md,
        "\nFailover: the leader killed (SIGKILL) under a light load; time from the kill to the first full cycle \
         (send confirmed, a message received) through a surviving node, and until every connection had one. \
         p50 / p99 / max over the kills (nearest rank: with few kills p99 is the largest).\n"
    );
    let _ = writeln!(md, "| system | kills | first cycle | every connection | kills never recovered |");
    let _ = writeln!(md, "| --- | ---: | ---: | ---: | ---: |");
    let mut labels: Vec<&str> = Vec::new();
    for kill in kills {
        if !labels.contains(&kill.label.as_str()) {
            labels.push(&kill.label);
        }
    }
    for label in labels {
        let mine: Vec<&FailoverResult> = kills.iter().filter(|k| k.label == label).collect();
        let first: Vec<f64> = mine.iter().filter_map(|k| k.first_ms).collect();
        let all: Vec<f64> = mine.iter().filter_map(|k| k.all_ms).collect();
        let never = mine.iter().filter(|k| k.first_ms.is_none()).count();
        let _ = writeln!(md, "| {label} | {} | {} | {} | {never} |", mine.len(), ms_cell(&first), ms_cell(&all));
    }
}

fn verdict(met: bool) -> &'static str {
    if met { "**met**" } else { "**missed**" }
}

fn render(args: &ReportArgs, runs: &[RunResult], ratios: &[RatioSpec], kills: &[FailoverResult]) -> String {
    let groups = group(runs);
    let rounds = runs.iter().map(|r| r.round).collect::<std::collections::BTreeSet<_>>().len();
    let mut md = String::new();
    let connections = runs.first().map_or(0, |r| r.connections);
    let body = runs.first().map_or(0, |r| r.body_size);
    let _ = writeln!(
        md,
        "Each cell: the median of {rounds} alternating rounds, msg/s with (min–max). A message counts once it \
         was sent, received and deleted (acked) in the measured window. {connections} keep-alive connections, \
         {body}-byte bodies. Latencies per request: p50 / p99 / p99.9, medians over the rounds; empty receives and lost leases \
         (deletes refused because the lease had run out) are means per run.\n"
    );
    let _ = writeln!(
        md,
        "| server | mode | msg/s | send | receive | delete (ack) | empty receives, lost leases | schedule lag p99 |"
    );
    let _ = writeln!(md, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for ((mode, label), group) in &groups {
        let throughput = spread(&group.iter().map(|r| r.msgs_per_s).collect::<Vec<_>>());
        let rounds = group.len().max(1) as u64;
        let empty = group.iter().map(|r| r.empty_receives).sum::<u64>() / rounds;
        let lost = group.iter().map(|r| r.lost_leases).sum::<u64>() / rounds;
        let mut row = format!(
            "| {label} | {} | {} | {} | {} | {} | {empty}, {lost} |",
            mode.name(),
            throughput.map_or("–".to_string(), rate_text),
            latency_cell(group, "send"),
            latency_cell(group, "receive"),
            latency_cell(group, "delete"),
        );
        if mode.rate.is_some() {
            let lag = spread(
                &group.iter().filter_map(|r| r.operations.get("schedule_lag").map(|p| p.p99_us)).collect::<Vec<_>>(),
            );
            let _ = write!(row, " {} |", lag.map_or("–".to_string(), |lag| us_text(lag.median)));
        } else {
            row.push_str(" closed loop |");
        }
        let _ = writeln!(md, "{row}");
    }

    if !args.no_targets {
        render_targets(&mut md, args, runs);
    }
    if !ratios.is_empty() {
        render_ratios(&mut md, runs, ratios);
    }
    if !kills.is_empty() {
        render_failover(&mut md, kills);
    }
    md
}

fn render_targets(md: &mut String, args: &ReportArgs, runs: &[RunResult]) {
    let _ = writeln!(md, "\nTargets (leaseq-server = `{}`):\n", args.subject);
    let subject_spread = |mode: Mode| {
        spread(
            &runs
                .iter()
                .filter(|r| r.label == args.subject && r.mode() == mode)
                .map(|r| r.msgs_per_s)
                .collect::<Vec<_>>(),
        )
    };
    let single = Mode { batch: 1, rate: None };
    let batch = Mode { batch: 10, rate: None };
    for (mode, target, what) in [
        (batch, args.batch_target, "msg/s with batches of 10"),
        (single, args.single_target, "single-message cycles/s"),
    ] {
        match subject_spread(mode) {
            Some(s) => {
                let _ = writeln!(
                    md,
                    "- at least {} {what}: {} — {} msg/s median, {}–{} over the rounds",
                    leaseq_charts::short(target),
                    verdict(s.min >= target),
                    leaseq_charts::short(s.median),
                    leaseq_charts::short(s.min),
                    leaseq_charts::short(s.max)
                );
            }
            None => {
                let _ = writeln!(md, "- at least {} {what}: not run", leaseq_charts::short(target));
            }
        }
    }
    let open: Vec<&RunResult> = runs.iter().filter(|r| r.label == args.subject && r.rate.is_some()).collect();
    if open.is_empty() {
        let _ = writeln!(md, "- p99 under {} at half load: not run", us_text(args.p99_target_us));
    } else {
        let worst: Vec<f64> = open
            .iter()
            .map(|r| {
                ["send", "receive", "delete"]
                    .iter()
                    .filter_map(|op| r.operations.get(*op).map(|p| p.p99_us))
                    .fold(0.0, f64::max)
            })
            .collect();
        let s = spread(&worst).expect("non-empty");
        let rate = open[0].rate.unwrap_or_default();
        let achieved = spread(&open.iter().map(|r| r.msgs_per_s).collect::<Vec<_>>()).expect("non-empty");
        let _ = writeln!(
            md,
            "- p99 under {} at {} msg/s (batch {}): {} — the slowest operation's p99 is {} median, {}–{} over the \
             rounds; {} msg/s achieved",
            us_text(args.p99_target_us),
            leaseq_charts::short(rate),
            open[0].batch,
            verdict(s.max < args.p99_target_us),
            us_text(s.median),
            us_text(s.min),
            us_text(s.max),
            leaseq_charts::short(achieved.median)
        );
    }
    for (mode, need) in [(batch, 2.0), (single, 1.0)] {
        let (values, fastest) = ratios(runs, &args.subject, mode);
        match (spread(&values), fastest) {
            (Some(s), Some(fastest)) => {
                let _ = writeln!(
                    md,
                    "- ahead of every peer, {}, by at least {need}x: {} — {:.2}x the fastest peer ({fastest}) \
                     median, {:.2}–{:.2}x over the rounds",
                    mode.name(),
                    verdict(s.min >= need && (need > 1.0 || s.min > 1.0)),
                    s.median,
                    s.min,
                    s.max
                );
            }
            _ => {
                let _ = writeln!(md, "- ahead of every peer, {}: no peer ran", mode.name());
            }
        }
    }
}

fn bars(runs: &[RunResult]) -> Vec<chart::BarGroup> {
    let groups = group(runs);
    let mut labels: Vec<String> = Vec::new();
    for run in runs {
        if !labels.contains(&run.label) {
            labels.push(run.label.clone());
        }
    }
    labels
        .into_iter()
        .map(|label| {
            let bar = |mode: Mode| {
                groups.get(&(mode, label.clone())).and_then(|g| {
                    spread(&g.iter().map(|r| r.msgs_per_s).collect::<Vec<_>>()).map(|s| chart::Bar {
                        median: s.median,
                        min: s.min,
                        max: s.max,
                    })
                })
            };
            chart::BarGroup {
                name: label.clone(),
                bars: vec![bar(Mode { batch: 1, rate: None }), bar(Mode { batch: 10, rate: None })],
            }
        })
        .collect()
}

/// `leaseq-loadgen report`.
pub(crate) fn write(args: &ReportArgs) -> Result<(), LoadError> {
    let runs: Vec<RunResult> = load(&args.input)?;
    if runs.is_empty() {
        return Err(LoadError::new("no runs in the input"));
    }
    let ratios = args.ratio.iter().map(|r| r.parse()).collect::<Result<Vec<RatioSpec>, _>>()?;
    let kills: Vec<FailoverResult> = load(&args.failover)?;
    let md = render(args, &runs, &ratios, &kills);
    match &args.markdown {
        Some(path) => std::fs::write(path, &md)?,
        None => print!("{md}"),
    }
    if let Some(path) = &args.svg {
        let svg = chart::grouped_bars(
            "End-to-end msg/s (send + receive + delete), median and range over rounds",
            &["single message", "batches of 10"],
            &bars(&runs),
        );
        std::fs::write(path, svg)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(label: &str, round: u32, batch: usize, msgs_per_s: f64) -> RunResult {
        RunResult {
            label: label.into(),
            protocol: "x".into(),
            round,
            connections: 32,
            batch,
            body_size: 100,
            rate: None,
            duration_s: 5.0,
            sent: 0,
            acked: 0,
            empty_receives: 0,
            lost_leases: 0,
            msgs_per_s,
            operations: BTreeMap::new(),
        }
    }

    #[test]
    fn ratios_pair_rounds_against_the_fastest_peer_of_each_round() {
        let runs = vec![
            run("leaseq-server", 1, 10, 300.0),
            run("a", 1, 10, 100.0),
            run("b", 1, 10, 150.0),
            run("leaseq-server", 2, 10, 200.0),
            run("a", 2, 10, 200.0),
        ];
        let (values, fastest) = ratios(&runs, "leaseq-server", Mode { batch: 10, rate: None });
        assert_eq!(values, vec![2.0, 1.0]);
        assert!(fastest.is_some());
    }

    #[test]
    fn report_says_missed_when_a_round_falls_short() {
        let runs = vec![run("leaseq-server", 1, 10, 120_000.0), run("leaseq-server", 2, 10, 90_000.0)];
        let args = ReportArgs {
            input: vec![],
            subject: "leaseq-server".into(),
            markdown: None,
            svg: None,
            single_target: 30_000.0,
            batch_target: 100_000.0,
            p99_target_us: 1000.0,
            no_targets: false,
            ratio: vec![],
            failover: vec![],
        };
        let md = render(&args, &runs, &[], &[]);
        assert!(md.contains("msg/s with batches of 10: **missed**"), "{md}");
    }

    #[test]
    fn ratio_flags_parse_with_and_without_a_target() {
        let spec: RatioSpec = "leaseq-3/leaseq-1>=0.5".parse().unwrap();
        assert_eq!(
            spec,
            RatioSpec { numerator: "leaseq-3".into(), denominator: "leaseq-1".into(), at_least: Some(0.5) }
        );
        assert_eq!("a/b".parse::<RatioSpec>().unwrap().at_least, None);
        for bad in ["ab", "/b", "a/", "a/b>=x"] {
            assert!(bad.parse::<RatioSpec>().is_err(), "{bad}");
        }
    }

    #[test]
    fn named_ratios_pair_rounds_and_say_what_did_not_run() {
        let runs = vec![
            run("a", 1, 10, 300.0),
            run("b", 1, 10, 100.0),
            run("a", 2, 10, 100.0),
            run("b", 2, 10, 400.0),
            run("c", 1, 10, 50.0),
        ];
        assert_eq!(paired(&runs, "a", "b", Mode { batch: 10, rate: None }), vec![3.0, 0.25]);
        let args = ReportArgs {
            input: vec![],
            subject: "a".into(),
            markdown: None,
            svg: None,
            single_target: 1.0,
            batch_target: 1.0,
            p99_target_us: 1.0,
            no_targets: true,
            ratio: vec![],
            failover: vec![],
        };
        let specs = ["a/b>=0.5".parse().unwrap(), "x/b".parse().unwrap()];
        let md = render(&args, &runs, &specs, &[]);
        assert!(!md.contains("Targets"), "{md}");
        // Two rounds: the median is the upper one, as in every other cell.
        assert!(
            md.contains("- a / b, batch 10: 3.00x (0.25–3.00x over 2 rounds)") && md.contains("**missed**"),
            "{md}"
        );
        assert!(md.contains("- x / b, batch 10: – (x not run)"), "{md}");
        assert!(md.contains("- a / b, single: – (a, b not run)"), "{md}");
    }

    #[test]
    fn failover_percentiles_are_nearest_rank() {
        let kill = |first: Option<f64>| FailoverResult {
            label: "leaseq-3".into(),
            protocol: "sqs".into(),
            round: 1,
            connections: 2,
            killed_pid: 1,
            first_ms: first,
            all_ms: first.map(|f| f + 10.0),
            errors: 0,
            cycles_before: 5,
        };
        let mut md = String::new();
        render_failover(&mut md, &[kill(Some(300.0)), kill(Some(100.0)), kill(Some(200.0)), kill(None)]);
        assert!(md.contains("| leaseq-3 | 4 | 200 / 300 / 300 ms | 210 / 310 / 310 ms | 1 |"), "{md}");
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 50.0), 2.0);
    }
}
