//! Real crashes: a child process (this test binary, re-run on one ignored
//! entry test) runs a mixed load on a durable engine and reports every call
//! that returned `Ok` on its stdout; the parent kills it with SIGKILL at a
//! random moment, reopens the data dir and reconciles what it finds with
//! what the child reported.
//!
//! `LEASEQ_CRASH_KILLS` sets the number of kills of the long loop (CI runs
//! the default; docs/durability.md records a long run).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use leaseq::LogStats;

use leaseq::{Engine, QueueConfig, ReceiveOptions, SyncPolicy};

const CHILD_ENV: &str = "LEASEQ_CRASH_CHILD";

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("leaseq-crash-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A small deterministic generator (xorshift), seeded per child.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn policy_from(name: &str) -> SyncPolicy {
    match name {
        "always" => SyncPolicy::Always,
        "interval" => SyncPolicy::Interval(Duration::from_millis(20)),
        _ => SyncPolicy::Never,
    }
}

fn open(dir: &Path, policy: SyncPolicy) -> Engine {
    // Every earlier holder of the dir's lock is gone by now: each child is
    // killed and waited for, and the parent's engine closes on the thread
    // that drops it (docs/design.md, driver.rs), so a lock still held here
    // is a bug to see, not a wait.
    Engine::builder().data_dir(dir).sync(policy).segment_bytes(256 << 10).open().expect("open the data dir")
}

fn config(name: &str) -> QueueConfig {
    match name {
        "jobs" => QueueConfig::default()
            .visibility_timeout(Duration::from_millis(300))
            .max_receives(4)
            .dead_letter_queue("dlq")
            .max_messages(100_000),
        _ => QueueConfig::default().max_messages(100_000),
    }
}

/// The child's load. Report lines: `@S queue id h` (send returned Ok),
/// `@R queue id count` (receive), `@T id` (an ack or dead-letter of it is
/// about to be tried: until its outcome is reported, the parent cannot know
/// whether it took effect), `@A queue id h` (ack returned Ok), `@M from to id
/// h` (dead-letter returned Ok), `@W w` (the log's writer has written every
/// record below position `w` to the OS). `h` is the number of records handed
/// to the log when the call returned, so the call's records lie below it: a
/// call with `h <= w` for a reported `w` is past what a process kill can
/// take back under any policy.
fn child_load(dir: &Path, policy: SyncPolicy, seed: u64) {
    let engine = open(dir, policy);
    for name in ["dlq", "jobs", "other"] {
        if engine.queue(name).is_err() {
            engine.create_queue(name, config(name)).unwrap();
        }
    }
    let out = std::io::stdout();
    let mut out = out.lock();
    writeln!(out, "@OPEN").unwrap();
    out.flush().unwrap();
    let mut rng = Rng(seed | 1);
    let jobs = engine.queue("jobs").unwrap();
    let other = engine.queue("other").unwrap();
    let dlq = engine.queue("dlq").unwrap();
    let handed = || engine.log_stats().unwrap().handed;
    let written = |stats: LogStats| stats.handed - stats.backlog;
    loop {
        writeln!(out, "@W {}", written(engine.log_stats().unwrap())).unwrap();
        for (q, name) in [(&jobs, "jobs"), (&other, "other")] {
            let n = 1 + rng.below(4) as usize;
            if n == 1 {
                // A queue full after many runs (a long loop): that send is
                // not reported, and the load goes on draining.
                if let Some(id) = accepted(q.send(rng.next().to_le_bytes().to_vec())) {
                    writeln!(out, "@S {name} {} {}", id.as_u64(), handed()).unwrap();
                }
            } else {
                let ids = q.send_batch((0..n).map(|_| rng.next().to_le_bytes().to_vec()));
                let h = handed();
                for id in ids.into_iter().filter_map(accepted) {
                    writeln!(out, "@S {name} {} {h}", id.as_u64()).unwrap();
                }
            }
            out.flush().unwrap();
            let got = q.receive_with(4, ReceiveOptions::new().visibility(Duration::from_millis(300))).unwrap();
            for d in &got {
                writeln!(out, "@R {name} {} {}", d.id.as_u64(), d.delivery_count).unwrap();
            }
            out.flush().unwrap();
            let mut acks = Vec::new();
            let mut dead = Vec::new();
            for d in got {
                match rng.below(8) {
                    0..=3 => acks.push(d),
                    4 if name == "jobs" => dead.push(d),
                    5 => {
                        let _ = q.release(&d.receipt, Duration::ZERO);
                    }
                    _ => {} // left to expire
                }
            }
            for d in acks.iter().chain(&dead) {
                writeln!(out, "@T {}", d.id.as_u64()).unwrap();
            }
            out.flush().unwrap();
            for d in &dead {
                if q.dead_letter(&d.receipt, "crash test").is_ok() {
                    writeln!(out, "@M jobs dlq {} {}", d.id.as_u64(), handed()).unwrap();
                }
            }
            if acks.len() > 1 {
                let receipts: Vec<_> = acks.iter().map(|d| d.receipt).collect();
                let results = q.ack_batch(&receipts);
                let h = handed();
                for (d, result) in acks.iter().zip(results) {
                    if result.is_ok() {
                        writeln!(out, "@A {name} {} {h}", d.id.as_u64()).unwrap();
                    }
                }
            } else {
                for d in &acks {
                    if q.ack(&d.receipt).is_ok() {
                        writeln!(out, "@A {name} {} {}", d.id.as_u64(), handed()).unwrap();
                    }
                }
            }
            out.flush().unwrap();
        }
        let got = dlq.receive(2).unwrap();
        for d in &got {
            writeln!(out, "@T {}", d.id.as_u64()).unwrap();
        }
        out.flush().unwrap();
        for d in got {
            if dlq.ack(&d.receipt).is_ok() {
                writeln!(out, "@A dlq {} {}", d.id.as_u64(), handed()).unwrap();
            }
        }
        out.flush().unwrap();
    }
}

