//! Open-loop latency: a producer sends on a fixed schedule of intended send
//! times and every latency is measured from the intended time, so a stall
//! delays the measurements of every message scheduled during it instead of
//! hiding them (no coordinated omission). A consumer polls, receives and acks.
//!
//! Measured per message, in nanoseconds:
//! * send: send returned − intended send time;
//! * receive: receive returned the message − intended send time;
//! * ack: the ack call alone;
//! * end_to_end: ack returned − intended send time.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use hdrhistogram::Histogram;
use leaseq_bench::{Setup, Subject};
use serde_json::{Value, json};

use super::tick;

/// The percentiles reported (as quantiles), then max.
pub(crate) const QUANTILES: [(f64, &str); 5] =
    [(0.5, "p50"), (0.9, "p90"), (0.99, "p99"), (0.999, "p99.9"), (0.9999, "p99.99")];

/// The four distributions of one run.
#[derive(Debug)]
pub(crate) struct Latencies {
    pub(crate) send: Histogram<u64>,
    pub(crate) receive: Histogram<u64>,
    pub(crate) ack: Histogram<u64>,
    pub(crate) end_to_end: Histogram<u64>,
    /// The rate the schedule offered and the rate achieved.
    pub(crate) offered_per_s: f64,
    pub(crate) achieved_per_s: f64,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid histogram bounds")
}

pub(crate) fn percentiles(h: &Histogram<u64>) -> Value {
    let mut map = serde_json::Map::new();
    for (q, name) in QUANTILES {
        map.insert(name.into(), json!(h.value_at_quantile(q)));
    }
    map.insert("max".into(), json!(h.max()));
    map.insert("count".into(), json!(h.len()));
    Value::Object(map)
}

/// A percentile curve for the chart: (quantile, nanoseconds) pairs.
pub(crate) fn curve(h: &Histogram<u64>) -> Value {
    let points: Vec<Value> = [0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9995, 0.9999, 0.99999, 1.0]
        .iter()
        .map(|q| json!([q, h.value_at_quantile(*q)]))
        .collect();
    Value::Array(points)
}

impl Latencies {
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "offered_per_s": self.offered_per_s, "achieved_per_s": self.achieved_per_s,
            "send": percentiles(&self.send), "receive": percentiles(&self.receive),
            "ack": percentiles(&self.ack), "end_to_end": percentiles(&self.end_to_end),
            "curves": {"receive": curve(&self.receive), "ack": curve(&self.ack),
                       "end_to_end": curve(&self.end_to_end), "send": curve(&self.send)},
        })
    }
}

/// The consumer's three distributions.
struct Consumed {
    receive: Histogram<u64>,
    ack: Histogram<u64>,
    end_to_end: Histogram<u64>,
}

impl Consumed {
    fn new() -> Self {
        Consumed { receive: histogram(), ack: histogram(), end_to_end: histogram() }
    }

    /// Acks `d` and records its three latencies; `received` is when the
    /// receive returned it, and the ack is timed from there too (one clock
    /// read fewer per message: the harness's own reads are a visible share of
    /// a message's cost at millions a second).
    fn ack_and_record<S: Subject>(&mut self, queue: &S, d: &S::Delivery, received: u64) {
        let intended = intended_of(S::payload(d));
        queue.ack(S::receipt(d));
        let acked = tick();
        self.receive.record(received.saturating_sub(intended).max(1)).ok();
        self.ack.record(acked.saturating_sub(received).max(1)).ok();
        self.end_to_end.record(acked.saturating_sub(intended).max(1)).ok();
    }
}

/// The schedule: message `i` is due at `start + i * interval`.
struct Schedule {
    start: u64,
    interval: f64,
}

impl Schedule {
    fn new(rate: f64) -> Self {
        Schedule { start: tick() + 1_000, interval: 1e9 / rate }
    }

    fn intended(&self, i: usize) -> u64 {
        self.start + (i as f64 * self.interval) as u64
    }
}

