#!/usr/bin/env bash
# The scaling run the 2-core development machine cannot do: full cycles with
# 1, 2, 4, 8 and 16 threads (and more, up to the core count), engine and
# baseline alternating, on a machine with at least 16 cores. About a minute.
#
#   bash bench/scaling-many-cores.sh [OUT_DIR]
#
# Writes OUT_DIR/scaling.json (every figure and the machine description) and
# OUT_DIR/scaling.md (the report page, charts beside it). OUT_DIR defaults to
# $OUT (the device tool's output folder) or target/scaling-many-cores.
# Without network access, build here first (cargo build --release -p
# leaseq-bench) and bring the binary along: BIN=path/to/leaseq-bench.
# Record the figures in docs/benchmarks.md with the machine named.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-${OUT:-target/scaling-many-cores}}"
mkdir -p "$out"
bin="${BIN:-target/release/leaseq-bench}"
if [ ! -x "$bin" ]; then
    cargo build --release -p leaseq-bench
fi
cores=$(nproc)
threads=1
for t in 2 4 8 16 32 64; do
    if [ "$t" -le "$cores" ]; then threads="$threads,$t"; fi
done
echo "cores: $cores; threads: $threads"
"$bin" run --only scaling --threads "$threads" --trials 3 --trial-ms 500 --json "$out/scaling.json"
"$bin" report --json "$out/scaling.json" --out "$out/scaling.md"
