//! `leaseq-bench`: the load generator. Runs every scenario on the engine and
//! on the Mutex baseline in one process, prints a table with engine/baseline
//! ratios, writes every figure to JSON, and turns that JSON into
//! docs/benchmarks.md with SVG charts.

#![warn(missing_debug_implementations, unreachable_pub)]

mod alloc;
mod machine;
mod report;
mod results;
mod run;
mod scenario;

#[global_allocator]
static GLOBAL: alloc::CountingMimalloc = alloc::CountingMimalloc;

const HELP: &str = "\
leaseq-bench: load generator for the leaseq engine, with a same-run Mutex baseline

USAGE:
    leaseq-bench [run] [--smoke | --full] [--json PATH] [--only LIST] [--loads P:C:B:S,..]
                 [--threads N,..] [--trial-ms MS] [--trials N] [--far-leases N]
    leaseq-bench report [--json PATH] [--also PATH,..] [--elsewhere PATH,..] [--out docs/benchmarks.md]
                        [--notes FILE]
    leaseq-bench --help

RUN (default):
    Runs every scenario on the engine and on the baseline in this process and
    prints one table row per figure with the ratio engine/baseline.
    --full          the documented full run (minutes; default)
    --smoke         a few seconds, tiny sizes: proves every scenario still runs (CI)
    --json PATH     where to write every figure (default target/leaseq-bench.json)
    --only LIST     comma-separated subset of: scaling,cycles,throughput,latency,expiry,extension,memory
    --loads LIST    throughput configurations P:C:B:S (producers, consumers, batch, payload bytes),
                    comma-separated (full default: 1:1:1:16,1:1:10:16,2:2:10:256,1:1:10:4096)
    --threads LIST  thread counts of the scaling scenario (full default: 1,2,4)
    --trial-ms MS   length of one trial of the timed scenarios (full default: 500)
    --trials N      trials per figure, engine and baseline alternating; medians reported (default 5)
    --far-leases N  leases of 250 days held in the expiry scenario's far-lease part (full default: 1000000)

    Scenarios:
    scaling     full cycles (send, receive, ack; 16-byte payloads), 1/2/4 threads, one shard each
    cycles      independent cycles (each thread send, receive, ack on one shared queue; 16 B,
                600 s lease), 1 and 2 threads, on the engine, the full-contract baseline and the
                lean baseline (parking_lot Mutex, no statistics, no receipt tag)
    throughput  P producers, C consumers, batch B, payload S, for a fixed time
    latency     open loop at half the engine's measured saturation rate; HdrHistogram
                percentiles from the intended send time (no coordinated omission)
    expiry      1e3..1e7 leases in flight expiring at one or 100 spread deadlines;
                cost per expiry, expirations/s, deadline-to-receivable delay (real clock);
                idle CPU and 2 ms lease lateness while N leases of 250 days are held (real clock)
    extension   renewals of many leases while others expire: extend cost and expiry slowdown
    memory      live bytes per queued and per in-flight message, excluding payload

REPORT:
    Turns the JSON of a run into a Markdown page with SVG charts beside it
    (docs/benchmarks/*.svg).
    --json PATH     input (default target/leaseq-bench.json)
    --out PATH      output page (default docs/benchmarks.md)
    --also LIST     comma-separated JSON of earlier runs: the page adds a table of
                    every run's targets (met or missed in each, and how often)
    --elsewhere LIST
                    comma-separated JSON of runs on other machines (bench/scaling-many-cores.sh):
                    each gets a section after the main run's figures, its charts named after its file
    --notes FILE    Markdown appended to the page (the analysis of that run)
";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        print!("{HELP}");
        return;
    }
    let outcome = match args.first().map(String::as_str) {
        Some("report") => report::main(&args[1..]),
        Some("run") => run::main(&args[1..]),
        _ => run::main(&args),
    };
    if let Err(message) = outcome {
        eprintln!("leaseq-bench: {message}\n\nTry `leaseq-bench --help`.");
        std::process::exit(2);
    }
}

/// The value after `flag` in `args`, if the flag is there.
fn flag_value<'a>(args: &'a [String], flag: &str) -> Result<Option<&'a str>, String> {
    match args.iter().position(|a| a == flag) {
        None => Ok(None),
        Some(i) => args.get(i + 1).map(|v| Some(v.as_str())).ok_or_else(|| format!("{flag} needs a value")),
    }
}