/// Sends the message intended for `intended` (the time travels in its
/// payload), records the send latency and returns when the send returned.
fn send_on_schedule<S: Subject>(queue: &S, intended: u64, send: &mut Histogram<u64>) -> u64 {
    let mut body = [0u8; 16];
    body[..8].copy_from_slice(&intended.to_le_bytes());
    while !queue.send(Bytes::copy_from_slice(&body)) {
        std::hint::spin_loop();
    }
    let sent = tick();
    send.record(sent.saturating_sub(intended).max(1)).ok();
    sent
}

/// Sends `messages` at `rate` per second from one thread, consumed by another.
pub(crate) fn run<S: Subject>(rate: f64, messages: usize) -> Latencies {
    let setup = Setup { shards: 1, capacity: 1 << 20, ..Setup::default() };
    let queue = Arc::new(S::build(&setup));
    let done = Arc::new(AtomicBool::new(false));
    let barrier = Arc::new(std::sync::Barrier::new(2));
    let consumer = {
        let (queue, done, barrier) = (queue.clone(), done.clone(), barrier.clone());
        std::thread::spawn(move || {
            let mut consumed = Consumed::new();
            barrier.wait();
            let mut seen = 0;
            let mut deliveries = Vec::with_capacity(1);
            while seen < messages {
                deliveries.clear();
                queue.receive_into(1, &mut deliveries);
                let Some(d) = deliveries.first() else {
                    if done.load(Ordering::Acquire) && seen >= messages {
                        break;
                    }
                    std::hint::spin_loop();
                    continue;
                };
                consumed.ack_and_record(&*queue, d, tick());
                seen += 1;
            }
            consumed
        })
    };
    let mut send = histogram();
    barrier.wait();
    let schedule = Schedule::new(rate);
    for i in 0..messages {
        let intended = schedule.intended(i);
        while tick() < intended {
            std::hint::spin_loop();
        }
        send_on_schedule(&*queue, intended, &mut send);
    }
    let sent_by = tick();
    done.store(true, Ordering::Release);
    let consumed = consumer.join().expect("the latency consumer panicked");
    latencies(send, consumed, rate, messages, sent_by - schedule.start)
}

/// The same schedule, sent and consumed by one thread: it sends each message
/// when its time comes and receives and acks in between. Leaves the machine's
/// other core to everything else (the engine's driver, the rest of the
/// system), so it shows the queue's own latency where the two-thread run shows
/// the machine's stalls as well.
pub(crate) fn run_one_thread<S: Subject>(rate: f64, messages: usize) -> Latencies {
    let setup = Setup { shards: 1, capacity: 1 << 20, ..Setup::default() };
    let queue = S::build(&setup);
    let (mut send, mut consumed) = (histogram(), Consumed::new());
    let mut deliveries = Vec::with_capacity(1);
    let schedule = Schedule::new(rate);
    let (mut sent, mut seen) = (0, 0);
    let mut sent_by = schedule.start;
    while seen < messages {
        if sent < messages {
            let intended = schedule.intended(sent);
            if tick() >= intended {
                sent_by = send_on_schedule(&queue, intended, &mut send);
                sent += 1;
                continue;
            }
        }
        deliveries.clear();
        queue.receive_into(1, &mut deliveries);
        if let Some(d) = deliveries.first() {
            consumed.ack_and_record(&queue, d, tick());
            seen += 1;
        } else {
            std::hint::spin_loop();
        }
    }
    latencies(send, consumed, rate, messages, sent_by - schedule.start)
}

fn latencies(send: Histogram<u64>, consumed: Consumed, rate: f64, messages: usize, sending_ns: u64) -> Latencies {
    Latencies {
        send,
        receive: consumed.receive,
        ack: consumed.ack,
        end_to_end: consumed.end_to_end,
        offered_per_s: rate,
        achieved_per_s: messages as f64 / (sending_ns.max(1) as f64 / 1e9),
    }
}

fn intended_of(payload: &Bytes) -> u64 {
    let mut raw = [0u8; 8];
    raw.copy_from_slice(&payload[..8]);
    u64::from_le_bytes(raw)
}
