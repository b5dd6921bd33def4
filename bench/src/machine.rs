//! What machine and what code a run measured.

use serde_json::{Value, json};

fn command(program: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new(program).args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Cores, CPU model, memory, commit, compiler and time of the run.
pub(crate) fn describe() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map_or_else(|| "unknown".to_string(), |m| m.trim().to_string());
    let hypervisor = cpuinfo.lines().any(|l| l.starts_with("flags") && l.contains(" hypervisor"));
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_total_kib: u64 = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let dirty = command("git", &["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    json!({
        "cores": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "cpu_model": model,
        "virtualised": hypervisor,
        "memory_gib": mem_total_kib as f64 / (1024.0 * 1024.0),
        "commit": command("git", &["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into()),
        "dirty": dirty,
        "rustc": command("rustc", &["--version"]).unwrap_or_else(|| "unknown".into()),
        "os": command("uname", &["-sr"]).unwrap_or_else(|| std::env::consts::OS.into()),
        "date": command("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"]).unwrap_or_default(),
        // What the engine's SystemClock reads here; the baseline reads Instant.
        "engine_clock": if leaseq::SystemClock::new().uses_counter() { "tsc" } else { "instant" },
    })
}

/// Memory the kernel says is available now, in bytes (0 if unknown).
pub(crate) fn available_memory() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    meminfo
        .lines()
        .find(|l| l.starts_with("MemAvailable"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// The 1, 5 and 15 minute load averages (other work on the machine).
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
