//! Faults against a 3-node `leaseq-server --cluster` group under a mixed
//! SQS load: kill -9 of the leader, of a follower, of two nodes in turn
//! (no quorum: nothing may be acknowledged), SIGSTOP of the leader past its
//! election timeout, kill -9 of every node at once, and restarts from the
//! data dirs. Afterwards the queue
//! is drained and the client's log of calls is reconciled:
//!
//! * no acknowledged send is lost (every one was deleted or is still there);
//! * no acknowledged delete is undone (its message is never delivered by a
//!   receive that started after the delete returned);
//! * no message is delivered twice inside one lease (a second delivery ends
//!   before the first one's lease could have run out);
//! * delivery counts only go up;
//! * with two of three nodes down, no send is acknowledged.
//!
//! `LEASEQ_CLUSTER_FAULTS` sets the number of faults (default 20, the CI
//! size); `bench/cluster-faults.sh` runs it long and records the result.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::cluster::{ELECTION_MS, Outcome, ProcessCluster, Rng, queue_url, sqs};
use serde_json::{Value, json};

/// Every client call's bound.
const CALL: Duration = Duration::from_secs(5);
/// The lease each receive asks for (seconds).
const VISIBILITY: u64 = 3;
const WORKERS: usize = 4;
/// Bound on each wait for a serving leader after a fault.
const RECOVERY: Duration = Duration::from_secs(30);

/// One delivery a client saw.
#[derive(Debug, Clone)]
struct Delivery {
    body: String,
    receipt: String,
    count: u64,
    started: Instant,
    ended: Instant,
}

/// The client's log.
#[derive(Debug, Default)]
struct Log {
    /// Sends by body: whether acknowledged (`Some(true)`), refused
    /// (`Some(false)`) or unknown (`None`).
    sends: BTreeMap<String, Option<bool>>,
    deliveries: Vec<Delivery>,
    /// Deletes by receipt: acknowledged at (`Ok`), or unknown.
    deletes_ok: Vec<(String, String, Instant)>,
    deletes_unknown: BTreeSet<String>,
    /// Sends made while two nodes were down, and how they ended.
    no_quorum_sends: Vec<Outcome>,
}

fn lock(log: &Mutex<Log>) -> std::sync::MutexGuard<'_, Log> {
    log.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn receive(addr: SocketAddr, url: &str, visibility: u64) -> (Instant, Outcome, Instant) {
    let started = Instant::now();
    let body = json!({
        "QueueUrl": url, "MaxNumberOfMessages": 5, "VisibilityTimeout": visibility,
        "AttributeNames": ["ApproximateReceiveCount"],
    });
    let outcome = sqs(addr, "ReceiveMessage", &body, CALL).await;
    (started, outcome, Instant::now())
}

fn deliveries_of(json: &Value, started: Instant, ended: Instant) -> Vec<Delivery> {
    json["Messages"]
        .as_array()
        .map(|messages| {
            messages
                .iter()
                .map(|m| Delivery {
                    body: m["Body"].as_str().unwrap().to_string(),
                    receipt: m["ReceiptHandle"].as_str().unwrap().to_string(),
                    count: m["Attributes"]["ApproximateReceiveCount"].as_str().unwrap().parse().unwrap(),
                    started,
                    ended,
                })
                .collect()
        })
        .unwrap_or_default()
}

