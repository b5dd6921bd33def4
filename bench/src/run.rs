//! `leaseq-bench run`: every scenario, engine and baseline, one table, one
//! JSON file, and a verdict on each target of the issue.

use std::time::Instant;

use leaseq::SystemClock;
use leaseq_bench::{BaselineQueue, EngineSubject, LeanQueue};
use serde_json::json;

use crate::results::{Better, Results, header};
use crate::scenario::{self, Profile, cycles, expiry, extension, latency, memory, scaling, stalls, throughput};

const SCENARIOS: [&str; 7] = ["scaling", "cycles", "throughput", "latency", "expiry", "extension", "memory"];

pub(crate) fn main(args: &[String]) -> Result<(), String> {
    let mut profile = if args.iter().any(|a| a == "--smoke") { Profile::smoke() } else { Profile::full() };
    if let Some(list) = crate::flag_value(args, "--loads")? {
        profile.loads = list.split(',').map(parse_load).collect::<Result<_, _>>()?;
    }
    if let Some(threads) = crate::flag_value(args, "--threads")? {
        profile.threads = threads
            .split(',')
            .map(|t| t.parse::<usize>().ok().filter(|t| (1..=256).contains(t)))
            .collect::<Option<_>>()
            .ok_or_else(|| format!("--threads wants a list of counts 1..=256, not '{threads}'"))?;
    }
    if let Some(ms) = crate::flag_value(args, "--trial-ms")? {
        let ms: u64 = ms.parse().ok().filter(|m| (1..=60_000).contains(m)).ok_or("--trial-ms wants 1..=60000")?;
        profile.duration = std::time::Duration::from_millis(ms);
    }
    if let Some(n) = crate::flag_value(args, "--trials")? {
        profile.trials = n.parse().ok().filter(|n| (1..=100).contains(n)).ok_or("--trials wants 1..=100")?;
    }
    if let Some(n) = crate::flag_value(args, "--far-leases")? {
        profile.far_leases.0 =
            n.parse().ok().filter(|n| (1..=10_000_000).contains(n)).ok_or("--far-leases wants 1..=10000000")?;
    }
    let json_path = crate::flag_value(args, "--json")?.unwrap_or("target/leaseq-bench.json").to_string();
    let only: Vec<String> = match crate::flag_value(args, "--only")? {
        Some(list) => list.split(',').map(str::to_string).collect(),
        None => SCENARIOS.iter().map(|s| s.to_string()).collect(),
    };
    if let Some(bad) = only.iter().find(|s| !SCENARIOS.contains(&s.as_str())) {
        return Err(format!("unknown scenario '{bad}'"));
    }
    const KNOWN: [&str; 9] =
        ["--smoke", "--full", "--json", "--only", "--loads", "--threads", "--trial-ms", "--trials", "--far-leases"];
    for a in args {
        if a.starts_with("--") && !KNOWN.contains(&a.as_str()) {
            return Err(format!("unknown option '{a}'"));
        }
    }
    let mut machine = crate::machine::describe();
    machine["load_average_before"] = json!(crate::machine::load_average());
    println!("leaseq-bench {} run on {} cores, {}", profile.name, machine["cores"], machine["cpu_model"]);
    println!("{}", header());
    let started = Instant::now();
    let mut results = Results::default();
    let wants = |s: &str| only.iter().any(|o| o == s);
    if wants("scaling") {
        run_scaling(&profile, &mut results);
    }
    if wants("cycles") {
        run_cycles(&profile, &mut results);
    }
    if wants("throughput") {
        run_throughput(&profile, &mut results);
    }
    if wants("latency") {
        run_latency(&profile, &mut results);
    }
    if wants("expiry") {
        run_expiry(&profile, &mut results);
    }
    if wants("extension") {
        run_extension(&profile, &mut results);
    }
    if wants("memory") {
        run_memory(&profile, &mut results);
    }
    let wall = started.elapsed().as_secs_f64();
    println!("\ntargets ({} run):", profile.name);
    for t in &results.targets {
        let verdict = if t["met"].as_bool() == Some(true) { "met   " } else { "MISSED" };
        println!(
            "  {verdict} {:<58} required {:<28} measured {}",
            t["target"].as_str().unwrap_or(""),
            t["required"].as_str().unwrap_or(""),
            t["measured"].as_str().unwrap_or("")
        );
    }
    machine["load_average_after"] = json!(crate::machine::load_average());
    let document = results.to_json(machine, profile.name, wall);
    if let Some(dir) = std::path::Path::new(&json_path).parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(&document).expect("figures serialise");
    std::fs::write(&json_path, text).map_err(|e| format!("cannot write {json_path}: {e}"))?;
    println!("\n{wall:.1} s; every figure in {json_path}");
    Ok(())
}

