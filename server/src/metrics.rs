//! `GET /metrics`: the server's request counts and each queue's engine stats
//! in the Prometheus text format.
//!
//! Invariant: label values come from fixed sets (known action names, SQS
//! error codes) or from queue names, which are letters, digits, `-` and `_`
//! only, so the output needs no escaping and its cardinality is bounded by
//! the number of queues.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

use crate::api::ACTIONS;
use crate::error::ErrorCode;
use crate::registry::Registry;

/// Requests answered, by action and outcome (`ok` or the error shape).
#[derive(Debug, Default)]
pub(crate) struct RequestCounts {
    counts: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
}

impl RequestCounts {
    /// Counts one answered request; an unknown action counts as `unknown`.
    pub(crate) fn record(&self, action: Option<&str>, error: Option<ErrorCode>) {
        let action = action.and_then(|a| ACTIONS.iter().find(|known| **known == a).copied()).unwrap_or("unknown");
        let outcome = error.map_or("ok", ErrorCode::shape);
        *self.counts.lock().unwrap_or_else(|p| p.into_inner()).entry((action, outcome)).or_default() += 1;
    }
}

/// The exposition text.
pub(crate) fn render(registry: Option<&Registry>, requests: &RequestCounts, (open, max): (usize, usize)) -> String {
    let mut out = String::new();
    out.push_str("# HELP leaseq_server_connections Connections open now (this scrape's included).\n");
    out.push_str("# TYPE leaseq_server_connections gauge\n");
    let _ = writeln!(out, "leaseq_server_connections {open}");
    out.push_str("# HELP leaseq_server_max_connections Connections the server keeps open at most.\n");
    out.push_str("# TYPE leaseq_server_max_connections gauge\n");
    let _ = writeln!(out, "leaseq_server_max_connections {max}");
    out.push_str("# HELP leaseq_sqs_requests_total SQS requests answered, by action and outcome.\n");
    out.push_str("# TYPE leaseq_sqs_requests_total counter\n");
    for ((action, outcome), n) in requests.counts.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        let _ = writeln!(out, "leaseq_sqs_requests_total{{action=\"{action}\",outcome=\"{outcome}\"}} {n}");
    }
    // A cluster node that does not lead has no queues of its own to show.
    let stats: Vec<(String, leaseq::QueueStats)> = registry.map_or_else(Vec::new, |registry| {
        registry
            .names("")
            .into_iter()
            .filter_map(|name| registry.get(&name).ok().map(|entry| (name, entry.queue.stats())))
            .collect()
    });
    out.push_str("# HELP leaseq_queue_messages Messages in a queue, by state.\n");
    out.push_str("# TYPE leaseq_queue_messages gauge\n");
    for (name, s) in &stats {
        for (state, n) in [("ready", s.ready), ("delayed", s.delayed), ("in_flight", s.in_flight)] {
            let _ = writeln!(out, "leaseq_queue_messages{{queue=\"{name}\",state=\"{state}\"}} {n}");
        }
    }
    out.push_str("# HELP leaseq_queue_oldest_ready_age_seconds Age of the oldest ready message (0 if none).\n");
    out.push_str("# TYPE leaseq_queue_oldest_ready_age_seconds gauge\n");
    for (name, s) in &stats {
        let age = s.oldest_ready_age.map_or(0.0, |d| d.as_secs_f64());
        let _ = writeln!(out, "leaseq_queue_oldest_ready_age_seconds{{queue=\"{name}\"}} {age}");
    }
    out.push_str("# HELP leaseq_queue_events_total Lease events of a queue since the engine started.\n");
    out.push_str("# TYPE leaseq_queue_events_total counter\n");
    for (name, s) in &stats {
        for (event, n) in [
            ("sent", s.sent),
            ("received", s.received),
            ("redelivered", s.redelivered),
            ("acked", s.acked),
            ("late_acks", s.late_acks),
            ("stale_acks", s.stale_acks),
            ("expired", s.expired),
            ("extensions", s.extensions),
            ("extensions_refused", s.extensions_refused),
            ("released", s.released),
            ("dead_lettered", s.dead_lettered),
            ("purged", s.purged),
            ("redriven_out", s.redriven_out),
            ("retention_dropped", s.retention_dropped),
        ] {
            let _ = writeln!(out, "leaseq_queue_events_total{{queue=\"{name}\",event=\"{event}\"}} {n}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn renders_requests_and_queue_stats() {
        let registry = Registry::open(leaseq::Engine::new(), None).unwrap();
        registry.create("jobs", &HashMap::new(), &HashMap::new()).unwrap();
        registry.get("jobs").unwrap().queue.send(&b"x"[..]).unwrap();
        let requests = RequestCounts::default();
        requests.record(Some("SendMessage"), None);
        requests.record(Some("SendMessage"), None);
        requests.record(Some("NoSuchThing\"}"), Some(ErrorCode::UnknownOperation));
        let text = render(Some(&registry), &requests, (3, 10));
        assert!(text.contains("leaseq_sqs_requests_total{action=\"SendMessage\",outcome=\"ok\"} 2\n"), "{text}");
        assert!(text.contains("{action=\"unknown\",outcome=\"UnknownOperationException\"} 1\n"), "{text}");
        assert!(text.contains("leaseq_queue_messages{queue=\"jobs\",state=\"ready\"} 1\n"), "{text}");
        assert!(text.contains("leaseq_queue_events_total{queue=\"jobs\",event=\"sent\"} 1\n"), "{text}");
        assert!(text.contains("leaseq_server_connections 3\n"), "{text}");
        assert!(text.contains("leaseq_server_max_connections 10\n"), "{text}");
    }
}