/// One client: sends unique bodies and receives, deleting most deliveries
/// (the rest are left to expire, as a crashed consumer's would).
async fn worker(worker: usize, addrs: Vec<SocketAddr>, stop: Arc<AtomicBool>, log: Arc<Mutex<Log>>) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (worker as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03));
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let addr = addrs[rng.below(addrs.len())];
        let url = queue_url(addr, "jobs");
        if rng.below(10) < 4 {
            seq += 1;
            let body = format!("w{worker}-{seq}");
            let outcome = sqs(addr, "SendMessage", &json!({"QueueUrl": url, "MessageBody": body}), CALL).await;
            if std::env::var_os("LEASEQ_CLUSTER_DEBUG").is_some() {
                eprintln!("{:?} send via {addr}: {outcome:?}", std::time::SystemTime::now());
            }
            let result = match &outcome {
                Outcome::Ok(_) => Some(true),
                refused if !refused.is_unknown() => Some(false),
                _ => None,
            };
            lock(&log).sends.insert(body, result);
        } else {
            let (started, outcome, ended) = receive(addr, &url, VISIBILITY).await;
            if std::env::var_os("LEASEQ_CLUSTER_DEBUG").is_some() {
                eprintln!(
                    "{:?} receive via {addr} took {:?}: {outcome:?}",
                    std::time::SystemTime::now(),
                    ended - started
                );
            }
            let Outcome::Ok(json) = outcome else {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            };
            let got = deliveries_of(&json, started, ended);
            lock(&log).deliveries.extend(got.iter().cloned());
            for delivery in got {
                if rng.below(10) < 2 {
                    continue;
                }
                let addr = addrs[rng.below(addrs.len())];
                let body = json!({"QueueUrl": queue_url(addr, "jobs"), "ReceiptHandle": delivery.receipt});
                let outcome = sqs(addr, "DeleteMessage", &body, CALL).await;
                let mut log = lock(&log);
                match outcome {
                    Outcome::Ok(_) => log.deletes_ok.push((delivery.body, delivery.receipt, Instant::now())),
                    other if other.is_unknown() => {
                        log.deletes_unknown.insert(delivery.receipt);
                    }
                    _ => {} // refused: the lease had run out or moved on
                }
            }
        }
    }
}

async fn leader(cluster: &ProcessCluster) -> u64 {
    match cluster.serving_leader(RECOVERY).await {
        Some(id) => id,
        None => {
            let mut statuses = String::new();
            for id in cluster.live() {
                statuses.push_str(&format!("node {id}: {:?}\n", cluster.status(id).await));
            }
            panic!("no serving leader within {RECOVERY:?}\n{statuses}{}", cluster.logs())
        }
    }
}