/// The id of an accepted send; `None` for a full queue; any other error is
/// a failure of the child (it exits, and the parent reports that).
fn accepted(sent: Result<leaseq::MessageId, leaseq::Error>) -> Option<leaseq::MessageId> {
    match sent {
        Ok(id) => Some(id),
        Err(leaseq::Error::QueueFull { .. }) => None,
        Err(other) => panic!("send failed: {other}"),
    }
}

/// The child entry: run only as a child of the crash tests (ignored in a
/// normal test run, where it would have nothing to do).
#[test]
#[ignore = "the child process of the kill -9 tests; they run it"]
fn crash_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else { return };
    let mut parts = spec.splitn(3, '|');
    let (policy, seed, dir) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
    child_load(Path::new(dir), policy_from(policy), seed.parse().unwrap());
}

/// Where a reported call's records lie in the log of the child that made
/// it: below this many handed records. A call from an earlier child, whose
/// outcome a reconcile has already checked, is at `SETTLED`.
type Mark = u64;
const SETTLED: Mark = 0;

/// What the children reported, across every run on one data dir.
#[derive(Default)]
struct Ledger {
    /// id -> (queue, mark) of every send reported.
    sent: BTreeMap<u64, (String, Mark)>,
    /// Ids whose ack was reported, with its mark.
    acked: BTreeMap<u64, Mark>,
    /// id -> (destination, mark) of reported dead-letter moves.
    moved: BTreeMap<u64, (String, Mark)>,
    /// The highest write position the current child reported (`@W`).
    written: Mark,
    /// Calls of the current child checked as past the loss window, and calls
    /// that were inside it (so a test can tell it checked something).
    checked_past_window: usize,
    inside_window: usize,
    /// id -> (queue, highest delivery count reported there).
    counts: BTreeMap<u64, (String, u32)>,
    /// Ids an ack or dead-letter was tried on (`@T`), whose outcome may
    /// never have been reported.
    tried: std::collections::BTreeSet<u64>,
}

