#!/usr/bin/env bash
# Runs every fuzz target for a bounded time (default 60 s each) when a nightly
# toolchain and cargo-fuzz are available; skips with a message otherwise.
# A crash fails the script; libFuzzer leaves the input in fuzz/artifacts/<target>/.
# The corpus replay on stable (`cargo test -p leaseq-model --test corpus_replay`)
# runs in `cargo test --workspace` regardless.
#
# Usage: fuzz/ci.sh [seconds-per-target]
set -euo pipefail
cd "$(dirname "$0")"

SECONDS_PER_TARGET="${1:-60}"
TARGETS=(ops_vs_model receipt_parse config)

if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz/ci.sh: SKIPPED: no nightly toolchain (cargo +nightly); the corpus replay on stable still ran in cargo test"
    exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz/ci.sh: cargo-fuzz missing; installing it from crates.io"
    if ! cargo install cargo-fuzz --locked; then
        echo "fuzz/ci.sh: SKIPPED: cargo-fuzz is not installed and could not be installed (is crates.io reachable?)"
        exit 0
    fi
fi

start=$(date +%s)
cargo +nightly fuzz build -O 2>&1 | tail -n 3
for target in "${TARGETS[@]}"; do
    # Run from a scratch copy of the seeds so the checked-in corpus stays small.
    work="target/ci-corpus/$target"
    rm -rf "$work"
    mkdir -p "$work"
    echo "=== fuzz $target for ${SECONDS_PER_TARGET}s ($(date +%T))"
    if ! cargo +nightly fuzz run -O "$target" "$work" "corpus/$target" -- \
        -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -print_final_stats=1 2>&1 | tail -n 25; then
        echo "fuzz/ci.sh: FAILED: $target crashed; the input is in fuzz/artifacts/$target/"
        exit 1
    fi
done
echo "fuzz/ci.sh: all targets ran ${SECONDS_PER_TARGET}s each without a finding ($(($(date +%s) - start)) s in all)"
