//! Linearizability of a 3-node `leaseq-server --cluster` group under faults,
//! checked by the model's history checker (`leaseq_model::history`) on the
//! clients' own record of their calls.
//!
//! A few clients send (unique bodies), receive (up to 3, asking for
//! `ApproximateReceiveCount`) and delete what they received, each call
//! through a random node (followers forward to the leader), while the test
//! kills the leader (-9), kills a follower, stops the leader (SIGSTOP) past
//! its election timeout, and restarts killed nodes from their data dirs.
//! Then the queue is drained by receives until empty. Every call is one op
//! of a `History`; the check passes only if one order of all of them,
//! consistent with real time, makes the reference model produce every
//! answer the clients saw. A violation prints the checker's report and the
//! history and fails; so does an inconclusive search (the default size
//! keeps the search far below the checker's step limit).
//!
//! Invariant kept for the checker: no lease ends inside the history. The
//! queue's receives ask for a 600 s visibility and the run takes seconds,
//! so the model's fixed clock is the cluster's clock as far as any answer
//! can tell (a failover keeps lease deadlines, `docs/replication.md`).
//!
//! How an answer becomes an op ([`entry`]):
//!
//! * 200: it took effect; `Sent(id)`, `Received(ids and receive counts)`
//!   or `Acked`.
//! * Provably no effect, left out of the history: a connection never made
//!   (nothing was sent); a 503 that carries `x-leaseq-not-applied: true`,
//!   which a node gives only before any engine sees the request (no serving
//!   leader, a stale leader's lapsed confirmation, a forward whose
//!   connection to the leader was never made); a send or
//!   receive refused with a 4xx. The model refuses no well-formed send or
//!   receive on a live queue with room, so `Failed` could never match them;
//!   leaving them out is the server's claim that they did nothing, which the
//!   check still tests: a refused send that was applied leaves a message no
//!   op explains, a refused receive that leased one leaves it missing.
//! * A delete refused with `ReceiptHandleIsInvalid` because the receipt
//!   names an earlier engine: the documented failover behaviour (a new
//!   leader refuses the old leader's receipts), which the model, having one
//!   engine, does not know. The engine refused it, so it did nothing, and it
//!   is left out; the message stays leased to the end of the history, as in
//!   the model. Any other refused delete is `Failed` and held to the model.
//! * Anything else (no answer in time, a 5xx from the engine or from a
//!   forward that may have reached the leader): indeterminate, never
//!   completed. The checker lets an indeterminate send or receive take
//!   effect or not; an indeterminate delete is taken as not applied, which
//!   on the fixed clock no later op can tell apart (each receipt is deleted
//!   at most once).
//!
//! `LEASEQ_HISTORY_OPS` sets the ops per client (default 25) and
//! `LEASEQ_HISTORY_FAULTS` the number of faults (default 4); more of either
//! makes the search longer (it grows with how many ops overlap), and
//! `LEASEQ_HISTORY_STEPS` bounds it. `LEASEQ_HISTORY_DUMP` names a file to
//! keep the history in (it is kept in the temp dir anyway when the check
//! fails); `model/tests/history.rs` replays it (`replay_history_file`).

mod common;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::cluster::{ELECTION_MS, Outcome as Answer, ProcessCluster, Rng, queue_url, sqs};
use leaseq::{Bytes, MessageId, QueueConfig};
use leaseq_model::history::{Call, CheckError, History, Op, OpId, Outcome as Observed, check_bounded, write_ops};
use serde_json::{Value, json};

