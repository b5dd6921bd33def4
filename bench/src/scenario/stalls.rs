//! How often this machine takes the CPU away from a spinning thread.
//!
//! An open-loop latency run keeps its threads busy; a stall of the machine
//! (another process, a kernel thread, the hypervisor) delays every message
//! scheduled during it, whatever the queue. This probe measures those stalls
//! in the same process, without any queue: `threads` threads each read the
//! clock in a tight loop for `duration`, and every gap between two reads above
//! `GAP_NS` is a stall.
//!
//! Invariant: the probe touches no shared memory while it measures (each
//! thread keeps its own tallies), so what it reports is the machine, not the
//! probe.

use std::time::Duration;

use serde_json::{Value, json};

use super::tick;

/// A gap between two clock reads longer than this is counted as a stall: far
/// above the cost of a read (tens of nanoseconds), below any latency target.
pub(crate) const GAP_NS: u64 = 10_000;

/// What `threads` spinning threads saw.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stalls {
    pub(crate) threads: usize,
    /// Share of the spinning time lost in stalls (0..1).
    pub(crate) lost_share: f64,
    /// Stalls of a millisecond or more, per second per thread.
    pub(crate) long_per_s: f64,
    /// Stalls above `GAP_NS`, per second per thread.
    pub(crate) per_s: f64,
    /// The longest stall of any thread, in nanoseconds.
    pub(crate) longest_ns: u64,
}

impl Stalls {
    pub(crate) fn to_json(self) -> Value {
        json!({"threads": self.threads, "gap_threshold_ns": GAP_NS, "lost_share": self.lost_share,
               "stalls_per_s_per_thread": self.per_s, "stalls_of_1ms_or_more_per_s_per_thread": self.long_per_s,
               "longest_ns": self.longest_ns})
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    lost_ns: u64,
    stalls: u64,
    long: u64,
    longest_ns: u64,
}

/// Spins `threads` threads for `duration` and tallies their stalls.
pub(crate) fn probe(threads: usize, duration: Duration) -> Stalls {
    let span = duration.as_nanos() as u64;
    let barrier = std::sync::Barrier::new(threads);
    let tallies: Vec<Tally> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    barrier.wait();
                    let mut tally = Tally::default();
                    let start = tick();
                    let mut last = start;
                    while last - start < span {
                        let now = tick();
                        let gap = now - last;
                        if gap > GAP_NS {
                            tally.lost_ns += gap;
                            tally.stalls += 1;
                            tally.long += u64::from(gap >= 1_000_000);
                            tally.longest_ns = tally.longest_ns.max(gap);
                        }
                        last = now;
                    }
                    tally
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().expect("a stall probe thread panicked")).collect()
    });
    let seconds = duration.as_secs_f64() * threads as f64;
    Stalls {
        threads,
        lost_share: tallies.iter().map(|t| t.lost_ns).sum::<u64>() as f64 / (span as f64 * threads as f64),
        long_per_s: tallies.iter().map(|t| t.long).sum::<u64>() as f64 / seconds,
        per_s: tallies.iter().map(|t| t.stalls).sum::<u64>() as f64 / seconds,
        longest_ns: tallies.iter().map(|t| t.longest_ns).max().unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tallies are consistent with each other whatever the machine does:
    /// a stall is at least the threshold long, so the time lost is at least
    /// threshold x count, and no stall is longer than the time lost.
    #[test]
    fn tallies_agree_with_each_other() {
        let s = probe(1, Duration::from_millis(50));
        let seconds = 0.05;
        let lost_ns = s.lost_share * 0.05e9;
        assert!(lost_ns + 1.0 >= s.per_s * seconds * GAP_NS as f64);
        assert!(s.longest_ns as f64 <= lost_ns + 1.0);
        assert!(s.long_per_s <= s.per_s);
        assert!((0.0..=1.0).contains(&s.lost_share));
    }
}