impl Ledger {
    fn note(&mut self, line: &str) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            ["@OPEN"] => self.written = 0,
            ["@W", w] => self.written = self.written.max(w.parse().unwrap()),
            ["@S", queue, id, h] => {
                self.sent.insert(id.parse().unwrap(), (queue.to_string(), h.parse().unwrap()));
            }
            ["@R", queue, id, count] => {
                let (id, count): (u64, u32) = (id.parse().unwrap(), count.parse().unwrap());
                let entry = self.counts.entry(id).or_insert((queue.to_string(), 0));
                if entry.0 != *queue {
                    *entry = (queue.to_string(), 0);
                }
                entry.1 = entry.1.max(count);
            }
            ["@T", id] => {
                self.tried.insert(id.parse().unwrap());
            }
            ["@A", _, id, h] => {
                self.acked.insert(id.parse().unwrap(), h.parse().unwrap());
            }
            ["@M", _, to, id, h] => {
                let id: u64 = id.parse().unwrap();
                self.moved.insert(id, (to.to_string(), h.parse().unwrap()));
            }
            _ => {}
        }
    }
}

/// Runs one child until it has worked for `run_for`, then kills it with
/// SIGKILL.
fn run_and_kill(dir: &Path, policy: &str, seed: u64, run_for: Duration, ledger: &mut Ledger) {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args(["--exact", "crash_child", "--ignored", "--nocapture", "--test-threads", "1"])
        .env(CHILD_ENV, format!("{policy}|{seed}|{}", dir.display()))
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.with_extension("child-stderr")).expect("the child's stderr file"))
        .spawn()
        .expect("spawn the child");
    let stdout = child.stdout.take().unwrap();
    let (lines, received) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let Some(line) = report(&line) else { continue };
            if lines.send((line.to_string(), Instant::now())).is_err() {
                break;
            }
        }
    });
    let started = Instant::now();
    let mut opened = None;
    loop {
        let wait = Duration::from_millis(10);
        match received.recv_timeout(wait) {
            Ok((line, at)) => {
                if line == "@OPEN" {
                    opened = Some(at);
                }
                ledger.note(&line);
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let stderr = std::fs::read_to_string(dir.with_extension("child-stderr")).unwrap_or_default();
                let tail: String =
                    stderr.lines().filter(|l| !l.starts_with("  ")).take(20).collect::<Vec<_>>().join("\n");
                panic!("the child exited before it was killed; its stderr:\n{tail}")
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        assert!(started.elapsed() < Duration::from_secs(60), "the child did not open its engine in time");
        if opened.is_some_and(|at| at.elapsed() >= run_for) {
            break;
        }
    }
    child.kill().expect("SIGKILL the child");
    child.wait().unwrap();
    // Everything the child wrote before it died is still in the pipe.
    for (line, _) in received.iter() {
        ledger.note(&line);
    }
    reader.join().unwrap();
}

/// Reopens the data dir, reads every queue without consuming anything for
/// good (each message is received once and released), and checks it
/// against the ledger. `lossy`: under a policy with a loss window (a kill
/// loses the writer's backlog), only calls whose records the child saw
/// written (`@W`) must have survived; under `Always` every reported call.
fn reconcile(dir: &Path, policy: SyncPolicy, ledger: &mut Ledger, lossy: bool) -> usize {
    let engine = open(dir, policy);
    let mut present: BTreeMap<u64, (String, u32)> = BTreeMap::new();
    for name in ["dlq", "jobs", "other"] {
        let q = engine.queue(name).unwrap();
        let mut held = Vec::new();
        loop {
            let got = q.receive_with(1024, ReceiveOptions::new().visibility(Duration::from_secs(600))).unwrap();
            if got.is_empty() {
                break;
            }
            for d in got {
                let old = present.insert(d.id.as_u64(), (name.to_string(), d.delivery_count));
                assert!(old.is_none(), "message {} is stored twice ({old:?} and {name})", d.id.as_u64());
                held.push(d.receipt);
            }
        }
        for receipt in held {
            q.release(&receipt, Duration::ZERO).unwrap();
        }
        let delayed = q.stats().delayed;
        assert_eq!(delayed, 0, "no delayed sends in this load");
    }
    let written = ledger.written;
    let must = |mark: &Mark| !lossy || *mark <= written;
    let (mut checked, mut inside) = (0, 0);
    for (id, (queue, at)) in &ledger.sent {
        for mark in [Some(at), ledger.acked.get(id), ledger.moved.get(id).map(|(_, m)| m)].into_iter().flatten() {
            if *mark != SETTLED {
                if must(mark) { checked += 1 } else { inside += 1 }
            }
        }
        let acked = ledger.acked.get(id);
        if let Some(acked_at) = acked {
            if must(acked_at) {
                assert!(!present.contains_key(id), "message {id} was acked, yet it is back");
            }
            continue;
        }
        if !must(at) {
            continue;
        }
        if ledger.tried.contains(id) {
            // Maybe acked or moved without a report: gone or anywhere.
            continue;
        }
        let expected_queue = match ledger.moved.get(id) {
            Some((to, moved_at)) if must(moved_at) => to.clone(),
            Some(_) => {
                assert!(present.contains_key(id), "message {id} (sent, being moved) is lost");
                continue;
            }
            None => queue.clone(),
        };
        match present.get(id) {
            Some((queue, _)) if *queue == expected_queue || expected_queue == "jobs" && queue == "dlq" => {}
            Some((queue, _)) => panic!("message {id} is on {queue}, expected {expected_queue}"),
            None => panic!("message {id}, sent to {expected_queue} and never acked, is lost"),
        }
    }
    ledger.checked_past_window += checked;
    ledger.inside_window += inside;
    if !lossy {
        // Delivery counts never go backwards: the receive above counted
        // one more than the last delivery the child was handed there.
        for (id, (queue, count)) in &ledger.counts {
            if let Some((now_queue, now)) = present.get(id) {
                if now_queue == queue {
                    assert!(*now > *count, "message {id}: delivery count {now} after the child saw {count}");
                }
            }
        }
    }
    if lossy {
        // Calls inside the loss window of this kill settle now: a send that
        // did not survive is forgiven, an ack that did not survive is
        // undone, and from here on what is on disk is what must last.
        let lost: Vec<u64> = ledger
            .sent
            .iter()
            .filter(|(id, (_, at))| !must(at) && !present.contains_key(id) && !ledger.acked.contains_key(id))
            .map(|(id, _)| *id)
            .collect();
        for id in lost {
            ledger.sent.remove(&id);
        }
        let undone: Vec<u64> =
            ledger.acked.iter().filter(|(id, at)| !must(at) && present.contains_key(id)).map(|(id, _)| *id).collect();
        for id in undone {
            ledger.acked.remove(&id);
        }
        for (id, (to, at)) in ledger.moved.clone() {
            if !must(&at) && present.get(&id).is_some_and(|(queue, _)| *queue != to) {
                ledger.moved.remove(&id);
            }
        }
        for (_, (_, at)) in ledger.sent.iter_mut() {
            *at = SETTLED;
        }
        for (id, at) in ledger.acked.iter_mut() {
            if present.contains_key(id) {
                continue;
            }
            *at = SETTLED;
        }
        for (_, (_, at)) in ledger.moved.iter_mut() {
            *at = SETTLED;
        }
    }
    present.len()
}

/// The report in a line of the child's output (the test harness may print
/// its own text before it on the same line).
fn report(line: &str) -> Option<&str> {
    line.find('@').map(|at| &line[at..])
}

/// The index of the oldest segment file in `dir` (above 1 once cleaning has
/// dropped segments).
fn oldest_segment(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().ok()?;
            u64::from_str_radix(name.strip_prefix("wal-")?.strip_suffix(".seg")?, 16).ok()
        })
        .min()
        .unwrap_or(0)
}