const QUEUE: &str = "hist";
/// The lease every receive asks for: far longer than the run.
const VISIBILITY: Duration = Duration::from_secs(600);
/// Every client call's bound.
const CALL: Duration = Duration::from_secs(3);
const CLIENTS: usize = 4;
/// Bound on each wait for a serving leader.
const RECOVERY: Duration = Duration::from_secs(30);
/// The search's bound: about half a minute of a debug build (passing runs
/// of the default size take hundreds of steps). Past it the test fails as
/// inconclusive; `LEASEQ_HISTORY_STEPS` raises it for longer runs.
const STEPS: usize = 100_000;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The queue as the server creates it from our `CreateQueue` (registry.rs:
/// SQS defaults but the visibility we give, the server's payload limit with
/// room for its envelope, 4 days' retention), with the shard count the
/// nodes' engines pick on this machine (they are started without one).
fn model_queue() -> (String, QueueConfig) {
    let shards = std::thread::available_parallelism().map_or(1, |n| n.get()).min(leaseq::MAX_SHARDS);
    let config = QueueConfig::default()
        .visibility_timeout(VISIBILITY)
        .max_payload(256 * 1024 + 1024)
        .retention(Duration::from_secs(4 * 24 * 3600))
        .shards(shards);
    (QUEUE.to_string(), config)
}

/// What the test records about one answer.
#[derive(Debug)]
enum Entry {
    /// It took effect (or was refused as the model refuses) with this result.
    Observed(Observed),
    /// It provably did nothing: left out of the history, for this reason.
    Omitted(String),
    /// It may or may not have taken effect.
    Indeterminate(String),
}

fn message_id(text: &str) -> MessageId {
    let hex = text.strip_prefix("m-").unwrap_or_else(|| panic!("message id {text:?} is not m-<hex>"));
    MessageId::from_u64(u64::from_str_radix(hex, 16).unwrap_or_else(|_| panic!("message id {text:?}")))
}

/// The deliveries of a ReceiveMessage answer: (id, receive count, receipt).
fn deliveries(json: &Value) -> Vec<(MessageId, u32, String)> {
    let Some(messages) = json["Messages"].as_array() else { return Vec::new() };
    messages
        .iter()
        .map(|m| {
            let id = message_id(m["MessageId"].as_str().expect("a MessageId"));
            let count = m["Attributes"]["ApproximateReceiveCount"].as_str().and_then(|c| c.parse().ok());
            let receipt = m["ReceiptHandle"].as_str().expect("a ReceiptHandle").to_string();
            (id, count.expect("ApproximateReceiveCount, asked for"), receipt)
        })
        .collect()
}

/// How `answer` to a call of `action` enters the history (module docs).
fn entry(action: &str, answer: &Answer) -> Entry {
    match answer {
        Answer::Ok(json) => Entry::Observed(match action {
            "SendMessage" => Observed::Sent(message_id(json["MessageId"].as_str().expect("a MessageId"))),
            "ReceiveMessage" => Observed::Received(deliveries(json).into_iter().map(|(id, n, _)| (id, n)).collect()),
            _ => Observed::Acked,
        }),
        Answer::Refused { status: 0, .. } => Entry::Omitted("never connected".into()),
        // A 503 the node answered from its routing, before any engine saw
        // the request (it says so: `x-leaseq-not-applied`); any other 5xx,
        // a forward that failed after connecting above all, is indeterminate.
        Answer::Refused { status: 503, not_applied: true, .. } => Entry::Omitted("unavailable".into()),
        Answer::Refused { status, message, .. } if *status >= 500 => {
            Entry::Indeterminate(format!("{status} {message}"))
        }
        Answer::Refused { code, message, .. } if action == "DeleteMessage" => {
            if code == "ReceiptHandleIsInvalid" && message.contains("issued by another engine instance") {
                Entry::Omitted("receipt of an earlier engine".into())
            } else if code == "ReceiptHandleIsInvalid" && message.contains("belongs to an earlier receive") {
                Entry::Observed(Observed::Failed("Stale".into()))
            } else {
                Entry::Observed(Observed::Failed(format!("{code}: {message}")))
            }
        }
        Answer::Refused { status, code, .. } => Entry::Omitted(format!("{action} refused {status} {code}")),
        Answer::Unknown(why) => Entry::Indeterminate(why.clone()),
    }
}

/// What all clients share.
struct Shared {
    addrs: Vec<SocketAddr>,
    history: History,
    /// Ops that provably did nothing, left out before the check.
    omitted: Mutex<Vec<OpId>>,
    /// How many answers went each way, by action and entry kind.
    tally: Mutex<BTreeMap<String, usize>>,
    /// Ops recorded so far (observed or indeterminate): the fault schedule.
    progress: AtomicUsize,
}

impl Shared {
    /// Runs one call as op `call` of `process` and records its answer;
    /// returns the op, the answer and whether the op counts (it was not
    /// omitted).
    async fn run(&self, process: usize, call: Call, action: &str, body: Value) -> (OpId, Answer, bool) {
        let addr = body_addr(&body, &self.addrs);
        let op = self.history.invoke(process, call);
        let answer = sqs(addr, action, &body, CALL).await;
        let entry = entry(action, &answer);
        let kind = match &entry {
            Entry::Observed(Observed::Failed(why)) => format!("failed ({why})"),
            Entry::Observed(_) => "ok".to_string(),
            Entry::Omitted(why) => format!("omitted ({why})"),
            Entry::Indeterminate(_) => "indeterminate".to_string(),
        };
        *lock(&self.tally).entry(format!("{action} {kind}")).or_default() += 1;
        let counts = match entry {
            Entry::Observed(observed) => {
                self.history.complete(op, observed);
                true
            }
            Entry::Omitted(_) => {
                lock(&self.omitted).push(op);
                false
            }
            Entry::Indeterminate(why) => {
                if std::env::var_os("LEASEQ_CLUSTER_DEBUG").is_some() {
                    eprintln!("op {op} ({action} via {addr}) indeterminate: {why}");
                }
                true
            }
        };
        if counts {
            self.progress.fetch_add(1, Ordering::Relaxed);
        }
        (op, answer, counts)
    }
}

/// The node a request body's queue URL names.
fn body_addr(body: &Value, addrs: &[SocketAddr]) -> SocketAddr {
    let url = body["QueueUrl"].as_str().expect("a QueueUrl");
    *addrs.iter().find(|a| url.starts_with(&format!("http://{a}/"))).expect("a node's URL")
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn receive_body(addr: SocketAddr, max: usize) -> Value {
    json!({
        "QueueUrl": queue_url(addr, QUEUE), "MaxNumberOfMessages": max,
        "VisibilityTimeout": VISIBILITY.as_secs(), "WaitTimeSeconds": 0,
        "AttributeNames": ["ApproximateReceiveCount"],
    })
}

fn receive_call(max: usize) -> Call {
    Call::Receive { queue: QUEUE.into(), max, visibility: VISIBILITY }
}

/// One client: `ops` recorded calls (omitted ones do not count; after one,
/// it waits a little, as an SDK's retry would).
async fn client(process: usize, ops: usize, shared: Arc<Shared>) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (process as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03));
    // Receipts received and not yet deleted: (receive op, index, handle).
    let mut held: Vec<(OpId, usize, String)> = Vec::new();
    let (mut done, mut seq, mut tries) = (0, 0, 0);
    while done < ops && tries < ops * 40 {
        tries += 1;
        let addr = shared.addrs[rng.below(shared.addrs.len())];
        let url = queue_url(addr, QUEUE);
        let dice = rng.below(10);
        let counted = if dice < 3 && !held.is_empty() {
            let (receive, index, receipt) = held.swap_remove(rng.below(held.len()));
            let call = Call::Ack { queue: QUEUE.into(), receive, index };
            let body = json!({"QueueUrl": url, "ReceiptHandle": receipt});
            shared.run(process, call, "DeleteMessage", body).await.2
        } else if dice < 6 {
            seq += 1;
            let text = format!("c{process}-{seq}");
            let call = Call::Send { queue: QUEUE.into(), payload: Bytes::from(text.clone()) };
            let body = json!({"QueueUrl": url, "MessageBody": text});
            shared.run(process, call, "SendMessage", body).await.2
        } else {
            let max = 1 + rng.below(3);
            let (op, answer, counted) =
                shared.run(process, receive_call(max), "ReceiveMessage", receive_body(addr, max)).await;
            if let Answer::Ok(json) = &answer {
                for (index, (_, _, receipt)) in deliveries(json).into_iter().enumerate() {
                    held.push((op, index, receipt));
                }
            }
            counted
        };
        if counted {
            done += 1;
            tokio::time::sleep(Duration::from_millis(rng.below(15) as u64)).await;
        } else {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn leader(cluster: &ProcessCluster) -> u64 {
    match cluster.serving_leader(RECOVERY).await {
        Some(id) => id,
        None => panic!("no serving leader within {RECOVERY:?}\n{}", cluster.logs()),
    }
}

/// Waits until node `id` answers its status endpoint (it runs again).
async fn answering(cluster: &ProcessCluster, id: u64) {
    let deadline = Instant::now() + RECOVERY;
    while cluster.status(id).await.is_none() {
        assert!(Instant::now() < deadline, "node {id} did not come back\n{}", cluster.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Fault `n` of the schedule: kill -9 of the leader, of a follower, SIGSTOP
/// of the leader past the election timeout; killed nodes restart from their
/// data dirs.
async fn fault(cluster: &mut ProcessCluster, n: usize) -> String {
    let leading = leader(cluster).await;
    match n % 3 {
        0 => {
            cluster.kill(leading);
            leader(cluster).await;
            cluster.spawn(leading);
            answering(cluster, leading).await;
            format!("kill -9 leader {leading}, restart")
        }
        1 => {
            let followers: Vec<u64> = cluster.nodes.keys().copied().filter(|&id| id != leading).collect();
            let follower = followers[n % followers.len()];
            cluster.kill(follower);
            tokio::time::sleep(Duration::from_millis(500)).await;
            cluster.spawn(follower);
            answering(cluster, follower).await;
            format!("kill -9 follower {follower}, restart")
        }
        _ => {
            cluster.pause(leading);
            tokio::time::sleep(Duration::from_millis(4 * ELECTION_MS)).await;
            cluster.resume(leading);
            format!("SIGSTOP leader {leading} for {} ms", 4 * ELECTION_MS)
        }
    }
}

/// The recorded ops without the omitted ones, acks renumbered to match.
fn without(ops: Vec<Op>, omitted: &[OpId]) -> Vec<Op> {
    let mut new_id: HashMap<OpId, OpId> = HashMap::new();
    let mut kept = Vec::new();
    for (i, op) in ops.into_iter().enumerate() {
        if !omitted.contains(&i) {
            new_id.insert(i, kept.len());
            kept.push(op);
        }
    }
    for op in &mut kept {
        if let Call::Ack { receive, .. } = &mut op.call {
            // Only a receive that returned messages is acked, and none of
            // those is omitted.
            *receive = new_id[receive];
        }
    }
    kept
}

fn describe(i: OpId, op: &Op) -> String {
    let call = match &op.call {
        Call::Send { payload, .. } => format!("send {}", String::from_utf8_lossy(payload)),
        Call::Receive { max, .. } => format!("receive {max}"),
        Call::Ack { receive, index, .. } => format!("delete {receive}[{index}]"),
    };
    let result = match &op.completed {
        Some((at, outcome)) => format!("-> {at}: {outcome:?}"),
        None => "-> (no answer)".to_string(),
    };
    format!("{i:4} p{} {:5} {call} {result}", op.process, op.invoked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_histories_under_faults_are_linearizable() {
    let ops_per_client = env("LEASEQ_HISTORY_OPS", 25);
    let faults = env("LEASEQ_HISTORY_FAULTS", 4);
    let started = Instant::now();
    let mut cluster = ProcessCluster::start("history", 3);
    let first = leader(&cluster).await;
    let attributes = json!({"VisibilityTimeout": VISIBILITY.as_secs().to_string()});
    let created =
        sqs(cluster.addr(first), "CreateQueue", &json!({"QueueName": QUEUE, "Attributes": attributes}), CALL).await;
    assert!(matches!(created, Answer::Ok(_)), "{created:?}");

    let shared = Arc::new(Shared {
        addrs: cluster.nodes.values().map(|n| n.addr).collect(),
        history: History::new(),
        omitted: Mutex::new(Vec::new()),
        tally: Mutex::new(BTreeMap::new()),
        progress: AtomicUsize::new(0),
    });
    let clients: Vec<_> = (0..CLIENTS).map(|p| tokio::spawn(client(p, ops_per_client, shared.clone()))).collect();

    // Faults at even steps of the clients' progress, so each lands among
    // calls whatever the machine's speed.
    let total = CLIENTS * ops_per_client;
    let mut done_faults = Vec::new();
    for n in 0..faults {
        let at = (n + 1) * total / (faults + 1);
        while shared.progress.load(Ordering::Relaxed) < at && !clients.iter().all(|c| c.is_finished()) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let what = fault(&mut cluster, n).await;
        done_faults.push(format!("after {} ops: {what}", shared.progress.load(Ordering::Relaxed)));
    }
    for c in clients {
        tokio::time::timeout(Duration::from_secs(60), c).await.expect("clients finish").unwrap();
    }
    let load_time = started.elapsed();

    // The drain: receives until two in a row find nothing.
    let drain = CLIENTS;
    let (mut empty, mut rng) = (0, Rng(7));
    let deadline = Instant::now() + Duration::from_secs(30);
    leader(&cluster).await;
    while empty < 2 {
        assert!(Instant::now() < deadline, "the drain did not finish\n{}", cluster.logs());
        let addr = shared.addrs[rng.below(shared.addrs.len())];
        let (_, answer, _) = shared.run(drain, receive_call(10), "ReceiveMessage", receive_body(addr, 10)).await;
        match answer {
            Answer::Ok(json) if deliveries(&json).is_empty() => empty += 1,
            Answer::Ok(_) => empty = 0,
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }

    let omitted = lock(&shared.omitted).clone();
    let ops = without(shared.history.ops(), &omitted);
    let indeterminate = ops.iter().filter(|o| o.completed.is_none()).count();
    let sent = ops.iter().filter(|o| matches!(o.completed, Some((_, Observed::Sent(_))))).count();
    eprintln!(
        "{} ops ({indeterminate} indeterminate, {} omitted) in {load_time:?}; faults: {done_faults:#?}\nanswers: {:#?}",
        ops.len(),
        omitted.len(),
        lock(&shared.tally)
    );
    assert!(sent >= CLIENTS, "too little load got through: {sent} sends acknowledged\n{}", cluster.logs());

    // Kept for replay (`model/tests/history.rs`, `replay_history_file`).
    let asked = std::env::var_os("LEASEQ_HISTORY_DUMP").map(std::path::PathBuf::from);
    let dump = asked
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(format!("leaseq-history-{}.txt", std::process::id())));
    std::fs::write(&dump, write_ops(&ops)).expect("write the history");
    let checking = Instant::now();
    let history = ops.clone();
    let steps = env("LEASEQ_HISTORY_STEPS", STEPS);
    let result =
        tokio::task::spawn_blocking(move || check_bounded(&history, &[model_queue()], 1, steps)).await.unwrap();
    let check_time = checking.elapsed();
    match result {
        Ok(report) => {
            if asked.is_none() {
                let _ = std::fs::remove_file(&dump);
            }
            let placed = report.order.iter().filter(|&&i| ops[i].completed.is_none()).count();
            eprintln!(
                "linearizable: {} steps in {check_time:?}, {placed} of {indeterminate} indeterminate ops placed as \
                 taking effect; whole test {:?}",
                report.steps,
                started.elapsed()
            );
        }
        Err(CheckError::Violation(v)) => {
            let history: Vec<String> = ops.iter().enumerate().map(|(i, op)| describe(i, op)).collect();
            let stuck: Vec<String> =
                v.stuck.iter().map(|(i, why)| format!("{}: {why}", describe(*i, &ops[*i]))).collect();
            panic!(
                "not linearizable ({check_time:?}; history kept in {}): {}\nstuck:\n{}\nhistory (id, process, invoked, call -> \
                 responded: outcome):\n{}\nfaults: {done_faults:#?}\n{}",
                dump.display(),
                CheckError::Violation(v.clone()),
                stuck.join("\n"),
                history.join("\n"),
                cluster.logs()
            );
        }
        Err(e @ CheckError::Inconclusive { .. }) => {
            panic!(
                "{e} ({check_time:?}; history kept in {}): too large to decide; lower LEASEQ_HISTORY_OPS or _FAULTS",
                dump.display()
            )
        }
        Err(e) => panic!("{e}"),
    }
}