fn run_scaling(profile: &Profile, results: &mut Results) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut points = Vec::new();
    // The one-thread figures once more with the baseline on the engine's
    // clock: how much of the ratio is the clock rather than the queue.
    let same_clock_runs = profile.threads.contains(&1).then_some((1, true));
    for (threads, same_clock) in profile.threads.iter().map(|&t| (t, false)).chain(same_clock_runs) {
        let (mut engine_cpu, mut baseline_cpu) = (Vec::new(), Vec::new());
        let trials = scenario::alternate(
            profile.trials,
            || {
                let c = scaling::full_cycles::<EngineSubject>(threads, profile.duration, same_clock);
                engine_cpu.push(c.cpu_ns_per_cycle);
                c.per_s
            },
            || {
                let c = scaling::full_cycles::<BaselineQueue>(threads, profile.duration, same_clock);
                baseline_cpu.push(c.cpu_ns_per_cycle);
                c.per_s
            },
        );
        let (engine, baseline) = (trials.engine, trials.baseline);
        let (engine_cpu, baseline_cpu) = (scenario::median(&engine_cpu), scenario::median(&baseline_cpu));
        let note = match (threads > cores, same_clock) {
            (_, true) => ", baseline on the engine's clock",
            (true, false) => " (oversubscribed)",
            (false, false) => "",
        };
        results.row(
            "scaling",
            format!("full cycles, {threads} thread(s){note}"),
            "cycles/s",
            engine,
            Some(baseline),
            Better::Higher,
        );
        results.row(
            "scaling",
            format!("CPU time per cycle, {threads} thread(s){note}"),
            "ns",
            engine_cpu,
            Some(baseline_cpu),
            Better::Lower,
        );
        if same_clock {
            results.detail(
                "scaling_same_clock",
                json!({"threads": threads, "engine": engine, "baseline": baseline,
                       "engine_cpu_ns_per_cycle": engine_cpu, "baseline_cpu_ns_per_cycle": baseline_cpu}),
            );
            continue;
        }
        points.push(json!({"threads": threads, "oversubscribed": threads > cores,
                           "engine_cpu_ns_per_cycle": engine_cpu, "baseline_cpu_ns_per_cycle": baseline_cpu,
                           "engine": engine, "baseline": baseline,
                           "engine_trials": trials.engine_samples, "baseline_trials": trials.baseline_samples}));
        if threads == 1 {
            results.target(
                "full cycles, 1 thread: engine/baseline",
                ">= 1.0x",
                format!(
                    "{:.2}x ({:.2} M/s vs {:.2} M/s; CPU per cycle {:.0} vs {:.0} ns)",
                    engine / baseline,
                    engine / 1e6,
                    baseline / 1e6,
                    engine_cpu,
                    baseline_cpu
                ),
                engine >= baseline,
            );
        }
        if threads == 2 {
            results.target(
                "full cycles, 2 threads: engine/baseline",
                ">= 3x",
                format!("{:.2}x", engine / baseline),
                engine >= 3.0 * baseline,
            );
            results.target(
                "full cycles, 2 threads: cycles/s",
                ">= 15 M/s",
                format!("{:.2} M/s", engine / 1e6),
                engine >= 15e6,
            );
        }
    }
    results.detail("scaling", json!({"payload_bytes": 16, "cores": cores, "points": points}));
}

