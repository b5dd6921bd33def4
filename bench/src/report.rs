//! `leaseq-bench report`: the JSON of a run as docs/benchmarks.md, with SVG
//! charts written beside it.
//!
//! Invariant: every number on the page comes from the JSON file; the page
//! says which machine and commit produced it and how to reproduce it.

use std::fmt::Write;
use std::path::Path;

use serde_json::Value;

use leaseq_charts::{Labels, Scale, Series, line_chart, short};

const ENGINE: &str = "#1f77b4";
const BASELINE: &str = "#d62728";

pub(crate) fn main(args: &[String]) -> Result<(), String> {
    let json_path = crate::flag_value(args, "--json")?.unwrap_or("target/leaseq-bench.json");
    let out = crate::flag_value(args, "--out")?.unwrap_or("docs/benchmarks.md");
    let notes = match crate::flag_value(args, "--notes")? {
        Some(path) => Some(std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?),
        None => None,
    };
    let run = read_run(json_path)?;
    let earlier = read_runs(crate::flag_value(args, "--also")?)?;
    let out = Path::new(out);
    let dir = out.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let charts = dir.join("benchmarks");
    std::fs::create_dir_all(&charts).map_err(|e| format!("cannot create {}: {e}", charts.display()))?;
    let written = write_charts(&charts, &run, "")?;
    let mut elsewhere = Vec::new();
    for source in paths(crate::flag_value(args, "--elsewhere")?) {
        let run = read_run(source)?;
        // Named after the file, so the charts of several machines sit side by side.
        let stem = Path::new(source).file_stem().and_then(|s| s.to_str()).unwrap_or("elsewhere");
        let prefix = format!("{stem}-");
        let charts = write_charts(&charts, &run, &prefix)?;
        elsewhere.push(Elsewhere { run, source: source.to_string(), prefix, charts });
    }
    let mut page = page(&run, &earlier, &written, &elsewhere);
    if let Some(notes) = notes {
        page.push('\n');
        page.push_str(&notes);
    }
    std::fs::write(out, page).map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    let count = written.len() + elsewhere.iter().map(|e| e.charts.len()).sum::<usize>();
    println!("wrote {} and {count} chart(s) in {}", out.display(), charts.display());
    Ok(())
}

/// A run from another machine shown on the page after the main one: its
/// JSON, the path it came from, and the charts written for it (as
/// `{prefix}{chart}.svg`).
struct Elsewhere {
    run: Value,
    source: String,
    prefix: String,
    charts: Vec<&'static str>,
}

/// Writes a run's charts into `dir` as `{prefix}{chart}.svg`; returns the
/// charts written.
fn write_charts(dir: &Path, run: &Value, prefix: &str) -> Result<Vec<&'static str>, String> {
    let mut written = Vec::new();
    for (chart, svg) in charts_of(run) {
        let path = dir.join(format!("{prefix}{chart}.svg"));
        std::fs::write(&path, svg).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        written.push(chart);
    }
    Ok(written)
}

/// The paths of a comma-separated list (none without a list).
fn paths(list: Option<&str>) -> impl Iterator<Item = &str> {
    list.unwrap_or("").split(',').filter(|p| !p.is_empty())
}

/// The runs of a comma-separated list of JSON paths.
fn read_runs(list: Option<&str>) -> Result<Vec<Value>, String> {
    paths(list).map(read_run).collect()
}

/// One run's JSON, which must hold a targets list (the report's first table).
fn read_run(path: &str) -> Result<Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    let run: Value = serde_json::from_str(&text).map_err(|e| format!("{path} is not JSON: {e}"))?;
    if !run["targets"].is_array() {
        return Err(format!("{path} has no targets: not the JSON of a leaseq-bench run"));
    }
    Ok(run)
}

