//! The load scenarios, each run on the engine and on the baseline.
//!
//! Invariant: a scenario function is generic over `Subject` and gets the same
//! parameters for both, so the only difference between the two runs is the
//! queue.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bytes::Bytes;

pub(crate) mod cycles;
pub(crate) mod expiry;
pub(crate) mod extension;
pub(crate) mod latency;
pub(crate) mod memory;
pub(crate) mod scaling;
pub(crate) mod stalls;
pub(crate) mod throughput;

/// How big a run is.
#[derive(Debug, Clone)]
pub(crate) struct Profile {
    pub(crate) name: &'static str,
    /// Measured interval of one trial of the duration-based scenarios.
    pub(crate) duration: Duration,
    /// Trials per figure, engine and baseline alternating; the figure is the
    /// median, so a burst of load from elsewhere hits one trial of one side,
    /// not a whole side.
    pub(crate) trials: usize,
    /// Throughput configurations: (producers, consumers, batch, payload bytes).
    pub(crate) loads: Vec<(usize, usize, usize, usize)>,
    /// Thread counts of the scaling scenario.
    pub(crate) threads: Vec<usize>,
    /// In-flight counts of the expiry scenario.
    pub(crate) expiry_counts: Vec<usize>,
    /// Messages of the latency scenario (at the offered rate).
    pub(crate) latency_messages: usize,
    /// Messages of the memory scenario.
    pub(crate) memory_messages: usize,
    /// Kept and expiring leases and steps of the extension scenario.
    pub(crate) extension: (usize, usize, usize),
    /// Messages of the expiry-delay (real clock) part.
    pub(crate) delay_messages: usize,
    /// Leases of 250 days held, and 2 ms leases timed, in the far-lease part
    /// of the expiry scenario (real clock).
    pub(crate) far_leases: (usize, usize),
    /// How long the machine-stall probe spins (see `stalls`).
    pub(crate) stall_probe: Duration,
}

impl Profile {
    /// A few seconds in all: proves every scenario still runs (CI).
    pub(crate) fn smoke() -> Self {
        Profile {
            name: "smoke",
            duration: Duration::from_millis(20),
            trials: 2,
            loads: vec![(1, 1, 1, 16), (1, 1, 10, 16)],
            threads: vec![1, 2],
            expiry_counts: vec![1_000, 10_000],
            latency_messages: 5_000,
            memory_messages: 2_000,
            extension: (200, 2_000, 10),
            delay_messages: 1_000,
            far_leases: (10_000, 50),
            stall_probe: Duration::from_millis(100),
        }
    }

    /// The documented full run (minutes).
    pub(crate) fn full() -> Self {
        Profile {
            name: "full",
            duration: Duration::from_millis(500),
            trials: 5,
            loads: vec![(1, 1, 1, 16), (1, 1, 10, 16), (2, 2, 10, 256), (1, 1, 10, 4096)],
            threads: vec![1, 2, 4],
            expiry_counts: vec![1_000, 10_000, 100_000, 1_000_000, 10_000_000],
            latency_messages: 1_000_000,
            memory_messages: 1_000_000,
            extension: (10_000, 100_000, 100),
            delay_messages: 20_000,
            far_leases: (1_000_000, 500),
            stall_probe: Duration::from_secs(3),
        }
    }
}

/// 16-byte and larger payloads without an allocation per message: slices of
/// one static buffer (a static `Bytes` clone touches no reference count).
pub(crate) fn payload(size: usize) -> Bytes {
    static BUFFER: [u8; 1 << 16] = [0x5a; 1 << 16];
    Bytes::from_static(&BUFFER[..size.min(BUFFER.len())])
}

/// Nanoseconds since the first call in this process (the scenarios' own
/// stopwatch, separate from the queues' clocks).
#[inline]
pub(crate) fn tick() -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    ORIGIN.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// CPU time every thread of this process has used so far, in nanoseconds
/// (Linux schedstat; `None` elsewhere): what a background thread (the
/// engine's driver) costs while the scenario's own thread sleeps.
pub(crate) fn process_cpu_ns() -> Option<u64> {
    let mut total = 0;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let text = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
        total += text.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total)
}

/// Runs `engine` and `baseline` alternately `trials` times and returns the
/// median of each with every sample.
pub(crate) fn alternate(trials: usize, mut engine: impl FnMut() -> f64, mut baseline: impl FnMut() -> f64) -> Trials {
    let (mut e, mut b) = (Vec::new(), Vec::new());
    for _ in 0..trials.max(1) {
        e.push(engine());
        b.push(baseline());
    }
    Trials { engine: median(&e), baseline: median(&b), engine_samples: e, baseline_samples: b }
}

/// Runs each of `subjects` once per trial, `trials` times, the first of
/// each trial rotating (so none always runs first, straight after another's
/// threads): every sample of each, in trial order.
pub(crate) fn alternate_each<T>(trials: usize, subjects: &mut [&mut dyn FnMut() -> T]) -> Vec<Vec<T>> {
    let n = subjects.len();
    let mut samples: Vec<Vec<T>> = subjects.iter().map(|_| Vec::new()).collect();
    for trial in 0..trials.max(1) {
        for k in 0..n {
            let i = (trial + k) % n;
            samples[i].push(subjects[i]());
        }
    }
    samples
}

/// The figures of alternating trials.
#[derive(Debug, Clone)]
pub(crate) struct Trials {
    pub(crate) engine: f64,
    pub(crate) baseline: f64,
    pub(crate) engine_samples: Vec<f64>,
    pub(crate) baseline_samples: Vec<f64>,
}

/// The median (the mean of the middle two for an even count).
pub(crate) fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}
