//! Profiling aid: callers sending 100-byte messages under
//! `SyncPolicy::Never` (the writer's sustained rate), for perf or callgrind.
//! Arguments: caller threads (1), sends in all (2,000,000).
fn main() {
    let mut args = std::env::args().skip(1);
    let callers: usize = args.next().map_or(1, |a| a.parse().expect("callers: a number"));
    let sends: usize = args.next().map_or(2_000_000, |a| a.parse().expect("sends: a number"));
    let dir = std::env::temp_dir().join("leaseq-never-sends");
    let _ = std::fs::remove_dir_all(&dir);
    let engine = leaseq::Engine::builder().data_dir(&dir).sync(leaseq::SyncPolicy::Never).open().unwrap();
    let q = engine.create_queue("q", leaseq::QueueConfig::default().max_messages(1 << 23)).unwrap();
    // A shared static body: the loop times the send, not a copy of it.
    let body = leaseq::Bytes::from_static(&[0x5a; 100]);
    let started = std::time::Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..callers {
            scope.spawn(|| {
                for _ in 0..sends / callers {
                    q.send(&body).unwrap();
                }
            });
        }
    });
    let sent = started.elapsed();
    engine.flush().unwrap();
    let flushed = started.elapsed();
    println!(
        "{callers} callers: {:.0} sends/s returned, {:.0} records/s written",
        sends as f64 / sent.as_secs_f64(),
        sends as f64 / flushed.as_secs_f64()
    );
    drop(q);
    drop(engine);
    let _ = std::fs::remove_dir_all(&dir);
}
