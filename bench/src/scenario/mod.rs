//! The load scenarios, each run on the engine and on the baseline.
//!
//! Invariant: a scenario function is generic over `Subject` and gets the same
//! parameters for both, so the only difference between the two runs is the
//! queue.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bytes::Bytes;

pub(crate) mod expiry;
pub(crate) mod extension;
pub(crate) mod latency;
pub(crate) mod memory;
pub(crate) mod scaling;
pub(crate) mod throughput;

/// How big a run is.
#[derive(Debug, Clone)]
pub(crate) struct Profile {
    pub(crate) name: &'static str,
    /// Measured interval of the duration-based scenarios.
    pub(crate) duration: Duration,
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
}

impl Profile {
    /// A few seconds in all: proves every scenario still runs (CI).
    pub(crate) fn smoke() -> Self {
        Profile {
            name: "smoke",
            duration: Duration::from_millis(40),
            threads: vec![1, 2],
            expiry_counts: vec![1_000, 10_000],
            latency_messages: 5_000,
            memory_messages: 2_000,
            extension: (200, 2_000, 10),
            delay_messages: 1_000,
        }
    }

    /// The documented full run (minutes).
    pub(crate) fn full() -> Self {
        Profile {
            name: "full",
            duration: Duration::from_secs(2),
            threads: vec![1, 2, 4],
            expiry_counts: vec![1_000, 10_000, 100_000, 1_000_000, 10_000_000],
            latency_messages: 1_000_000,
            memory_messages: 1_000_000,
            extension: (10_000, 100_000, 100),
            delay_messages: 20_000,
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
