//! Exactly-once effects on top of at-least-once delivery, against a real
//! database (SQLite, bundled): the consumer records the message id in the
//! same transaction as its effect, so every forced duplicate — lease expiry
//! mid-work, a crash before the ack, an ack that is lost — is recognised and
//! the effect happens once. A second part shows fencing-token conditional
//! writes stopping a consumer that lost its lease without knowing it.

use std::path::PathBuf;
use std::time::Duration;

use leaseq::{Delivery, Engine, LeaseError, ManualClock, Queue, QueueConfig};
use rusqlite::{Connection, TransactionBehavior, params};

const VIS: Duration = Duration::from_secs(10);

/// A scratch database file, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let path = std::env::temp_dir().join(format!("leaseq-{name}-{}.sqlite", std::process::id()));
        let _ = std::fs::remove_file(&path);
        Scratch(path)
    }

    /// One consumer's connection (each consumer has its own, as separate
    /// processes would).
    fn connect(&self) -> Connection {
        let conn = Connection::open(&self.0).unwrap();
        conn.busy_timeout(Duration::from_secs(5)).unwrap();
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS accounts (name TEXT PRIMARY KEY, balance INTEGER NOT NULL);
             CREATE TABLE IF NOT EXISTS processed (message_id INTEGER PRIMARY KEY);
             CREATE TABLE IF NOT EXISTS documents (name TEXT PRIMARY KEY, body TEXT NOT NULL, fence INTEGER NOT NULL);
             INSERT OR IGNORE INTO accounts VALUES ('alice', 0);
             INSERT OR IGNORE INTO documents VALUES ('report', 'empty', 0);",
        )
        .unwrap();
        conn
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn setup() -> (ManualClock, Queue) {
    let clock = ManualClock::new();
    let engine = Engine::builder().clock(clock.clone()).build();
    let q = engine.create_queue("deposits", QueueConfig::default().visibility_timeout(VIS).shards(1)).unwrap();
    (clock, q)
}

#[derive(Debug, PartialEq, Eq)]
enum Applied {
    Now,
    Already,
}

/// The idempotent effect: record the message id and apply the deposit in
/// one transaction; a message id seen before means the effect happened.
fn deposit(conn: &mut Connection, d: &Delivery) -> Applied {
    let amount: i64 = std::str::from_utf8(&d.payload).unwrap().parse().unwrap();
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
    // The id is a u64; store its bits.
    let fresh = tx.execute("INSERT OR IGNORE INTO processed VALUES (?1)", [d.id.as_u64() as i64]).unwrap() == 1;
    if fresh {
        tx.execute("UPDATE accounts SET balance = balance + ?1 WHERE name = 'alice'", [amount]).unwrap();
    }
    tx.commit().unwrap();
    if fresh { Applied::Now } else { Applied::Already }
}

fn balance(conn: &Connection) -> i64 {
    conn.query_row("SELECT balance FROM accounts WHERE name = 'alice'", [], |r| r.get(0)).unwrap()
}

fn processed_rows(conn: &Connection) -> i64 {
    conn.query_row("SELECT COUNT(*) FROM processed", [], |r| r.get(0)).unwrap()
}

#[test]
fn every_forced_duplicate_applies_its_effect_once() {
    let db = Scratch::new("idempotency");
    let (mut a, mut b) = (db.connect(), db.connect());
    let (clock, q) = setup();

    // 1. Lease expiry mid-work: A is slow, its lease runs out, B gets the
    //    message and applies it; A finishes afterwards.
    q.send("100").unwrap();
    let at_a = q.receive(1).unwrap().remove(0);
    clock.advance(VIS + Duration::from_secs(1));
    let at_b = q.receive(1).unwrap().remove(0);
    assert_eq!((at_b.id, at_b.delivery_count), (at_a.id, 2), "redelivered: a duplicate");
    assert_eq!(deposit(&mut b, &at_b), Applied::Now);
    q.ack(&at_b.receipt).unwrap();
    assert_eq!(deposit(&mut a, &at_a), Applied::Already, "A's late commit is recognised");
    assert_eq!(q.ack(&at_a.receipt), Err(LeaseError::Stale));

    // 2. Crash before the ack: A commits, then dies; the lease runs out and B
    //    gets the message again.
    q.send("20").unwrap();
    let at_a = q.receive(1).unwrap().remove(0);
    assert_eq!(deposit(&mut a, &at_a), Applied::Now);
    drop(at_a); // the crash: no ack, no release
    clock.advance(VIS);
    let at_b = q.receive(1).unwrap().remove(0);
    assert_eq!(at_b.delivery_count, 2);
    assert_eq!(deposit(&mut b, &at_b), Applied::Already);
    q.ack(&at_b.receipt).unwrap();

    // 3. Ack lost: A commits and acks, but the ack never reaches the queue
    //    (a lossy link between consumer and queue); the message comes back.
    q.send("3").unwrap();
    let at_a = q.receive(1).unwrap().remove(0);
    assert_eq!(deposit(&mut a, &at_a), Applied::Now);
    let lost_ack = at_a.receipt; // sent into the void
    clock.advance(VIS);
    let at_b = q.receive(1).unwrap().remove(0);
    assert_eq!(deposit(&mut b, &at_b), Applied::Already);
    q.ack(&at_b.receipt).unwrap();
    assert_eq!(q.ack(&lost_ack), Err(LeaseError::Stale), "a retried copy of the lost ack cannot finish anything");

    // 4. A crash inside the transaction: nothing was committed, so the
    //    redelivery applies the effect (once).
    q.send("4000").unwrap();
    let at_a = q.receive(1).unwrap().remove(0);
    {
        let tx = a.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
        tx.execute("INSERT OR IGNORE INTO processed VALUES (?1)", [at_a.id.as_u64() as i64]).unwrap();
        tx.execute("UPDATE accounts SET balance = balance + 4000 WHERE name = 'alice'", []).unwrap();
        // Dropped without commit: SQLite rolls back.
    }
    clock.advance(VIS);
    let at_b = q.receive(1).unwrap().remove(0);
    assert_eq!(deposit(&mut b, &at_b), Applied::Now);
    q.ack(&at_b.receipt).unwrap();

    let check = db.connect();
    assert_eq!(balance(&check), 100 + 20 + 3 + 4000, "each deposit exactly once");
    assert_eq!(processed_rows(&check), 4);
    let stats = q.stats();
    assert_eq!((stats.redelivered, stats.acked), (4, 4), "four duplicates were delivered: {stats:?}");
}

