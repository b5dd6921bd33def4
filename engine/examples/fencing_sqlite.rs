//! Fencing-token writes: a consumer that lost its lease without knowing it (a
//! long pause right after it checked) must not overwrite the work of the
//! consumer that holds the message now. The queue cannot stop a write to a
//! system outside its lease protocol; the write itself must be conditional
//! on the delivery's fencing token (`... WHERE fence < $token`).
//!
//! Run: `cargo run -p leaseq --example fencing_sqlite`

use std::time::Duration;

use leaseq::{Engine, ManualClock, QueueConfig};
use rusqlite::{Connection, params};

/// Writes only if no newer attempt has written; whether it wrote.
fn fenced_write(conn: &Connection, body: &str, token: u64) -> rusqlite::Result<bool> {
    let changed = conn.execute(
        "UPDATE documents SET body = ?1, fence = ?2 WHERE name = 'report' AND fence < ?2",
        params![body, token as i64],
    )?;
    Ok(changed == 1)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let db = Connection::open_in_memory()?;
    db.execute_batch(
        "CREATE TABLE documents (name TEXT PRIMARY KEY, body TEXT NOT NULL, fence INTEGER NOT NULL);
         INSERT INTO documents VALUES ('report', 'empty', 0);",
    )?;
    // A manual clock makes the pause exact; the same happens on the real clock.
    let clock = ManualClock::new();
    let engine = Engine::builder().clock(clock.clone()).build();
    let q = engine.create_queue("renders", QueueConfig::default().visibility_timeout(Duration::from_secs(30)))?;
    q.send(b"render the report")?;

    let a = q.receive(1)?.remove(0);
    println!("A received the job with fencing token {}", a.fencing_token);
    println!("A checks its lease (held), then pauses for 40 s");
    clock.advance(Duration::from_secs(40));
    let b = q.receive(1)?.remove(0);
    println!("the lease ran out; B received the job with fencing token {}", b.fencing_token);
    println!("B writes: {}", fenced_write(&db, "B's report", b.fencing_token)?);
    q.ack(&b.receipt)?;
    let wrote = fenced_write(&db, "A's stale report", a.fencing_token)?;
    println!(
        "A wakes and writes with token {}: {}",
        a.fencing_token,
        if wrote { "WROTE" } else { "refused (fenced out)" }
    );
    let body: String = db.query_row("SELECT body FROM documents WHERE name = 'report'", [], |r| r.get(0))?;
    println!("the document holds: {body}");
    assert!(!wrote);
    assert_eq!(body, "B's report");
    Ok(())
}
