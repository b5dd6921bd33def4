//! The driver thread lives exactly as long as its engine. Alone in its own
//! test binary so no other test's engines start or stop drivers meanwhile.

use std::thread;
use std::time::{Duration, Instant};

use leaseq::{Engine, QueueConfig};

fn drivers() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .filter(|name| name.trim() == "leaseq-driver")
                .count()
        })
        .unwrap_or(0)
}

fn eventually(done: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(5));
    }
    done()
}

#[test]
fn dropping_the_last_handle_stops_the_driver() {
    if !std::path::Path::new("/proc/self/task").exists() {
        return; // not Linux: no thread names to observe
    }
    let engine = Engine::new();
    let queue = engine.create_queue("d", QueueConfig::default()).unwrap();
    // A thread names itself once it runs: give it a moment.
    assert!(eventually(|| drivers() == 1), "one driver per engine");
    drop(engine);
    thread::sleep(Duration::from_millis(20));
    assert_eq!(drivers(), 1, "a queue handle keeps the engine and its driver alive");
    queue.send(&b"x"[..]).unwrap();
    drop(queue);
    assert!(eventually(|| drivers() == 0), "the driver thread outlived its engine");
}
