//! Replays every file of every fuzz target's corpus (`fuzz/corpus/<target>/`)
//! through the same checking code the fuzz target runs, on stable Rust, so CI
//! exercises the seeds and every past crash without nightly or cargo-fuzz.

use std::fs;
use std::path::PathBuf;

use leaseq_model::differential;

type Check = fn(&[u8]) -> Result<(), String>;

fn replay(target: &str, check: Check) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus").join(target);
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus folder {} is missing: {e}", dir.display()))
        .map(|entry| entry.expect("a readable corpus entry").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "the {target} corpus is empty: keep at least its seeds in {}", dir.display());
    let mut findings = Vec::new();
    for file in &files {
        let data = fs::read(file).expect("a readable corpus file");
        let result = std::panic::catch_unwind(|| check(&data));
        match result {
            Ok(Ok(())) => {}
            Ok(Err(finding)) => findings.push(format!("{}: {finding}", file.display())),
            Err(_) => findings.push(format!("{}: panicked", file.display())),
        }
    }
    assert!(
        findings.is_empty(),
        "{} of {} {target} corpus files fail:\n{}",
        findings.len(),
        files.len(),
        findings.join("\n")
    );
}

#[test]
fn ops_vs_model_corpus() {
    replay("ops_vs_model", differential::ops_vs_model);
}

#[test]
fn receipt_parse_corpus() {
    replay("receipt_parse", differential::receipt_parse);
}

#[test]
fn config_corpus() {
    replay("config", differential::config);
}