/// Independent cycles at 1 and 2 threads (those of `--threads` up to 2) on
/// the engine, the full-contract baseline and the lean baseline, the three
/// alternating in each trial; at one thread once more with both baselines on
/// the engine's clock.
fn run_cycles(profile: &Profile, results: &mut Results) {
    type Lean = LeanQueue<SystemClock>;
    let mut points = Vec::new();
    let counts: Vec<usize> = profile.threads.iter().copied().filter(|&t| t <= 2).collect();
    let same_clock_runs = counts.contains(&1).then_some((1, true));
    for (threads, same_clock) in counts.iter().map(|&t| (t, false)).chain(same_clock_runs) {
        let d = profile.duration;
        let runs = scenario::alternate_each(
            profile.trials,
            &mut [
                &mut || cycles::independent::<EngineSubject>(threads, d, same_clock),
                &mut || cycles::independent::<BaselineQueue>(threads, d, same_clock),
                &mut || cycles::independent::<Lean>(threads, d, same_clock),
            ],
        );
        let rate = |i: usize| scenario::median(&runs[i].iter().map(|c| c.per_s).collect::<Vec<_>>());
        let cpu = |i: usize| scenario::median(&runs[i].iter().map(|c| c.cpu_ns_per_cycle).collect::<Vec<_>>());
        let (engine, full, lean) = (rate(0), rate(1), rate(2));
        let (engine_cpu, full_cpu, lean_cpu) = (cpu(0), cpu(1), cpu(2));
        let note = if same_clock { ", baselines on the engine's clock" } else { "" };
        for (against, rate, cpu) in [("full-contract baseline", full, full_cpu), ("lean baseline", lean, lean_cpu)] {
            let who = format!("{threads} thread(s){note}, vs {against}");
            results.row("cycles", format!("independent cycles, {who}"), "cycles/s", engine, Some(rate), Better::Higher);
            results.row("cycles", format!("CPU time per cycle, {who}"), "ns", engine_cpu, Some(cpu), Better::Lower);
        }
        let samples = |i: usize| runs[i].iter().map(|c| c.per_s).collect::<Vec<_>>();
        points.push(json!({"threads": threads, "baselines_on_engine_clock": same_clock,
                           "engine": engine, "baseline": full, "lean": lean,
                           "engine_cpu_ns_per_cycle": engine_cpu, "baseline_cpu_ns_per_cycle": full_cpu,
                           "lean_cpu_ns_per_cycle": lean_cpu,
                           "engine_trials": samples(0), "baseline_trials": samples(1), "lean_trials": samples(2)}));
        let required = if threads == 1 { 1.2 } else { 3.0 };
        let clock = if same_clock { " (lean on the engine's clock)" } else { "" };
        results.target(
            &format!("independent cycles, {threads} thread(s): engine/lean{clock}"),
            if threads == 1 { ">= 1.2x" } else { ">= 3x" },
            format!(
                "{:.2}x ({:.2} M/s vs {:.2} M/s; CPU per cycle {:.0} vs {:.0} ns)",
                engine / lean,
                engine / 1e6,
                lean / 1e6,
                engine_cpu,
                lean_cpu
            ),
            engine >= required * lean,
        );
    }
    results.detail(
        "cycles",
        json!({"payload_bytes": 16, "lease_s": cycles::LEASE.as_secs(), "points": points,
               "method": "each thread loops send, receive(1), ack on one shared queue; engine, full-contract \
                          baseline and lean baseline alternate in every trial"}),
    );
}

fn run_throughput(profile: &Profile, results: &mut Results) {
    let mut detail = Vec::new();
    for &(producers, consumers, batch, payload) in &profile.loads {
        let load = throughput::Load { producers, consumers, batch, payload, duration: profile.duration };
        let (mut engine_runs, mut baseline_runs) = (Vec::new(), Vec::new());
        for _ in 0..profile.trials {
            engine_runs.push(throughput::run::<EngineSubject>(load));
            baseline_runs.push(throughput::run::<BaselineQueue>(load));
        }
        let (engine, baseline) = (throughput::Rates::median(&engine_runs), throughput::Rates::median(&baseline_runs));
        let label = format!("{producers}P/{consumers}C batch {batch}, {payload} B");
        results.row(
            "throughput",
            format!("{label}: acked"),
            "msg/s",
            engine.acked_per_s,
            Some(baseline.acked_per_s),
            Better::Higher,
        );
        results.row(
            "throughput",
            format!("{label}: sent"),
            "msg/s",
            engine.sent_per_s,
            Some(baseline.sent_per_s),
            Better::Higher,
        );
        detail.push(json!({"producers": producers, "consumers": consumers, "batch": batch, "payload_bytes": payload,
                           "engine": engine.to_json(), "baseline": baseline.to_json()}));
    }
    results.detail("throughput", json!(detail));
}

