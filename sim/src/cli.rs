//! The command line of `leaseq-sim`, parsed into a [`Command`] the binary
//! runs and the documentation test replays.
//!
//! Invariant: parsing reads nothing but its arguments and the target
//! directory it is given, so the same words always mean the same runs: the
//! commands quoted in docs/lease-tuning.md are parsed here, by the test that
//! checks the page, exactly as the binary parses them.

use std::path::PathBuf;
use std::time::Duration;

use crate::rng::Durations;
use crate::scenario::{Policy, Scenario};
use crate::sweep::renewing_policy;

/// The `--help` text.
pub const HELP: &str = "leaseq-sim: run the real leaseq engine in virtual time to size visibility timeouts

USAGE:
    leaseq-sim run   [OPTIONS]     one run, printed as a report
    leaseq-sim sweep [OPTIONS]     fixed vs renewing over many timeouts: CSV + SVG charts + a recommendation

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
    --out DIR                  sweep: where to write sweep.csv and the charts
                               (default $CARGO_TARGET_DIR/sim, or target/sim without it)
    -h, --help                 this text
";

/// The sweep's default timeouts, in seconds.
pub const DEFAULT_TIMEOUTS: [u64; 8] = [15, 30, 60, 120, 300, 600, 1200, 2400];

/// What one command line asks for.
#[derive(Debug, Clone)]
pub enum Command {
    /// `--help`, or no arguments.
    Help,
    /// One run of this scenario.
    Run(Scenario),
    /// A sweep of `base` over `timeouts`, written to `out`.
    Sweep {
        /// The workload (its policy is replaced per run).
        base: Scenario,
        /// The timeouts to try, each with both policies.
        timeouts: Vec<Duration>,
        /// Where the CSV and the charts go.
        out: PathBuf,
    },
}

/// Where a sweep writes by default: `sim` under `target_dir` (the value of
/// `CARGO_TARGET_DIR`, when set), else `target/sim` under the current
/// directory.
pub fn default_out(target_dir: Option<&str>) -> PathBuf {
    match target_dir {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir).join("sim"),
        _ => PathBuf::from("target/sim"),
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
    if !(v.is_finite() && v > 0.0 && v <= 1e9) {
        return Err(format!("{flag}: must be above zero and at most 1e9 s"));
    }
    Ok(Duration::from_secs_f64(v))
}

/// Parses the arguments after the program name. `target_dir` is the value
/// of `CARGO_TARGET_DIR` (the binary passes the environment's).
///
/// # Errors
///
/// A sentence naming the first argument that is unknown, missing its value
/// or out of range.
pub fn parse(args: &[String], target_dir: Option<&str>) -> Result<Command, String> {
    if args.is_empty() || args.iter().any(|a| a == "-h" || a == "--help") {
        return Ok(Command::Help);
    }
    let mode = args[0].as_str();
    if mode != "run" && mode != "sweep" {
        return Err(format!("unknown command '{mode}'"));
    }
    let mut base = Scenario::media_rendering(Policy::Fixed { timeout: Duration::from_secs(300) });
    let mut renewing = false;
    let mut timeout = Duration::from_secs(300);
    let mut timeouts: Vec<Duration> = DEFAULT_TIMEOUTS.map(Duration::from_secs).to_vec();
    let mut out = default_out(target_dir);
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
        return Ok(Command::Run(base));
    }
    Ok(Command::Sweep { base, timeouts, out })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn the_sweep_writes_under_cargo_target_dir_when_it_is_set() {
        let out = |target_dir| match parse(&args("sweep"), target_dir).unwrap() {
            Command::Sweep { out, .. } => out,
            other => panic!("{other:?}"),
        };
        assert_eq!(out(Some("/tmp/elsewhere")), PathBuf::from("/tmp/elsewhere/sim"));
        assert_eq!(out(None), PathBuf::from("target/sim"));
        assert_eq!(out(Some("")), PathBuf::from("target/sim"));
        match parse(&args("sweep --out docs/img/sim"), Some("/tmp/elsewhere")).unwrap() {
            Command::Sweep { out, .. } => assert_eq!(out, PathBuf::from("docs/img/sim")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_arguments_are_sentences() {
        assert_eq!(parse(&args("walk"), None).unwrap_err(), "unknown command 'walk'");
        assert_eq!(parse(&args("run --timeout"), None).unwrap_err(), "--timeout needs a value");
        assert!(parse(&args("run --timeout -3"), None).unwrap_err().contains("above zero"));
        assert!(parse(&args("run --timeout 1e300"), None).unwrap_err().contains("at most"));
        assert!(matches!(parse(&args("run --help"), None).unwrap(), Command::Help));
    }
}
