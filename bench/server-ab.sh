#!/usr/bin/env bash
# Two builds of leaseq-server, A and B, on the same loads, alternating in
# every round, so the ratio B/A is measured on the same machine in the same
# minutes (this machine is shared: absolute figures drift, ratios less).
#
#   bench/server-ab.sh A_BINARY B_BINARY [out_dir]
#
# e.g. a build of the previous commit against this one:
#   git worktree add /tmp/prev HEAD~1 && cargo build --release -p leaseq-server \
#     --manifest-path /tmp/prev/Cargo.toml --target-dir /tmp/prev-target
#   bench/server-ab.sh /tmp/prev-target/release/leaseq-server target/release/leaseq-server
#
# Each round starts each server on a fresh data dir (--sync always, on the
# disk under $TMPDIR), runs leaseq-loadgen's send/receive/delete cycles at
# each CONNECTIONS count, and stops it. The fdatasync time of that disk is
# measured first, as every durability figure needs. Environment: ROUNDS (3),
# CONNECTIONS ("32 128"), BATCH (1), DURATION (5), SYNC (always; `memory`
# runs both in memory, without a data dir), PORT (9351).
set -euo pipefail

a_bin=${1:?usage: bench/server-ab.sh A_BINARY B_BINARY [out_dir]}
b_bin=${2:?usage: bench/server-ab.sh A_BINARY B_BINARY [out_dir]}
out=${3:-target/server-ab}
rounds=${ROUNDS:-3}
connections=${CONNECTIONS:-"32 128"}
batch=${BATCH:-1}
duration=${DURATION:-5}
sync=${SYNC:-always}
port=${PORT:-9351}

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cargo build --release -q -p leaseq-loadgen
loadgen=target/release/leaseq-loadgen
mkdir -p "$out"
runs="$out/runs.jsonl"
: > "$runs"
scratch=$(mktemp -d "${TMPDIR:-/tmp}/leaseq-server-ab.XXXXXX")
server_pid=
cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    rm -rf "$scratch"
}
trap cleanup EXIT

python3 - "$scratch" <<'EOF'
import os, sys, time
path = os.path.join(sys.argv[1], "fdatasync-probe")
fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
times = []
for i in range(200):
    os.write(fd, b"x" * 512)
    t = time.perf_counter()
    os.fdatasync(fd)
    times.append(time.perf_counter() - t)
os.close(fd)
times.sort()
print(f"fdatasync on {sys.argv[1]}: median {times[100]*1e3:.2f} ms, p90 {times[180]*1e3:.2f} ms (200 syncs)")
EOF

start_server() { # binary data_dir
    if [ "$sync" = memory ]; then
        "$1" --bind "127.0.0.1:$port" >"$scratch/server.log" 2>&1 &
    else
        "$1" --bind "127.0.0.1:$port" --data-dir "$2" --sync "$sync" >"$scratch/server.log" 2>&1 &
    fi
    server_pid=$!
    for _ in $(seq 100); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    echo "the server did not start:" >&2
    cat "$scratch/server.log" >&2
    return 1
}

stop_server() {
    kill "$server_pid"
    wait "$server_pid" || true
    server_pid=
}

for round in $(seq "$rounds"); do
    # The order alternates between rounds, so neither build always runs first.
    if [ $((round % 2)) -eq 1 ]; then order="A B"; else order="B A"; fi
    for which in $order; do
        if [ "$which" = A ]; then bin=$a_bin; else bin=$b_bin; fi
        dir="$scratch/data-$which-$round"
        start_server "$bin" "$dir"
        for c in $connections; do
            "$loadgen" run --protocol sqs --address "127.0.0.1:$port" --label "$which-c$c" --round "$round" \
                --connections "$c" --batch "$batch" --duration "$duration" --queue "ab$round$which$c" \
                --json "$runs" >/dev/null
        done
        stop_server
        rm -rf "$dir"
    done
done

python3 - "$runs" <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
def rate(row):
    for key in ("msgs_per_s",):
        if key in row:
            return float(row[key])
    raise SystemExit(f"no throughput field in {sorted(row)}")
by = {}
for row in rows:
    by.setdefault((row["label"], row["round"]), rate(row))
labels = sorted({label.split("-", 1)[1] for label, _ in by})
rounds = sorted({r for _, r in by})
print("| connections | round | A msg/s | B msg/s | B/A |")
print("|---|---|---|---|---|")
for c in labels:
    ratios = []
    for r in rounds:
        a, b = by.get((f"A-{c}", r)), by.get((f"B-{c}", r))
        if a and b:
            ratios.append(b / a)
            print(f"| {c[1:]} | {r} | {a:,.0f} | {b:,.0f} | {b/a:.2f}x |")
    if ratios:
        print(f"| {c[1:]} | median | | | {statistics.median(ratios):.2f}x |")
EOF
