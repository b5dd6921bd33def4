//! Profiling aid: one caller sending 2,000,000 100-byte messages under
//! `SyncPolicy::Never` (the writer's sustained rate), for perf or callgrind.
fn main() {
    let dir = std::env::temp_dir().join("leaseq-never-sends");
    let _ = std::fs::remove_dir_all(&dir);
    let engine = leaseq::Engine::builder().data_dir(&dir).sync(leaseq::SyncPolicy::Never).open().unwrap();
    let q = engine.create_queue("q", leaseq::QueueConfig::default().max_messages(1 << 22)).unwrap();
    // A shared static body: the loop times the send, not a copy of it.
    let body = leaseq::Bytes::from_static(&[0x5a; 100]);
    let started = std::time::Instant::now();
    for _ in 0..2_000_000 {
        q.send(&body).unwrap();
    }
    engine.flush().unwrap();
    println!("{:.0} sends/s", 2e6 / started.elapsed().as_secs_f64());
    drop(q);
    drop(engine);
    let _ = std::fs::remove_dir_all(&dir);
}