fn kills() -> usize {
    std::env::var("LEASEQ_CRASH_KILLS").ok().and_then(|v| v.parse().ok()).unwrap_or(30)
}

#[test]
fn kill_minus_nine_loses_no_acknowledged_call_under_always() {
    let dir = scratch("always");
    let mut ledger = Ledger::default();
    let mut rng = Rng(0x5EED_1234);
    let mut held = 0;
    for run in 0..kills() {
        let run_for = Duration::from_millis(5 + rng.below(120));
        run_and_kill(&dir, "always", rng.next(), run_for, &mut ledger);
        held = reconcile(&dir, SyncPolicy::Always, &mut ledger, false);
        assert!(run > 0 || !ledger.sent.is_empty(), "the first child reported no send");
    }
    println!(
        "{} kills under Always: {} sends, {} acks, {} dead-letter moves reported; {held} messages held at the end; \
         oldest segment {}",
        kills(),
        ledger.sent.len(),
        ledger.acked.len(),
        ledger.moved.len(),
        oldest_segment(&dir)
    );
    assert!(ledger.acked.len() > 10, "the load acked too little to test anything");
    std::fs::remove_dir_all(&dir).unwrap();
    let _ = std::fs::remove_file(dir.with_extension("child-stderr"));
}

#[test]
fn kill_minus_nine_loses_at_most_the_interval_window() {
    let dir = scratch("interval");
    let mut ledger = Ledger::default();
    let mut rng = Rng(0xFACE_B00C);
    // A process kill loses at most the writer's backlog: what it had not
    // written to the OS. Wall time does not bound that on a loaded machine
    // (the writer may not run for a while), log positions do.
    for _ in 0..kills() {
        let run_for = Duration::from_millis(150 + rng.below(250));
        run_and_kill(&dir, "interval", rng.next(), run_for, &mut ledger);
        reconcile(&dir, policy_from("interval"), &mut ledger, true);
    }
    println!(
        "{} kills under Interval: {} calls checked past the loss window, {} inside it; oldest segment {}",
        kills(),
        ledger.checked_past_window,
        ledger.inside_window,
        oldest_segment(&dir)
    );
    assert!(ledger.checked_past_window > 100, "too few calls were past the loss window to test anything");
    std::fs::remove_dir_all(&dir).unwrap();
    let _ = std::fs::remove_file(dir.with_extension("child-stderr"));
}