fn others(cluster: &ProcessCluster, not: u64) -> Vec<u64> {
    cluster.nodes.keys().copied().filter(|&id| id != not).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_pause_and_restart_lose_no_acknowledged_call() {
    let faults: usize = std::env::var("LEASEQ_CLUSTER_FAULTS").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
    let mut cluster = ProcessCluster::start("faults", 3);
    let first = leader(&cluster).await;
    let created = sqs(cluster.addr(first), "CreateQueue", &json!({"QueueName": "jobs"}), CALL).await;
    assert!(matches!(created, Outcome::Ok(_)), "{created:?}");

    let addrs: Vec<SocketAddr> = cluster.nodes.values().map(|n| n.addr).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let log = Arc::new(Mutex::new(Log::default()));
    let workers: Vec<_> =
        (0..WORKERS).map(|w| tokio::spawn(worker(w, addrs.clone(), stop.clone(), log.clone()))).collect();

    let pause = Duration::from_millis(4 * ELECTION_MS);
    let started = Instant::now();
    for fault in 0..faults {
        // Steady load between faults.
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let leading = leader(&cluster).await;
        if std::env::var_os("LEASEQ_CLUSTER_DEBUG").is_some() {
            eprintln!("{:?} fault {fault} (kind {}), leader {leading}", std::time::SystemTime::now(), fault % 5);
        }
        match fault % 5 {
            0 => {
                cluster.kill(leading);
                tokio::time::sleep(Duration::from_millis(700)).await;
                cluster.spawn(leading);
            }
            1 => {
                let follower = others(&cluster, leading)[fault % 2];
                cluster.kill(follower);
                tokio::time::sleep(Duration::from_millis(700)).await;
                cluster.spawn(follower);
            }
            2 => {
                // Two of three down, one after the other: the survivor must
                // acknowledge nothing.
                let follower = others(&cluster, leading)[0];
                cluster.kill(follower);
                tokio::time::sleep(Duration::from_millis(300)).await;
                cluster.kill(leading);
                let survivor = cluster.live()[0];
                tokio::time::sleep(Duration::from_millis(2 * ELECTION_MS)).await;
                let addr = cluster.addr(survivor);
                let body = json!({"QueueUrl": queue_url(addr, "jobs"), "MessageBody": format!("no-quorum-{fault}")});
                let outcome = sqs(addr, "SendMessage", &body, CALL).await;
                lock(&log).no_quorum_sends.push(outcome);
                cluster.spawn(follower);
                cluster.spawn(leading);
            }
            3 => {
                cluster.pause(leading);
                tokio::time::sleep(pause).await;
                cluster.resume(leading);
            }
            _ => {
                // Every node at once: what was acknowledged is on disk.
                let all: Vec<u64> = cluster.nodes.keys().copied().collect();
                for &id in &all {
                    cluster.kill(id);
                }
                for &id in &all {
                    cluster.spawn(id);
                }
            }
        }
    }
    leader(&cluster).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        tokio::time::timeout(Duration::from_secs(30), worker).await.expect("workers stop").unwrap();
    }
    let fault_time = started.elapsed();

    // Drain: after every lease has run out, take everything left (long
    // leases, so nothing comes back during the drain).
    tokio::time::sleep(Duration::from_secs(VISIBILITY + 1)).await;
    let mut drained = BTreeSet::new();
    let mut empty = 0;
    let drain_deadline = Instant::now() + Duration::from_secs(60);
    while empty < 3 {
        assert!(Instant::now() < drain_deadline, "the drain did not finish\n{}", cluster.logs());
        let addr = cluster.addr(leader(&cluster).await);
        let (started, outcome, ended) = receive(addr, &queue_url(addr, "jobs"), 600).await;
        let Outcome::Ok(json) = outcome else { continue };
        let got = deliveries_of(&json, started, ended);
        if got.is_empty() {
            empty += 1;
        }
        for delivery in got {
            drained.insert(delivery.body.clone());
            lock(&log).deliveries.push(delivery);
        }
    }

    let log = lock(&log);
    let acked_sends: Vec<&String> = log.sends.iter().filter(|(_, r)| **r == Some(true)).map(|(b, _)| b).collect();
    let deleted_ok: BTreeSet<&String> = log.deletes_ok.iter().map(|(body, _, _)| body).collect();
    let unknown_deleted: BTreeSet<&String> =
        log.deliveries.iter().filter(|d| log.deletes_unknown.contains(&d.receipt)).map(|d| &d.body).collect();
    eprintln!(
        "{faults} faults in {fault_time:?}: {} sends acknowledged ({} refused, {} unknown), {} deliveries, {} deletes \
         acknowledged, {} drained",
        acked_sends.len(),
        log.sends.values().filter(|r| **r == Some(false)).count(),
        log.sends.values().filter(|r| r.is_none()).count(),
        log.deliveries.len(),
        log.deletes_ok.len(),
        drained.len()
    );
    assert!(acked_sends.len() >= faults, "too little load got through: {} sends", acked_sends.len());

    // No acknowledged send lost.
    for body in &acked_sends {
        assert!(
            deleted_ok.contains(body) || drained.contains(*body) || unknown_deleted.contains(body),
            "acknowledged send {body} was lost"
        );
    }
    // No acknowledged delete undone.
    let mut by_body: BTreeMap<&str, Vec<&Delivery>> = BTreeMap::new();
    for delivery in &log.deliveries {
        by_body.entry(&delivery.body).or_default().push(delivery);
    }
    for (body, _, at) in &log.deletes_ok {
        if let Some(later) = by_body.get(body.as_str()).and_then(|d| d.iter().find(|d| d.started > *at)) {
            panic!("{body} was deleted (acknowledged) and then delivered again: {later:?}");
        }
    }
    // No delivery inside another's lease; counts only go up.
    let lease = Duration::from_secs(VISIBILITY);
    for (body, deliveries) in &mut by_body {
        deliveries.sort_by_key(|d| d.started);
        for pair in deliveries.windows(2) {
            let (first, second) = (pair[0], pair[1]);
            assert!(
                second.ended >= first.started + lease,
                "{body} was delivered again inside its lease: {first:?} then {second:?}"
            );
            if first.ended < second.started {
                assert!(second.count > first.count, "{body}'s delivery count went back: {first:?} then {second:?}");
            }
        }
    }
    // No progress without a quorum.
    for outcome in &log.no_quorum_sends {
        assert!(!matches!(outcome, Outcome::Ok(_)), "a send was acknowledged with two of three nodes down");
    }
}
