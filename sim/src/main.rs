//! `leaseq-sim`: size a queue's lease before production.

use std::io::Write;
use std::time::Instant;

use leaseq_sim::cli::{self, Command};
use leaseq_sim::{simulate, sweep};

// The binary picks the allocator; the library never imposes one.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let target_dir = std::env::var("CARGO_TARGET_DIR").ok();
    let result = cli::parse(&args, target_dir.as_deref()).and_then(run);
    if let Err(e) = result {
        eprintln!("leaseq-sim: {e}\n(try --help)");
        std::process::exit(2);
    }
}

fn run(command: Command) -> Result<(), String> {
    // A closed pipe (`| head`) is not an error worth a panic: writes to
    // stdout are best effort.
    let mut stdout = std::io::stdout().lock();
    match command {
        Command::Help => {
            let _ = write!(stdout, "{}", cli::HELP);
        }
        Command::Run(scenario) => {
            let report = simulate(&scenario)?;
            let _ = write!(stdout, "{report}");
        }
        Command::Sweep { base, timeouts, out } => {
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
            let _ = write!(stdout, "{}{}", output.table(), output.recommendation_text());
            let _ = writeln!(
                stdout,
                "{} runs in {:.1} s; wrote sweep.csv (with a header row) and the charts to {}",
                output.reports.len(),
                started.elapsed().as_secs_f64(),
                out.display()
            );
        }
    }
    Ok(())
}
