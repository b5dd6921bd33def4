//! What `leaseq-server --data-dir` says at start about the log it recovered,
//! run as a process: a torn last write is cut off and reported; damage
//! before the end stops the server with the file, the byte and the way out
//! (`--repair skip-damaged`); with that flag it starts, and its report names
//! the bytes it skipped and warns that records were lost.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use leaseq::{Engine, QueueConfig};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("leaseq-server-repair-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A data dir holding queue `q` with six messages; returns its only segment
/// and where each message's record starts in it.
fn data_dir_with_six_messages(dir: &Path) -> (PathBuf, Vec<u64>) {
    let engine = Engine::builder().data_dir(dir).open().unwrap();
    let q = engine.create_queue("q", QueueConfig::default()).unwrap();
    let mut starts = Vec::new();
    for i in 0..6u8 {
        starts.push(engine.log_stats().unwrap().bytes);
        q.send(vec![b'a' + i; 40]).unwrap();
    }
    let stats = engine.log_stats().unwrap();
    let header_and_preamble = stats.log_bytes - stats.bytes;
    drop((q, engine));
    let mut segments: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    segments.sort();
    (segments[0].clone(), starts.into_iter().map(|at| header_and_preamble + at).collect())
}

/// Starts the server on `dir` with `extra` flags and returns its stderr up
/// to its "listening" line (then stops it), or all of it if it exited.
fn start_output(dir: &Path, extra: &[&str]) -> (bool, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_leaseq-server"))
        .args(["--bind", "127.0.0.1:0", "--data-dir"])
        .arg(dir)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (lines, seen) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let mut text = String::new();
    let mut served = false;
    while let Ok(line) = seen.recv_timeout(Duration::from_secs(30)) {
        text.push_str(&line);
        text.push('\n');
        if line.contains("listening on") {
            served = true;
            break;
        }
    }
    if served {
        let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    }
    let _ = child.wait();
    (served, text)
}

#[test]
fn a_torn_tail_is_reported_at_start() {
    let dir = scratch("torn");
    let (segment, _) = data_dir_with_six_messages(&dir);
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes.extend_from_slice(&[0x5a; 17]);
    std::fs::write(&segment, &bytes).unwrap();
    let (served, text) = start_output(&dir, &[]);
    assert!(served, "{text}");
    assert!(text.contains("recovered") && text.contains("1 queues and 6 messages"), "{text}");
    assert!(text.contains("cut a torn last write of 17 bytes"), "{text}");
    assert!(!text.contains("WARNING"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn damage_stops_the_server_until_it_is_told_to_skip_it() {
    let dir = scratch("damaged");
    let (segment, starts) = data_dir_with_six_messages(&dir);
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[starts[2] as usize + 20] ^= 0x10;
    std::fs::write(&segment, &bytes).unwrap();

    let (served, text) = start_output(&dir, &[]);
    assert!(!served, "a damaged log was served:\n{text}");
    assert!(text.contains(&format!("{} is damaged at byte {}", segment.display(), starts[2])), "{text}");
    assert!(text.contains("--repair skip-damaged"), "{text}");

    let (served, text) = start_output(&dir, &["--repair", "skip-damaged"]);
    assert!(served, "{text}");
    let skipped = format!("SKIPPED {} damaged bytes at byte {}", starts[3] - starts[2], starts[2]);
    assert!(text.contains(&skipped) && text.contains("1 queues and 5 messages"), "{text}");
    assert!(text.contains("WARNING: --repair skip-damaged lost the records"), "{text}");

    let (served, text) = start_output(&dir, &["--repair", "sometimes"]);
    assert!(!served && text.contains("invalid value 'sometimes'"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
