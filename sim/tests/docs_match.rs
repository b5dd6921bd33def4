//! docs/lease-tuning.md quotes the simulator's output; this test replays
//! every quoted command and fails when the page and the simulator drift
//! apart.
//!
//! A block is marked `<!-- checked: leaseq-sim ARGS -->` on the line before
//! its fence; each non-empty line of the block must appear, in order, in the
//! output of `leaseq-sim ARGS` (the wall-time line aside, lines are
//! deterministic for a seed). A checked sweep must also match the CSV and
//! charts under its `--out` folder byte for byte.

use std::path::{Path, PathBuf};

use leaseq_sim::cli::{self, Command};
use leaseq_sim::{simulate, sweep};

const MARK: &str = "<!-- checked: leaseq-sim ";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("sim/ sits in the workspace").to_path_buf()
}

/// (line number, command words, block lines) for each marked block.
fn checked_blocks(page: &str) -> Vec<(usize, Vec<String>, Vec<String>)> {
    let lines: Vec<&str> = page.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if let Some(rest) = lines[i].strip_prefix(MARK) {
            let words = rest.trim_end().strip_suffix("-->").expect("a marker ends with -->");
            let words: Vec<String> = words.split_whitespace().map(String::from).collect();
            assert_eq!(lines.get(i + 1).copied(), Some("```"), "line {}: a fence must follow the marker", i + 1);
            let body: Vec<String> = lines[i + 2..].iter().take_while(|l| **l != "```").map(|l| l.to_string()).collect();
            blocks.push((i + 1, words, body));
            i += 2 + body_len(&lines[i + 2..]);
        }
        i += 1;
    }
    blocks
}

fn body_len(lines: &[&str]) -> usize {
    lines.iter().take_while(|l| **l != "```").count()
}

/// The lines of `expected` missing from `output` in order.
fn missing<'a>(expected: &'a [String], output: &str) -> Vec<&'a str> {
    let mut out = output.lines().map(str::trim_end);
    expected
        .iter()
        .map(|l| l.trim_end())
        .filter(|l| !l.is_empty())
        .filter(|want| !out.by_ref().any(|got| got == *want))
        .collect()
}

#[test]
fn every_checked_block_of_the_lease_tuning_page_is_what_the_simulator_prints() {
    let root = repo();
    let page = std::fs::read_to_string(root.join("docs/lease-tuning.md")).expect("docs/lease-tuning.md");
    let blocks = checked_blocks(&page);
    assert!(blocks.len() >= 6, "the page lost its checked blocks: {}", blocks.len());
    let mut drift = Vec::new();
    for (line, words, body) in &blocks {
        let output = match cli::parse(words, None).unwrap_or_else(|e| panic!("line {line}: {e}")) {
            Command::Run(scenario) => simulate(&scenario).expect("the documented run is valid").to_string(),
            Command::Sweep { base, timeouts, out } => {
                let output = sweep(&base, &timeouts).expect("the documented sweep is valid");
                let mut files = vec![("sweep.csv".to_string(), output.csv.clone())];
                files.extend(output.charts.iter().map(|(stem, svg)| (format!("{stem}.svg"), svg.clone())));
                for (name, body) in files {
                    let path = root.join(&out).join(&name);
                    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
                    if on_disk != body {
                        drift.push(format!(
                            "{} differs from the sweep's output: run `cargo run --release -p leaseq-sim -- {}`",
                            path.display(),
                            words.join(" ")
                        ));
                    }
                }
                format!("{}{}", output.table(), output.recommendation_text())
            }
            Command::Help => cli::HELP.to_string(),
        };
        let gone = missing(body, &output);
        if !gone.is_empty() {
            drift.push(format!(
                "docs/lease-tuning.md line {line} (`leaseq-sim {}`): not in the output:\n  {}\n-- the output now:\n{output}",
                words.join(" "),
                gone.join("\n  ")
            ));
        }
    }
    assert!(drift.is_empty(), "the page and the simulator drifted apart:\n{}", drift.join("\n\n"));
}

#[test]
fn a_changed_figure_is_caught() {
    let body = vec!["effects           21563 committed, 880 duplicate commits".to_string()];
    assert!(missing(&body, "x\neffects           21563 committed, 880 duplicate commits  \n").is_empty());
    assert_eq!(missing(&body, "effects           21563 committed, 881 duplicate commits\n").len(), 1);
    // Order matters, so a line cannot be matched by an earlier run's text.
    let two = vec!["b".to_string(), "a".to_string()];
    assert_eq!(missing(&two, "a\nb\n"), vec!["a"]);
    let page = "x\n<!-- checked: leaseq-sim run --timeout 5 -->\n```\none\n\ntwo\n```\n";
    let blocks = checked_blocks(page);
    assert_eq!(blocks.len(), 1);
    assert_eq!(blocks[0].1, vec!["run", "--timeout", "5"]);
    assert_eq!(blocks[0].2, vec!["one", "", "two"]);
}