/// The targets of every run side by side, the page's run last: each cell the
/// measured figure (without its parenthesised detail) and whether it met the
/// target, then in how many runs it was met. A target a run lacks shows "-".
fn targets_across_runs(s: &mut String, runs: &[&Value]) {
    let _ = writeln!(
        s,
        "\n### The targets in each run\n\nEach column is one full run, oldest first, with its commit, CPU and date \
         (UTC); the last is the run this page shows. A target met in some runs and missed in others on one \
         machine is within that machine's drift from run to run.\n"
    );
    let mut header = String::from("| target | required |");
    let mut rule = String::from("|---|---|");
    for (i, run) in runs.iter().enumerate() {
        let m = &run["machine"];
        // Runs may come from different days and machines: the column names both.
        let date = m["date"].as_str().and_then(|d| d.get(5..16)).map(|d| d.replace('T', " "));
        let _ = write!(
            header,
            " run {} (`{}`, {}, {}) |",
            i + 1,
            m["commit"].as_str().unwrap_or("?").chars().take(7).collect::<String>(),
            m["cpu_model"].as_str().unwrap_or("?"),
            date.as_deref().unwrap_or("?")
        );
        rule.push_str("---|");
    }
    let _ = writeln!(s, "{header} met in |\n{rule}---|");
    for t in runs.last().map(|r| &r["targets"]).and_then(Value::as_array).into_iter().flatten() {
        let name = t["target"].as_str().unwrap_or("");
        let mut row = format!("| {name} | {} |", t["required"].as_str().unwrap_or(""));
        let mut met = 0;
        for run in runs {
            let found = run["targets"].as_array().into_iter().flatten().find(|o| o["target"] == name);
            match found {
                Some(o) => {
                    let measured = o["measured"].as_str().unwrap_or("?");
                    let short = measured.split(" (").next().unwrap_or(measured);
                    met += usize::from(o["met"] == true);
                    let _ = write!(row, " {short}{} |", if o["met"] == true { "" } else { " (missed)" });
                }
                None => row.push_str(" - |"),
            }
        }
        let _ = writeln!(s, "{row} {met} of {} |", runs.len());
    }
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

fn charts_of(run: &Value) -> Vec<(&'static str, String)> {
    let mut charts = Vec::new();
    let scenarios = &run["scenarios"];
    if let Some(points) = scenarios["scaling"]["points"].as_array() {
        let series = |who: &str, color| Series {
            name: who.to_string(),
            color,
            dashed: who == "baseline",
            points: points.iter().map(|p| (f(&p["threads"]), f(&p[who]))).collect(),
        };
        let threads: Vec<f64> = points.iter().map(|p| f(&p["threads"])).collect();
        let svg = line_chart(
            &Labels { title: "Full cycles (send, receive, ack) vs threads", x: "threads", y: "cycles/s" },
            &[series("engine", ENGINE), series("baseline", BASELINE)],
            Scale::Linear,
            Scale::Linear,
            &|v| format!("{v:.0}"),
            Some(&threads),
        );
        charts.push(("scaling", svg));
    }
    let latency = &scenarios["latency"];
    if latency.is_object() {
        let mut series = Vec::new();
        for (kind, color_e, color_b) in
            [("receive", ENGINE, BASELINE), ("ack", "#2ca02c", "#ff7f0e"), ("end_to_end", "#9467bd", "#8c564b")]
        {
            for (who, color) in [("engine", color_e), ("baseline", color_b)] {
                let Some(points) = latency[who]["curves"][kind].as_array() else { continue };
                series.push(Series {
                    name: format!("{who} {kind}"),
                    color,
                    dashed: who == "baseline",
                    points: points.iter().map(|p| (1.0 / (1.0 - f(&p[0]).min(0.999_999)), f(&p[1]).max(1.0))).collect(),
                });
            }
        }
        for (who, color) in [("engine", "#e377c2"), ("baseline", "#7f7f7f")] {
            let Some(points) = latency["one_thread"][who]["curves"]["receive"].as_array() else { continue };
            series.push(Series {
                name: format!("{who} receive, one thread"),
                color,
                dashed: who == "baseline",
                points: points.iter().map(|p| (1.0 / (1.0 - f(&p[0]).min(0.999_999)), f(&p[1]).max(1.0))).collect(),
            });
        }
        let svg = line_chart(
            &Labels { title: "Open-loop latency percentiles (half saturation)", x: "percentile", y: "nanoseconds" },
            &series,
            Scale::Log,
            Scale::Log,
            &|v| match v.log10().round() as i32 {
                0 => "p0".into(),
                1 => "p90".into(),
                2 => "p99".into(),
                3 => "p99.9".into(),
                4 => "p99.99".into(),
                5 => "p99.999".into(),
                _ => "max".into(),
            },
            None,
        );
        charts.push(("latency", svg));
    }
    if let Some(points) = scenarios["expiry"]["points"].as_array() {
        let mut series = Vec::new();
        for (who, kind, color, dashed) in [
            ("engine", "same", ENGINE, false),
            ("engine", "spread", "#17becf", false),
            ("engine", "wheel", "#9467bd", false),
            ("baseline", "same", BASELINE, true),
            ("baseline", "spread", "#ff7f0e", true),
        ] {
            series.push(Series {
                name: format!("{who}, {}", if kind == "wheel" { "same deadline, via the wheel" } else { kind }),
                color,
                dashed,
                points: points
                    .iter()
                    .filter(|p| p["deadlines"] == kind)
                    .map(|p| (f(&p["in_flight"]), f(&p[who]["ns_per_expiry"])))
                    .collect(),
            });
        }
        let svg = line_chart(
            &Labels { title: "Cost per expiry vs leases in flight", x: "leases in flight", y: "ns per expiry" },
            &series,
            Scale::Log,
            Scale::Log,
            &short,
            None,
        );
        charts.push(("expiry", svg));
    }
    charts
}

fn page(run: &Value, earlier: &[Value], charts: &[&str], elsewhere: &[Elsewhere]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Benchmarks\n");
    let _ = writeln!(
        s,
        "Every figure below was measured by `leaseq-bench` (bench/) in **one process**, on the engine and on a \
         hand-written Mutex baseline (`bench/src/baseline.rs`: `VecDeque` ready queue, `BinaryHeap` of deadlines \
         with lazy deletion, slab with generations, the same counters, the same receipt semantics). The ratio \
         column is engine/baseline from the same run, engine and baseline alternating in several trials (medians \
         shown): absolute numbers on a shared virtual machine drift from run to run; ratios drift less, but still \
         depend on how much else runs on the machine (see the analysis at the end).\n"
    );
    let _ = writeln!(s, "## Machine and run\n\n{}", machine_summary(run));
    let _ = writeln!(
        s,
        "Reproduce (about 90 s): `cargo run --release -p leaseq-bench -- run --full --json target/leaseq-bench.json`, \
         then `cargo run --release -p leaseq-bench -- report --json target/leaseq-bench.json --out docs/benchmarks.md \
         --notes docs/benchmarks/analysis.md` (add `--also a.json,b.json` with earlier runs' JSON for the table of \
         targets in each run, `--elsewhere c.json` for runs on other machines). The JSON of the run shown here is \
         `docs/benchmarks/run.json`, that of the earlier runs in the table `docs/benchmarks/run-N.json`. \
         Micro-benchmarks (criterion): `cargo bench -p leaseq-bench`. CI runs `bench/ci.sh` (smoke sizes only).\n"
    );
    let _ = writeln!(s, "## Targets\n");
    targets_table(&mut s, run);
    if !earlier.is_empty() {
        let runs: Vec<&Value> = earlier.iter().chain(std::iter::once(run)).collect();
        targets_across_runs(&mut s, &runs);
    }
    chart_figures(&mut s, charts, "");
    let _ = writeln!(s, "\n## All figures\n");
    figures_table(&mut s, run);
    for other in elsewhere {
        let m = &other.run["machine"];
        let _ = writeln!(
            s,
            "\n## On another machine: {} cores, {}\n\nA run of {} (`{}`) on another machine: the targets are set \
             for a two-core machine, so they are shown here for comparison, not as its verdict.\n\n{}",
            m["cores"],
            m["cpu_model"].as_str().unwrap_or("?"),
            other.run["scenarios"]
                .as_object()
                .map_or_else(|| "?".into(), |o| o.keys().cloned().collect::<Vec<_>>().join(", ")),
            other.source,
            machine_summary(&other.run)
        );
        targets_table(&mut s, &other.run);
        chart_figures(&mut s, &other.charts, &other.prefix);
        let _ = writeln!(s, "\n<details><summary>All figures of this run</summary>\n");
        figures_table(&mut s, &other.run);
        let _ = writeln!(s, "\n</details>");
    }
    let _ = writeln!(s, "\n## Method\n");
    let _ = writeln!(
        s,
        "- **scaling**: T threads, each a loop of send, receive(1), ack of one 16-byte message; the engine's queue \
         has T shards (each thread's home shard; receive steals from the others when its own is empty).\n\
         - **cycles**: independent cycles: T threads (1, 2) each loop send, receive(1), ack of its own 16-byte \
         message on one shared queue with a 600 s lease (the engine's queue with its default shards, one per core), \
         on the engine, the full-contract baseline and the lean baseline (`bench/src/lean_baseline.rs`: a \
         `parking_lot::Mutex` over a slab with generations, a `VecDeque` of ready slots and a `BinaryHeap` of \
         deadlines cancelled lazily by generation; no statistics, no receipt tag, expiry applied on receive), the \
         three taking turns in every trial; each row names the baseline its ratio is against.\n\
         - **throughput**: P producer threads send (batch B via `send_batch`), C consumer threads receive up to B \
         and ack (`ack_batch` for B > 1) for a fixed time; capacity 65536 messages, producers yield when full.\n\
         - **latency**: open loop; one producer sends on a fixed schedule at half the engine's measured 1P/1C \
         saturation rate (the same rate for both queues) and every latency is taken from the intended send time, so \
         a stall shows up in every message scheduled during it (no coordinated omission). HdrHistogram, 3 \
         significant digits. receive = receive returned the message − intended send time; ack = the ack call; \
         end_to_end = ack returned − intended send time. The \"one thread\" rows run the same schedule on a \
         single thread that sends each message when its time comes and receives and acks in between, which leaves \
         a core to the rest of the machine.\n\
         - **stalls**: no queue; 1 and then as many threads as cores read the clock in a tight loop for a few \
         seconds, and every gap above 10 µs between two reads counts as a stall of the machine (another process, \
         a kernel thread, the hypervisor). A two-thread open-loop run on two cores meets those stalls in full.\n\
         - **expiry**: `ManualClock`, one shard; N leases in flight with one deadline or 100 deadlines 1 ms apart; \
         the clock's advance (the engine applies due timers as its clock moves, the baseline in its next receive) \
         and one `receive(1)` are timed, after one untimed warm-up round, over as many rounds as make 100,000 \
         expiries. With one deadline the engine's timer entries are still in its lock-free inbox when the clock \
         jumps and go straight to firing; the \"filed in the wheel\" rows first move them into the timing wheel \
         (an untimed probe lease of 1 ms falls due, as the system clock's driver would drain them every tick), \
         so the firing includes the wheel's cascade and its read of each slot's arm. The delay rows use the real clock: a consumer polls while leases of 200–220 ms run out and \
         records deadline → received again. The far-lease rows (real clock) hold N leases of 250 days, past the \
         timing wheel's range at the 1 ms tick (about 208 days), and measure the process's CPU over an idle second \
         and how late a polling consumer receives each of a series of 2 ms leases of other messages again.\n\
         - **extension**: `ManualClock`; some leases renewed every millisecond while others (spread deadlines) \
         run out; the expiry cost is compared with a run without renewals.\n\
         - **memory**: live bytes (a counting wrapper around mimalloc) after sending N messages with static \
         payloads, and after receiving all of them, divided by N; includes the ready queue, the timer \
         inbox/wheel or heap and their growth slack. Retained: live bytes after N send–receive–ack cycles with \
         600 s leases, once the engine's driver has had time to wake, divided by N.\n"
    );
    s
}

/// The bullet list that names a run's machine, commit, length, load and clocks.
fn machine_summary(run: &Value) -> String {
    let m = &run["machine"];
    let load = format!(
        "load average (1, 5, 15 min) {} before and {} after the run",
        m["load_average_before"].as_str().unwrap_or("?"),
        m["load_average_after"].as_str().unwrap_or("?")
    );
    let clock = match m["engine_clock"].as_str() {
        Some("tsc") => {
            "clocks: the engine's `SystemClock` read the calibrated time-stamp counter; the baseline read \
                        `std::time::Instant`, as a hand-written queue would (the scaling table also shows one thread \
                        with the baseline on the engine's clock)"
        }
        Some(_) => "clocks: engine and baseline both read `std::time::Instant` (no usable time-stamp counter here)",
        None => "clocks: not recorded by this run",
    };
    format!(
        "- {} cores, {} ({}), {:.0} GiB; {}\n- {}\n- commit `{}`{}, {} run, {:.0} s, {}\n- {load}\n- {clock}\n",
        m["cores"],
        m["cpu_model"].as_str().unwrap_or("?"),
        if m["virtualised"] == true { "virtual machine" } else { "bare metal" },
        f(&m["memory_gib"]),
        m["os"].as_str().unwrap_or("?"),
        m["rustc"].as_str().filter(|r| r.starts_with("rustc")).unwrap_or("rustc: not recorded"),
        m["commit"].as_str().unwrap_or("?"),
        if m["dirty"] == true { " (with uncommitted changes)" } else { "" },
        run["mode"].as_str().unwrap_or("?"),
        f(&run["wall_seconds"]),
        m["date"].as_str().unwrap_or(""),
    )
}

/// A run's targets: required, measured, met or missed.
fn targets_table(s: &mut String, run: &Value) {
    let _ = writeln!(s, "| target | required | measured | |\n|---|---|---|---|");
    for t in run["targets"].as_array().into_iter().flatten() {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} |",
            t["target"].as_str().unwrap_or(""),
            t["required"].as_str().unwrap_or(""),
            t["measured"].as_str().unwrap_or(""),
            if t["met"] == true { "met" } else { "**missed**" }
        );
    }
}