/// A message whose every delivery ends in a crash reaches the dead-letter
/// queue after `max_receives` deliveries, across that many restarts.
#[test]
fn a_message_that_crashes_every_consumer_reaches_the_dead_letter_queue() {
    let dir = scratch("poison");
    {
        let engine = open(&dir, SyncPolicy::Always);
        engine.create_queue("dlq", config("dlq")).unwrap();
        engine.create_queue("jobs", config("jobs")).unwrap();
        engine.create_queue("other", config("other")).unwrap();
        engine.queue("jobs").unwrap().send(&b"poison"[..]).unwrap();
    }
    let exe = std::env::current_exe().unwrap();
    for delivery in 1..=4u32 {
        let mut child = Command::new(&exe)
            .args(["--exact", "poison_child", "--ignored", "--nocapture", "--test-threads", "1"])
            .env(CHILD_ENV, dir.display().to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut seen = None;
        for line in BufReader::new(child.stdout.take().unwrap()).lines() {
            let line = line.unwrap();
            let Some(line) = report(&line) else { continue };
            if let Some(count) = line.strip_prefix("@R ") {
                seen = Some(count.parse::<u32>().unwrap());
                break;
            }
            if line == "@EMPTY" {
                break;
            }
        }
        // Another process has the data dir open: this one is refused.
        match Engine::builder().data_dir(&dir).open() {
            Err(leaseq::Error::DataDirLocked { .. }) => {}
            other => panic!("opening a data dir another process holds gave {other:?}"),
        }
        // The consumer "crashes" while it holds the message.
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(seen, Some(delivery), "delivery {delivery} of the poison message");
    }
    let engine = open(&dir, SyncPolicy::Always);
    assert_eq!(engine.recovery().unwrap().dead_lettered, 1);
    assert!(engine.queue("jobs").unwrap().receive(1).unwrap().is_empty());
    let dead = engine.queue("dlq").unwrap().receive(1).unwrap().remove(0);
    assert_eq!(&dead.payload[..], b"poison");
    assert_eq!(dead.dead_letter.as_ref().unwrap().delivery_count, 4);
    // Four deliveries on jobs, and this one.
    assert_eq!(dead.fencing_token, 5);
}

#[test]
#[ignore = "the child process of the poison test; it runs it"]
fn poison_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else { return };
    let engine = open(Path::new(&dir), SyncPolicy::Always);
    let got = engine.queue("jobs").unwrap().receive(1).unwrap();
    let mut out = std::io::stdout().lock();
    match got.first() {
        Some(d) => writeln!(out, "@R {}", d.delivery_count).unwrap(),
        None => writeln!(out, "@EMPTY").unwrap(),
    }
    out.flush().unwrap();
    std::thread::sleep(Duration::from_secs(60));
}
