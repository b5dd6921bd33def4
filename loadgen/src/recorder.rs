//! Per-operation latency histograms (HdrHistogram, nanoseconds, three
//! significant digits) and counters of one worker; workers' recorders merge
//! into the run's.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// The longest latency a histogram holds; longer ones are clamped to it.
const MAX_NANOS: u64 = 60_000_000_000;

/// Latencies and counts of one worker or of a whole run.
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    histograms: BTreeMap<&'static str, Histogram<u64>>,
    /// Messages confirmed sent.
    pub(crate) sent: u64,
    /// Messages deleted (acked) after a receive.
    pub(crate) acked: u64,
    /// Receives that returned no message.
    pub(crate) empty_receives: u64,
    /// Received messages whose delete was refused because the lease was lost.
    pub(crate) lost_leases: u64,
}

/// Percentiles of one operation, in microseconds.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub(crate) struct Percentiles {
    pub(crate) count: u64,
    pub(crate) p50_us: f64,
    pub(crate) p99_us: f64,
    pub(crate) p999_us: f64,
    pub(crate) max_us: f64,
}

impl Recorder {
    /// Adds one request's latency under `operation`.
    pub(crate) fn record(&mut self, operation: &'static str, latency: Duration) {
        let nanos = u64::try_from(latency.as_nanos()).unwrap_or(MAX_NANOS).clamp(1, MAX_NANOS);
        let histogram = self
            .histograms
            .entry(operation)
            .or_insert_with(|| Histogram::new_with_bounds(1, MAX_NANOS, 3).expect("valid histogram bounds"));
        histogram.saturating_record(nanos);
    }

    /// Folds another recorder into this one.
    pub(crate) fn merge(&mut self, other: Recorder) {
        self.sent += other.sent;
        self.acked += other.acked;
        self.empty_receives += other.empty_receives;
        self.lost_leases += other.lost_leases;
        for (operation, histogram) in other.histograms {
            match self.histograms.get_mut(operation) {
                Some(mine) => mine.add(&histogram).expect("histograms with equal bounds"),
                None => {
                    self.histograms.insert(operation, histogram);
                }
            }
        }
    }

    /// Each operation's percentiles.
    pub(crate) fn percentiles(&self) -> BTreeMap<String, Percentiles> {
        let us = |nanos: u64| nanos as f64 / 1000.0;
        self.histograms
            .iter()
            .map(|(operation, h)| {
                let summary = Percentiles {
                    count: h.len(),
                    p50_us: us(h.value_at_quantile(0.50)),
                    p99_us: us(h.value_at_quantile(0.99)),
                    p999_us: us(h.value_at_quantile(0.999)),
                    max_us: us(h.max()),
                };
                (operation.to_string(), summary)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_recorders_add_counts_and_keep_percentiles() {
        let mut a = Recorder::default();
        let mut b = Recorder::default();
        for _ in 0..99 {
            a.record("send", Duration::from_micros(10));
        }
        b.record("send", Duration::from_millis(5));
        b.acked = 3;
        a.merge(b);
        let p = &a.percentiles()["send"];
        assert_eq!(p.count, 100);
        assert!((p.p50_us - 10.0).abs() < 0.1);
        assert!(p.max_us >= 4990.0);
        assert_eq!(a.acked, 3);
    }
}