fn run_latency(profile: &Profile, results: &mut Results) {
    let saturation_load =
        throughput::Load { producers: 1, consumers: 1, batch: 1, payload: 16, duration: profile.duration };
    let saturation = scenario::alternate(
        profile.trials,
        || throughput::run::<EngineSubject>(saturation_load).acked_per_s,
        || throughput::run::<BaselineQueue>(saturation_load).acked_per_s,
    );
    let (engine_saturation, baseline_saturation) = (saturation.engine, saturation.baseline);
    // Both queues get the same offered rate: half the engine's saturation.
    let rate = (engine_saturation / 2.0).max(1_000.0);
    let engine = latency::run::<EngineSubject>(rate, profile.latency_messages);
    let baseline = latency::run::<BaselineQueue>(rate, profile.latency_messages);
    results.row(
        "latency",
        "saturation (1P/1C, batch 1)",
        "msg/s",
        engine_saturation,
        Some(baseline_saturation),
        Better::Higher,
    );
    results.row("latency", "offered rate (half engine saturation)", "msg/s", rate, Some(rate), Better::Higher);
    // Below the offered rate the producer fell behind its schedule: the
    // queue then grew for the whole run and the percentiles measure backlog.
    results.row(
        "latency",
        "achieved send rate (below offered: overloaded)",
        "msg/s",
        engine.achieved_per_s,
        Some(baseline.achieved_per_s),
        Better::Higher,
    );
    for (name, e, b) in [
        ("send", &engine.send, &baseline.send),
        ("receive", &engine.receive, &baseline.receive),
        ("ack", &engine.ack, &baseline.ack),
        ("end_to_end", &engine.end_to_end, &baseline.end_to_end),
    ] {
        for (q, label) in [(0.5, "p50"), (0.99, "p99"), (0.999, "p99.9"), (0.9999, "p99.99")] {
            let (ev, bv) = (e.value_at_quantile(q) as f64, b.value_at_quantile(q) as f64);
            results.row("latency", format!("{name} {label}"), "ns", ev, Some(bv), Better::Lower);
        }
        results.row("latency", format!("{name} max"), "ns", e.max() as f64, Some(b.max() as f64), Better::Lower);
    }
    for (name, h) in [("receive", &engine.receive), ("ack", &engine.ack)] {
        let (p99, p999) = (h.value_at_quantile(0.99), h.value_at_quantile(0.999));
        results.target(
            &format!("{name} p99 at half saturation"),
            "< 5 us",
            format!("{:.2} us", p99 as f64 / 1e3),
            p99 < 5_000,
        );
        results.target(
            &format!("{name} p99.9 at half saturation"),
            "< 20 us",
            format!("{:.2} us", p999 as f64 / 1e3),
            p999 < 20_000,
        );
    }
    // The same schedule on one thread, then the machine's own stalls with one
    // spinning thread and with as many as there are cores: what the two-thread
    // figures above include besides the queue.
    let one_engine = latency::run_one_thread::<EngineSubject>(rate, profile.latency_messages);
    let one_baseline = latency::run_one_thread::<BaselineQueue>(rate, profile.latency_messages);
    for (name, e, b) in
        [("receive", &one_engine.receive, &one_baseline.receive), ("ack", &one_engine.ack, &one_baseline.ack)]
    {
        for (q, label) in [(0.5, "p50"), (0.99, "p99"), (0.999, "p99.9")] {
            let (ev, bv) = (e.value_at_quantile(q) as f64, b.value_at_quantile(q) as f64);
            results.row("latency", format!("one thread: {name} {label}"), "ns", ev, Some(bv), Better::Lower);
        }
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut machine_stalls = Vec::new();
    for threads in if cores > 1 { vec![1, cores] } else { vec![1] } {
        let probe = stalls::probe(threads, profile.stall_probe);
        let who = format!("{threads} spinning thread(s)");
        results.row("stalls", format!("{who}: time lost"), "%", 100.0 * probe.lost_share, None, Better::Lower);
        results.row("stalls", format!("{who}: stalls of 1 ms or more"), "per s", probe.long_per_s, None, Better::Lower);
        results.row("stalls", format!("{who}: longest"), "ns", probe.longest_ns as f64, None, Better::Lower);
        machine_stalls.push(probe.to_json());
    }
    results.detail("stalls", json!(machine_stalls));
    results.detail(
        "latency",
        json!({"engine_saturation_per_s": engine_saturation, "baseline_saturation_per_s": baseline_saturation,
               "offered_per_s": rate, "messages": profile.latency_messages,
               "one_thread": {"engine": one_engine.to_json(), "baseline": one_baseline.to_json()},
               "definitions": {"send": "send returned - intended send time", "receive": "receive returned the message - intended send time",
                               "ack": "duration of the ack call", "end_to_end": "ack returned - intended send time"},
               "engine": engine.to_json(), "baseline": baseline.to_json()}),
    );
}

fn run_expiry(profile: &Profile, results: &mut Results) {
    let mut points = Vec::new();
    let mut same_engine = Vec::new();
    let mut at_million = None;
    for &n in &profile.expiry_counts {
        // Both queues in memory at once is never needed (one at a time), but
        // leave room for the largest with margin.
        if n >= 10_000_000 && crate::machine::available_memory() < 8 << 30 {
            println!("expiry       skipping {n} in flight: less than 8 GiB available");
            continue;
        }
        for deadlines in expiry::Deadlines::ALL {
            // Small counts are over in microseconds: repeat them (alternating)
            // and keep the median.
            let reps = (1_000_000 / n).clamp(1, 7);
            let (mut es, mut bs) = (Vec::new(), Vec::new());
            for _ in 0..reps {
                es.push(expiry::firing::<EngineSubject>(n, deadlines));
                bs.push(expiry::firing::<BaselineQueue>(n, deadlines));
            }
            let (e, b) = (expiry::Firing::median(&es), expiry::Firing::median(&bs));
            let kind = deadlines.key();
            results.row(
                "expiry",
                format!("{n} in flight, {}: cost", deadlines.label()),
                "ns/expiry",
                e.ns_per_expiry,
                Some(b.ns_per_expiry),
                Better::Lower,
            );
            if deadlines == expiry::Deadlines::Same {
                same_engine.push((n, e.ns_per_expiry));
                if n == 1_000_000 {
                    at_million = Some((e, b));
                }
            }
            points.push(json!({"in_flight": n, "deadlines": kind, "engine": e.to_json(), "baseline": b.to_json()}));
        }
    }
    let within: Vec<f64> = same_engine.iter().filter(|(n, _)| *n <= 1_000_000).map(|(_, ns)| *ns).collect();
    if within.len() >= 2 {
        let (lo, hi) = within.iter().fold((f64::MAX, 0f64), |(lo, hi), x| (lo.min(*x), hi.max(*x)));
        results.target(
            "expiry cost flat from 1e3 to 1e6 in flight (max/min)",
            "<= 1.5x",
            format!("{:.2}x ({lo:.1}..{hi:.1} ns)", hi / lo),
            hi / lo <= 1.5,
        );
    }
    if let Some((e, b)) = at_million {
        results.row(
            "expiry",
            "1e6 in flight, same deadline",
            "expiries/s",
            e.expirations_per_s,
            Some(b.expirations_per_s),
            Better::Higher,
        );
        results.target(
            "expirations/s at 1e6",
            ">= 10 M/s",
            format!("{:.2} M/s", e.expirations_per_s / 1e6),
            e.expirations_per_s >= 10e6,
        );
        results.target(
            "expiry vs heap baseline at 1e6",
            ">= 5x",
            format!("{:.2}x", e.expirations_per_s / b.expirations_per_s),
            e.expirations_per_s >= 5.0 * b.expirations_per_s,
        );
    }
    let delay_engine = expiry::delay::<EngineSubject>(profile.delay_messages);
    let delay_baseline = expiry::delay::<BaselineQueue>(profile.delay_messages);
    for key in ["p50_ns", "p99_ns", "max_ns"] {
        let (e, b) = (delay_engine[key].as_f64().unwrap_or(0.0), delay_baseline[key].as_f64().unwrap_or(0.0));
        results.row(
            "expiry",
            format!("deadline to received again, {}", key.trim_end_matches("_ns")),
            "ns",
            e,
            Some(b),
            Better::Lower,
        );
    }
    let (far, short) = profile.far_leases;
    let far_engine = expiry::far_leases::<EngineSubject>(far, short);
    let far_baseline = expiry::far_leases::<BaselineQueue>(far, short);
    let figure = |v: &serde_json::Value, key: &str| v[key].as_f64().unwrap_or(0.0);
    results.row(
        "expiry",
        format!("{far} leases of 250 days: idle CPU"),
        "% of a core",
        figure(&far_engine, "idle_cpu_percent"),
        Some(figure(&far_baseline, "idle_cpu_percent")),
        Better::Lower,
    );
    for key in ["late_p50_ns", "late_p99_ns"] {
        results.row(
            "expiry",
            format!("with them, a 2 ms lease received again late, {}", &key[5..8]),
            "ns",
            figure(&far_engine, key),
            Some(figure(&far_baseline, key)),
            Better::Lower,
        );
    }
    let idle = figure(&far_engine, "idle_cpu_percent");
    results.target(
        &format!("idle CPU with {far} leases of 250 days"),
        "<= 1% of a core",
        format!("{idle:.2}%"),
        idle <= 1.0,
    );
    results.detail(
        "expiry",
        json!({"points": points, "delay": {"engine": delay_engine, "baseline": delay_baseline},
               "far": {"engine": far_engine, "baseline": far_baseline},
               "method": "ManualClock, one shard; the clock jumps to the deadline(s) and receive(1), which applies due timers, is timed"}),
    );
}

fn run_extension(profile: &Profile, results: &mut Results) {
    let (kept, expiring, steps) = profile.extension;
    let e = extension::run::<EngineSubject>(kept, expiring, steps);
    let b = extension::run::<BaselineQueue>(kept, expiring, steps);
    results.row(
        "extension",
        format!("extend ({kept} leases renewed every ms)"),
        "ns/extend",
        e.ns_per_extend,
        Some(b.ns_per_extend),
        Better::Lower,
    );
    results.row(
        "extension",
        "expiry with renewals going on",
        "ns/expiry",
        e.ns_per_expiry,
        Some(b.ns_per_expiry),
        Better::Lower,
    );
    results.row(
        "extension",
        "expiry alone",
        "ns/expiry",
        e.ns_per_expiry_alone,
        Some(b.ns_per_expiry_alone),
        Better::Lower,
    );
    results.detail(
        "extension",
        json!({"kept": kept, "expiring": expiring, "steps_ms": steps, "engine": e.to_json(), "baseline": b.to_json()}),
    );
}

fn run_memory(profile: &Profile, results: &mut Results) {
    let n = profile.memory_messages;
    let e = memory::run::<EngineSubject>(n);
    let b = memory::run::<BaselineQueue>(n);
    results.row(
        "memory",
        format!("per queued message ({n})"),
        "bytes",
        e.per_queued,
        Some(b.per_queued),
        Better::Lower,
    );
    results.row(
        "memory",
        format!("per in-flight message ({n})"),
        "bytes",
        e.per_in_flight,
        Some(b.per_in_flight),
        Better::Lower,
    );
    results.row(
        "memory",
        format!("retained per message acked within its lease ({n})"),
        "bytes",
        e.per_acked_within_lease,
        Some(b.per_acked_within_lease),
        Better::Lower,
    );
    results.target(
        "per in-flight message overhead",
        "<= 96 bytes",
        format!("{:.1} bytes", e.per_in_flight),
        e.per_in_flight <= 96.0,
    );
    results.detail("memory", json!({"messages": n, "engine": e.to_json(), "baseline": b.to_json()}));
}

/// `P:C:B:S` (producers, consumers, batch, payload bytes).
fn parse_load(text: &str) -> Result<(usize, usize, usize, usize), String> {
    let bad = || format!("a load is P:C:B:S (producers, consumers, batch 1..=1024, payload bytes), not '{text}'");
    let parts: Vec<usize> = text.split(':').map(|p| p.parse().map_err(|_| bad())).collect::<Result<_, _>>()?;
    match parts[..] {
        [p, c, b, s] if p >= 1 && c >= 1 && (1..=1024).contains(&b) && s <= 1 << 16 => Ok((p, c, b, s)),
        _ => Err(bad()),
    }
}