#[test]
fn many_duplicates_from_a_pool_under_real_time_still_apply_once() {
    use leaseq::consumer::{self, HandlerError};
    use std::sync::{Arc, Mutex};

    let db = Scratch::new("idempotency-pool");
    let setup_conn = db.connect();
    let engine = Engine::new();
    let q = engine.create_queue("deposits", QueueConfig::default()).unwrap();
    let total: i64 = (1..=60).sum();
    for amount in 1..=60 {
        q.send(amount.to_string()).unwrap();
    }
    let path = db.0.clone();
    let applied_twice_refused = Arc::new(Mutex::new(0));
    let dup = applied_twice_refused.clone();
    let pool = consumer::run(&q, 3, move |guard| {
        let mut conn = Connection::open(&path).unwrap();
        conn.busy_timeout(Duration::from_secs(10)).unwrap();
        if deposit(&mut conn, guard.delivery()) == Applied::Already {
            *dup.lock().unwrap() += 1;
        }
        // Amounts ending in 3 "crash" after committing, on their first delivery.
        if guard.delivery().delivery_count == 1 && guard.payload()[..].ends_with(b"3") {
            return Err(HandlerError::retry("crashed after commit"));
        }
        Ok(())
    })
    .unwrap();
    let start = std::time::Instant::now();
    while pool.stats().acked < 60 {
        assert!(start.elapsed() < Duration::from_secs(30), "{:?}", pool.stats());
        std::thread::sleep(Duration::from_millis(5));
    }
    let report = pool.shutdown(Duration::from_secs(5));
    assert!(report.clean);
    // 1..=60 has six numbers ending in 3: each delivered twice, applied once.
    assert_eq!(report.stats.retried, 6);
    assert_eq!(*applied_twice_refused.lock().unwrap(), 6);
    assert_eq!(balance(&setup_conn), total);
    assert_eq!(processed_rows(&setup_conn), 60);
}

/// The fencing-token write: only a newer attempt may overwrite.
fn fenced_write(conn: &Connection, body: &str, token: u64) -> bool {
    conn.execute(
        "UPDATE documents SET body = ?1, fence = ?2 WHERE name = 'report' AND fence < ?2",
        params![body, token as i64],
    )
    .unwrap()
        == 1
}

#[test]
fn a_fencing_token_stops_a_consumer_that_lost_its_lease_without_knowing() {
    let db = Scratch::new("fencing");
    let (a, b) = (db.connect(), db.connect());
    let (clock, q) = setup();
    q.send("render the report").unwrap();
    let at_a = q.receive(1).unwrap().remove(0);
    // A pauses (a long GC, a swapped-out VM) past its lease; B takes over.
    clock.advance(VIS + Duration::from_secs(1));
    let at_b = q.receive(1).unwrap().remove(0);
    assert!(at_b.fencing_token > at_a.fencing_token);
    assert!(fenced_write(&b, "B's report", at_b.fencing_token));
    // A wakes and writes: it checked its lease before the pause, so only the
    // conditional write can stop it now.
    assert!(!fenced_write(&a, "A's stale report", at_a.fencing_token), "A is fenced out");
    let (body, fence): (String, i64) = a
        .query_row("SELECT body, fence FROM documents WHERE name = 'report'", [], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap();
    assert_eq!((body.as_str(), fence), ("B's report", at_b.fencing_token as i64));
    q.ack(&at_b.receipt).unwrap();
}
