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
# The independent-cycles scenario on all three queues (engine, full-contract
# and lean baselines) must report against both baselines.
grep -q "vs lean baseline" target/leaseq-bench-smoke.json
grep -q "vs full-contract baseline" target/leaseq-bench-smoke.json
# The smoke run three times over: the page, its table of targets across runs,
# and a section as if from another machine.
cargo run --release -p leaseq-bench -- report --json target/leaseq-bench-smoke.json \
    --also target/leaseq-bench-smoke.json --elsewhere target/leaseq-bench-smoke.json \
    --out target/bench-smoke-report/benchmarks.md
grep -q "met in" target/bench-smoke-report/benchmarks.md
grep -q "On another machine" target/bench-smoke-report/benchmarks.md
test -f target/bench-smoke-report/benchmarks/leaseq-bench-smoke-scaling.svg
# The durability benchmark at its quick size (fdatasync, every policy, recovery)
# and the peers at the same durability where installed (.ci/run installs
# redis-server and beanstalkd; SQLite is built in): every row must appear.
cargo run --release -p leaseq-bench --example durability -- --quick --peers target/durability-smoke |
    tee target/durability-smoke.txt
grep -q "^| Always | 64 " target/durability-smoke.txt
grep -q "^recovery of 100000 live messages" target/durability-smoke.txt
grep -q "| SQLite WAL FULL | 64 " target/durability-smoke.txt
grep -q "^churn: disk use at the end" target/durability-smoke.txt
# leaseq-server against the peers that are installed (.ci/run installs redis-server
# and beanstalkd; the others are skipped with the reason printed), 1 s per run:
# leaseq-server's own runs must succeed and the report must have its verdicts.
bash bench/server-peers.sh --smoke --out target/server-peers-smoke
grep -q "^| leaseq-server | batch 10 " target/server-peers-smoke/report.md
grep -q "single-message cycles/s" target/server-peers-smoke/report.md
test -f target/server-peers-smoke/peers.svg
# The replicated peers, 1 s per run and one leader kill each: one durable
# leaseq-server always, its 3-node cluster once leaseq-server has --cluster,
# RabbitMQ quorum queues and NATS R3 where installed (skipped with the reason
# printed otherwise); leaseq's own runs must succeed.
bash bench/cluster-peers.sh --smoke --out target/cluster-peers-smoke
grep -q "^| leaseq-1 | batch 10 " target/cluster-peers-smoke/report.md
grep -q "^| leaseq-3 | batch 10 " target/cluster-peers-smoke/report.md
grep -q "^- leaseq-3 / leaseq-1, single" target/cluster-peers-smoke/report.md
test -f target/cluster-peers-smoke/cluster-peers.svg
