//! Exactly-once effects over at-least-once delivery, with SQLite: a worker
//! pool applies deposits and records each message id in the same
//! transaction. Some handlers crash after committing (the message comes
//! back) and some stall past their lease without renewal (another worker
//! takes the message while the first is still at it); every duplicate is
//! recognised by its id, and the balance comes out exact.
//!
//! Run: `cargo run -p leaseq --example idempotent_sqlite`

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use leaseq::consumer::{HandlerError, LeasePolicy, Pool};
use leaseq::{Delivery, Engine, QueueConfig};
use rusqlite::{Connection, TransactionBehavior};

const VISIBILITY: Duration = Duration::from_millis(100);

fn open(path: &std::path::Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(10))?;
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS accounts (name TEXT PRIMARY KEY, balance INTEGER NOT NULL);
         CREATE TABLE IF NOT EXISTS processed (message_id INTEGER PRIMARY KEY);
         INSERT OR IGNORE INTO accounts VALUES ('alice', 0);",
    )?;
    Ok(conn)
}

/// Records the message id and applies the deposit in one transaction;
/// `false` if this message's effect had already happened.
fn deposit(conn: &mut Connection, d: &Delivery) -> rusqlite::Result<bool> {
    let amount: i64 = std::str::from_utf8(&d.payload).ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let fresh = tx.execute("INSERT OR IGNORE INTO processed VALUES (?1)", [d.id.as_u64() as i64])? == 1;
    if fresh {
        tx.execute("UPDATE accounts SET balance = balance + ?1 WHERE name = 'alice'", [amount])?;
    }
    tx.commit()?;
    Ok(fresh)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::temp_dir().join(format!("leaseq-idempotent-{}.sqlite", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let check = open(&path)?;

    let engine = Engine::new();
    let q = engine.create_queue("deposits", QueueConfig::default().visibility_timeout(VISIBILITY))?;
    let count = 200i64;
    for amount in 1..=count {
        q.send(amount.to_string())?;
    }

    let duplicates = Arc::new(AtomicU64::new(0));
    let seen = duplicates.clone();
    let db = path.clone();
    // max_total = the first grant: no renewals at all, so a stalled handler
    // really loses its lease mid-work (the failure the keeper normally prevents).
    let policy = LeasePolicy::default().max_total(VISIBILITY);
    // One connection per worker, opened once before the workers start.
    let pool = Pool::builder(&q).workers(4).policy(policy).start_with_state(
        move |_worker| open(&db),
        move |conn, guard| {
            let d = guard.delivery();
            let first = d.delivery_count == 1;
            if first && d.payload.ends_with(b"7") {
                // Stall past the lease: another worker gets the message meanwhile.
                std::thread::sleep(VISIBILITY * 2);
            }
            if !deposit(conn, d).map_err(HandlerError::retry)? {
                seen.fetch_add(1, Ordering::Relaxed);
            }
            if first && d.payload.ends_with(b"3") {
                return Err(HandlerError::retry("crashed after commit, before the ack"));
            }
            Ok(())
        },
    )?;

    // Wait until every message is finished (acked, or dead: none here).
    if !pool.wait_drained(Duration::from_secs(30)) {
        eprintln!("not drained after 30 s: {:?}", q.stats());
    }
    let report = pool.shutdown(Duration::from_secs(5));
    let balance: i64 = check.query_row("SELECT balance FROM accounts WHERE name = 'alice'", [], |r| r.get(0))?;
    let rows: i64 = check.query_row("SELECT COUNT(*) FROM processed", [], |r| r.get(0))?;
    let stats = q.stats();
    println!(
        "deliveries: {} ({} redelivered), leases expired mid-work: {}, late acks: {}, stale acks: {}",
        stats.received, stats.redelivered, stats.expired, stats.late_acks, stats.stale_acks
    );
    println!("duplicates recognised by message id: {}", duplicates.load(Ordering::Relaxed));
    println!("pool: {:?}", report.stats);
    println!("balance: {balance} (expected {}), processed rows: {rows}", count * (count + 1) / 2);
    assert_eq!(balance, count * (count + 1) / 2, "every deposit applied exactly once");
    assert_eq!(rows, count);
    drop(check);
    let _ = std::fs::remove_file(&path);
    Ok(())
}