/// The charts written (as `{prefix}{chart}.svg`), each with its caption.
fn chart_figures(s: &mut String, written: &[&str], prefix: &str) {
    for (chart, caption) in [
        ("scaling", "Full cycles vs threads (beyond the core count the threads are oversubscribed)."),
        (
            "latency",
            "Open-loop latency percentiles, measured from the intended send time (receive and end_to_end \
             nearly coincide: the ack call itself takes well under a microsecond); \
             the \"one thread\" curves run the same schedule on a single thread.",
        ),
        ("expiry", "Cost per expiry against the number of leases in flight."),
    ] {
        if written.contains(&chart) {
            let _ = writeln!(s, "\n![{caption}](benchmarks/{prefix}{chart}.svg)\n\n{caption}");
        }
    }
}

/// Every row of a run: engine, baseline, ratio, unit.
fn figures_table(s: &mut String, run: &Value) {
    let _ =
        writeln!(s, "| scenario | metric | engine | baseline | engine/baseline | unit |\n|---|---|---:|---:|---:|---|");
    for r in run["rows"].as_array().into_iter().flatten() {
        let ratio = r["ratio"].as_f64().map_or_else(|| "-".into(), |x| format!("{x:.2}x"));
        let better = if r["better"] == "higher" { "higher is better" } else { "lower is better" };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} ({better}) |",
            r["scenario"].as_str().unwrap_or(""),
            r["metric"].as_str().unwrap_or(""),
            crate::results::human(f(&r["engine"])),
            r["baseline"].as_f64().map_or_else(|| "-".into(), crate::results::human),
            ratio,
            r["unit"].as_str().unwrap_or("")
        );
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn run(commit: &str, targets: Value) -> Value {
        json!({"machine": {"commit": commit, "cpu_model": "AMD EPYC", "date": "2026-12-03T21:23:28Z"}, "targets": targets})
    }

    /// Each run's figure lands in its own column, the detail in parentheses
    /// is dropped, misses are marked, the count is over the runs, and a target
    /// an earlier run did not measure shows "-" and does not count as met.
    #[test]
    fn targets_across_runs_counts_each_run() {
        let earlier = run(
            "aaaaaaa1234",
            json!([{"target": "ratio", "required": ">= 1.0x", "measured": "0.97x (a vs b)", "met": false}]),
        );
        let last = run(
            "bbbbbbb5678",
            json!([
                {"target": "ratio", "required": ">= 1.0x", "measured": "1.03x (a vs b)", "met": true},
                {"target": "memory", "required": "<= 96 bytes", "measured": "94.3 bytes", "met": true},
            ]),
        );
        let mut s = String::new();
        targets_across_runs(&mut s, &[&earlier, &last]);
        assert!(
            s.contains(
                "| run 1 (`aaaaaaa`, AMD EPYC, 12-03 21:23) | run 2 (`bbbbbbb`, AMD EPYC, 12-03 21:23) | met in |"
            ),
            "{s}"
        );
        assert!(s.contains("| ratio | >= 1.0x | 0.97x (missed) | 1.03x | 1 of 2 |"), "{s}");
        assert!(s.contains("| memory | <= 96 bytes | - | 94.3 bytes | 1 of 2 |"), "{s}");
    }

    /// A run from another machine gets its own section: its machine, its
    /// targets, its charts under their prefixed names and its figures, after
    /// the main run's figures; the main run's charts keep their own names.
    #[test]
    fn a_run_elsewhere_has_its_own_section() {
        let mut main_run = run("aaaaaaa1234", json!([]));
        main_run["rows"] = json!([{"scenario": "scaling", "metric": "here", "engine": 1.0, "ratio": 1.0}]);
        let mut other = json!({
            "machine": {"commit": "ccccccc9999", "cpu_model": "Big Xeon", "cores": 16},
            "mode": "full",
            "targets": [{"target": "ratio", "required": ">= 3x", "measured": "9.48x", "met": true}],
            "rows": [{"scenario": "scaling", "metric": "full cycles, 16 thread(s)", "engine": 5e7, "baseline": 3e5,
                      "ratio": 146.2, "unit": "cycles/s", "better": "higher"}],
        });
        other["scenarios"] = json!({"scaling": {}});
        let elsewhere = [Elsewhere {
            run: other,
            source: "docs/benchmarks/big.json".into(),
            prefix: "big-".into(),
            charts: vec!["scaling"],
        }];
        let page = page(&main_run, &[], &["scaling"], &elsewhere);
        let section = page.find("## On another machine: 16 cores, Big Xeon").expect("section");
        assert!(page[section..].contains("A run of scaling (`docs/benchmarks/big.json`)"), "{page}");
        assert!(page.find("| scaling | here |").unwrap() < section, "main figures come first");
        let rest = &page[section..];
        assert!(rest.contains("- 16 cores, Big Xeon"), "{rest}");
        assert!(rest.contains("| ratio | >= 3x | 9.48x | met |"), "{rest}");
        assert!(rest.contains("](benchmarks/big-scaling.svg)"), "{rest}");
        assert!(rest.contains("| scaling | full cycles, 16 thread(s) | 50.00M | 300.0k | 146.20x |"), "{rest}");
        assert!(page[..section].contains("](benchmarks/scaling.svg)"));
        assert!(!page[..section].contains("big-scaling"));
    }

    /// A file that is not a run's JSON is refused with its path named.
    #[test]
    fn a_file_without_targets_is_refused() {
        let path = std::env::temp_dir().join(format!("leaseq-report-test-{}.json", std::process::id()));
        std::fs::write(&path, "{\"rows\": []}").unwrap();
        let err = read_run(path.to_str().unwrap()).unwrap_err();
        std::fs::remove_file(&path).ok();
        assert!(err.contains("no targets"), "{err}");
    }
}
