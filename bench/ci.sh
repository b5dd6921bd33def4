#!/usr/bin/env bash
# CI for bench/: builds every criterion bench (without running them) and runs
# the load generator's smoke mode, which exercises every scenario on the
# engine and the baseline with tiny sizes (a few seconds), so none can rot.
# The full run is documented in docs/benchmarks.md, not run here.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench -p leaseq-bench --no-run
cargo test -p leaseq-bench
cargo run --release -p leaseq-bench -- --help > /dev/null
cargo run --release -p leaseq-bench -- run --smoke --json target/leaseq-bench-smoke.json
# The smoke run twice over: the page, and its table of targets across runs.
cargo run --release -p leaseq-bench -- report --json target/leaseq-bench-smoke.json \
    --also target/leaseq-bench-smoke.json --out target/bench-smoke-report/benchmarks.md
grep -q "met in" target/bench-smoke-report/benchmarks.md
