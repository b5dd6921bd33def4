//! `leaseq-sim`: size a queue's lease before production.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use leaseq_sim::{Durations, Policy, Scenario, renewing_policy, simulate, sweep};

// The binary picks the allocator; the library never imposes one.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const HELP: &str = "leaseq-sim: run the real leaseq engine in virtual time to size visibility timeouts

USAGE:
    leaseq-sim run   [OPTIONS]     one run, printed as a report
    leaseq-sim sweep [OPTIONS]     fixed vs renewing over many timeouts: CSV + SVG charts

OPTIONS:
    --scenario media|busy      base workload (default media: render jobs, seconds to many minutes;
                               busy: a day of 50 workers at 100 msg/s)
    --policy fixed|renewing    run: fixed timeout, or short timeout renewed by a lease keeper (default fixed)
    --timeout SECS             run: the visibility timeout (default 300)
    --timeouts S,S,...         sweep: timeouts to try (default 15,30,60,120,300,600,1200,2400)
    --workers N                consumers
    --rate PER_SEC             Poisson arrival rate
    --hours H                  how long messages arrive
    --durations SPEC           fixed:S | exp:MEAN | lognormal:MEDIAN:P99 | file:PATH (seconds, one per line)
    --crash P                  probability an attempt's worker crashes
    --poison P                 fraction of messages that always fail
    --max-receives N           deliveries before dead-lettering
    --not-idempotent           count duplicate effects as real (default: effects keyed by message id)
    --seed N                   random seed (same seed, same report)
    --out DIR                  sweep: where to write sweep.csv and the charts (default target/sim)
    -h, --help                 this text
";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() || args.iter().any(|a| a == "-h" || a == "--help") {
        print!("{HELP}");
        return;
    }
    if let Err(e) = run(&args) {
        eprintln!("leaseq-sim: {e}\n(try --help)");
        std::process::exit(2);
    }
}

fn value<'a>(args: &'a [String], i: &mut usize, flag: &str) -> Result<&'a str, String> {
    *i += 1;
    args.get(*i).map(String::as_str).ok_or_else(|| format!("{flag} needs a value"))
}

fn number<T: std::str::FromStr>(text: &str, flag: &str) -> Result<T, String> {
    text.parse().map_err(|_| format!("{flag}: '{text}' is not a valid number"))
}

fn secs(text: &str, flag: &str) -> Result<Duration, String> {
    let v: f64 = number(text, flag)?;
    if !(v.is_finite() && v > 0.0) {
        return Err(format!("{flag}: must be above zero"));
    }
    Ok(Duration::from_secs_f64(v))
}

fn run(args: &[String]) -> Result<(), String> {
    let mode = args[0].as_str();
    if mode != "run" && mode != "sweep" {
        return Err(format!("unknown command '{mode}'"));
    }
    let mut base = Scenario::media_rendering(Policy::Fixed { timeout: Duration::from_secs(300) });
    let mut renewing = false;
    let mut timeout = Duration::from_secs(300);
    let mut timeouts: Vec<Duration> = [15, 30, 60, 120, 300, 600, 1200, 2400].map(Duration::from_secs).to_vec();
    let mut out = PathBuf::from("target/sim");
    let mut i = 1;
    while i < args.len() {
        let flag = args[i].as_str();
        match flag {
            "--scenario" => {
                base = match value(args, &mut i, flag)? {
                    "media" => Scenario::media_rendering(base.policy.clone()),
                    "busy" => Scenario::busy_day(base.policy.clone()),
                    other => return Err(format!("unknown scenario '{other}'")),
                }
            }
            "--policy" => {
                renewing = match value(args, &mut i, flag)? {
                    "fixed" => false,
                    "renewing" => true,
                    other => return Err(format!("unknown policy '{other}'")),
                }
            }
            "--timeout" => timeout = secs(value(args, &mut i, flag)?, flag)?,
            "--timeouts" => {
                timeouts = value(args, &mut i, flag)?.split(',').map(|t| secs(t, flag)).collect::<Result<_, _>>()?
            }
            "--workers" => base.workers = number(value(args, &mut i, flag)?, flag)?,
            "--rate" => base.arrival_rate = number(value(args, &mut i, flag)?, flag)?,
            "--hours" => base.arrivals_for = secs(value(args, &mut i, flag)?, flag)?.mul_f64(3600.0),
            "--durations" => base.durations = Durations::parse(value(args, &mut i, flag)?)?,
            "--crash" => base.crash_probability = number(value(args, &mut i, flag)?, flag)?,
            "--poison" => base.poison_fraction = number(value(args, &mut i, flag)?, flag)?,
            "--max-receives" => base.max_receives = number(value(args, &mut i, flag)?, flag)?,
            "--not-idempotent" => base.idempotent = false,
            "--seed" => base.seed = number(value(args, &mut i, flag)?, flag)?,
            "--out" => out = PathBuf::from(value(args, &mut i, flag)?),
            other => return Err(format!("unknown option '{other}'")),
        }
        i += 1;
    }
    if mode == "run" {
        base.policy = if renewing { renewing_policy(timeout) } else { Policy::Fixed { timeout } };
        let report = simulate(&base)?;
        // A closed pipe (`| head`) is not an error worth a panic.
        let _ = write!(std::io::stdout().lock(), "{report}");
        return Ok(());
    }
    let started = Instant::now();
    let output = sweep(&base, &timeouts)?;
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let write = |name: &str, body: &str| {
        let path = out.join(name);
        std::fs::write(&path, body).map_err(|e| format!("{}: {e}", path.display()))
    };
    write("sweep.csv", &output.csv)?;
    for (stem, svg) in &output.charts {
        write(&format!("{stem}.svg"), svg)?;
    }
    let mut stdout = std::io::stdout().lock();
    for r in &output.reports {
        let _ = writeln!(
            stdout,
            "{:<9} timeout {:>6.0}s  duplicates {:>6}  wasted {:>5.1}%  recovery p50 {:>7.1}s  e2e p99 {:>7.1}s  dlq healthy {:>4}  unfinished {}",
            r.policy_kind,
            r.timeout_secs,
            r.duplicate_executions,
            100.0 * r.wasted_worker_secs / r.busy_worker_secs.max(1e-9),
            r.recovery.p50,
            r.end_to_end.p99,
            r.dead_lettered_healthy,
            r.unfinished
        );
    }
    let _ = writeln!(
        stdout,
        "{} runs in {:.1} s; wrote {}",
        output.reports.len(),
        started.elapsed().as_secs_f64(),
        out.display()
    );
    Ok(())
}
