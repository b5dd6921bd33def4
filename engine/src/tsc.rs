//! The CPU's time-stamp counter, calibrated to nanoseconds: the fast path of
//! `SystemClock`.
//!
//! Reading `Instant` costs 40–50 ns on the machines we measured (a vDSO call
//! plus `timespec` arithmetic), and the engine reads the clock once per send,
//! receive and ack: about a quarter of a whole cycle. A fenced `rdtsc` and a
//! multiply cost under 20 ns.
//!
//! Invariant: a `Tsc` exists only where the counter is a clock every CPU
//! agrees on. We use it only on x86-64 Linux whose kernel keeps time with it
//! (clocksource `tsc`): the kernel selects that clocksource only after
//! checking that the counter runs at a constant rate through frequency and
//! sleep-state changes and is synchronised across CPUs, and falls back to
//! another clocksource when a check fails. Everywhere else (other systems and
//! architectures, `kvm-clock`, `hpet`) there is no `Tsc` and `SystemClock`
//! reads `Instant`.
//!
//! Ordering: each read is preceded by `lfence`, which waits until every
//! earlier instruction has completed. A thread that has observed another
//! thread's store (say, a published lease) therefore reads the counter after
//! that store was visible, hence after the other thread's own earlier read:
//! times never go backwards along a happens-before chain, which is what
//! deadlines compared across threads need.
//!
//! `ticks_relaxed` leaves the fence out (`SystemClock::now_relaxed`). The
//! fence is most of a read's cost (about 12 ns of it here), and the engine
//! stamps every send, receive and ack. What the engine does with a stamp does
//! not need the ordering: each lease transition is decided by a
//! compare-exchange on the lease word, never by comparing two threads'
//! clocks, so a stamp taken a few nanoseconds early only moves an ack's
//! "late" verdict or a statistic by that much, and every difference of two
//! stamps saturates at zero. The counter itself never runs ahead, so an early
//! reading never makes a deadline fire early.
//!
//! The rate is measured against `Instant` over 10 ms, once per process, so it
//! carries whatever NTP slew `CLOCK_MONOTONIC` had then (at most 0.05%).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A calibrated counter: `nanos = ticks * nanos_per_tick_q32 >> 32`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tsc {
    nanos_per_tick_q32: u64,
}

/// How long calibration measures the counter's rate.
const CALIBRATION: Duration = Duration::from_millis(10);

impl Tsc {
    /// The process's calibrated counter, or `None` where it must not be used
    /// (see the module invariant). The first call takes about 10 ms.
    pub(crate) fn get() -> Option<Tsc> {
        static CALIBRATED: OnceLock<Option<Tsc>> = OnceLock::new();
        *CALIBRATED.get_or_init(Self::calibrate)
    }

    fn calibrate() -> Option<Tsc> {
        if !kernel_keeps_time_with_tsc() {
            return None;
        }
        let (start_instant, start_ticks) = paired_sample()?;
        std::thread::sleep(CALIBRATION);
        let (end_instant, end_ticks) = paired_sample()?;
        let nanos = end_instant.duration_since(start_instant).as_nanos();
        let ticks = u128::from(end_ticks.checked_sub(start_ticks)?);
        // A counter outside 100 MHz..20 GHz is not a TSC we understand.
        let per_second = ticks * 1_000_000_000 / nanos.max(1);
        if !(100_000_000..=20_000_000_000).contains(&per_second) {
            return None;
        }
        let nanos_per_tick_q32 = u64::try_from((nanos << 32) / ticks).ok()?;
        Some(Tsc { nanos_per_tick_q32 })
    }

    /// The counter now.
    #[inline]
    pub(crate) fn ticks(self) -> u64 {
        read_ticks()
    }

    /// The counter now, without the fence: the read may execute before
    /// earlier instructions complete (see the module docs).
    #[inline]
    pub(crate) fn ticks_relaxed(self) -> u64 {
        read_ticks_relaxed()
    }

    /// Nanoseconds in `ticks` counter ticks.
    #[inline]
    pub(crate) fn nanos(self, ticks: u64) -> u64 {
        ((u128::from(ticks) * u128::from(self.nanos_per_tick_q32)) >> 32) as u64
    }
}

/// An `Instant` and the counter read as close together as we can: the read
/// pair (of five) with the fewest ticks around the `Instant`, stamped with the
/// midpoint.
fn paired_sample() -> Option<(Instant, u64)> {
    (0..5)
        .filter_map(|_| {
            let before = read_ticks();
            let instant = Instant::now();
            let after = read_ticks();
            let gap = after.checked_sub(before)?;
            Some((gap, instant, before + gap / 2))
        })
        .min_by_key(|(gap, _, _)| *gap)
        .map(|(_, instant, ticks)| (instant, ticks))
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn kernel_keeps_time_with_tsc() -> bool {
    std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .is_ok_and(|source| source.trim() == "tsc")
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn kernel_keeps_time_with_tsc() -> bool {
    false
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[inline]
fn read_ticks() -> u64 {
    // SAFETY: `lfence` (SSE2) and `rdtsc` are part of the x86-64 baseline
    // every x86-64 CPU implements; neither touches memory.
    unsafe {
        core::arch::x86_64::_mm_lfence();
        core::arch::x86_64::_rdtsc()
    }
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[inline]
fn read_ticks_relaxed() -> u64 {
    // SAFETY: `rdtsc` is part of the x86-64 baseline every x86-64 CPU
    // implements; it touches no memory.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn read_ticks() -> u64 {
    unreachable!("no Tsc is handed out where the counter is not used")
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn read_ticks_relaxed() -> u64 {
    unreachable!("no Tsc is handed out where the counter is not used")
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Where the counter is used, its calibrated rate agrees with `Instant`
    /// over a longer interval than calibration measured (generous bounds:
    /// the sleep may be descheduled, the rates may not drift).
    #[test]
    fn calibrated_rate_agrees_with_instant() {
        let Some(tsc) = Tsc::get() else {
            assert!(!kernel_keeps_time_with_tsc(), "the kernel uses the TSC but calibration refused it");
            return;
        };
        let (i0, t0) = paired_sample().unwrap();
        std::thread::sleep(Duration::from_millis(60));
        let (i1, t1) = paired_sample().unwrap();
        let by_instant = i1.duration_since(i0).as_nanos() as f64;
        let by_counter = tsc.nanos(t1 - t0) as f64;
        let error = (by_counter - by_instant).abs() / by_instant;
        assert!(error < 0.002, "counter {by_counter} ns vs Instant {by_instant} ns");
    }
}
