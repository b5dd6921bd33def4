#!/usr/bin/env bash
# leaseq-server against the queues a user would pick instead, on loopback:
# beanstalkd, Redis Streams, RabbitMQ, NATS JetStream and moto's SQS server.
# Installs what is missing (apt for the servers, a venv with moto from PyPI),
# builds leaseq-server and leaseq-loadgen (release), then for each round starts
# each server in turn (the order rotates every round), runs the same workloads
# against it with leaseq-loadgen and stops it again, so no idle peer takes CPU
# from the one being measured. Ends with a table, target verdicts and a chart.
#
#   bash bench/server-peers.sh            # full: 3 rounds, 5 s per run
#   bash bench/server-peers.sh --smoke    # CI: 1 round, 1 s per run, installs nothing, skips what is missing
#   options: --rounds N  --duration S  --connections N  --out DIR  --no-install  --install
#            --only "leaseq-server redis ..."
#
# Settings comparable to leaseq-server's default (in memory, nothing synced):
# redis without RDB snapshots or AOF; beanstalkd without -b (no binlog);
# RabbitMQ a classic non-durable queue with transient messages (and Erlang's
# scheduler busy-waiting off, as RabbitMQ advises on shared hosts); NATS
# JetStream memory storage; moto keeps everything in memory anyway.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib/peers.sh
source bench/lib/peers.sh

smoke=0 rounds=3 duration=5 warmup=1 connections=32 install=1 out="" only=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --smoke) smoke=1; rounds=1; duration=1; warmup=0.3; connections=8; install=0 ;;
        --rounds) rounds=$2; shift ;;
        --duration) duration=$2; shift ;;
        --connections) connections=$2; shift ;;
        --out) out=$2; shift ;;
        --no-install) install=0 ;;
        --install) install=1 ;;
        --only) only=$2; shift ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
if [[ -z $out ]]; then
    out=target/server-peers$([[ $smoke -eq 1 ]] && echo -smoke)
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
runs=$out/runs.jsonl
: > "$runs"
work=$(mktemp -d /tmp/leaseq-peers.XXXXXX)
# The open-loop rate: half the single-message target (30,000 cycles/s).
open_rate=$([[ $smoke -eq 1 ]] && echo 2000 || echo 15000)

# --- what is installed ---------------------------------------------------
declare -A skip_reason=()
apt_packages=(redis-server beanstalkd rabbitmq-server nats-server)
if [[ $install -eq 1 ]]; then
    peers_install_apt "$out/apt.log" "${apt_packages[@]}"
fi
for bin in "${apt_packages[@]}"; do
    command -v "$bin" > /dev/null || skip_reason[$bin]="$bin is not installed"
done
venv=target/moto-venv
if [[ ! -x $venv/bin/moto_server && $install -eq 1 ]]; then
    echo "installing moto[server] into $venv (PyPI)"
    { timeout 120 python3 -m venv "$venv" && timeout 600 "$venv/bin/pip" install -q 'moto[server]'; } > "$out/pip.log" 2>&1 ||
        echo "could not install moto (see $out/pip.log)"
fi
[[ -x $venv/bin/moto_server ]] || skip_reason[moto]="moto is not installed in $venv"
if command -v nats-server > /dev/null; then
    # Debian's nats-server has JetStream (-js) since 2.2; check rather than assume.
    nats-server --help 2>&1 | grep -q -- '--jetstream' || skip_reason[nats-server]="this nats-server has no JetStream"
fi

echo "building leaseq-server and leaseq-loadgen (release)"
cargo build --release -q -p leaseq-server -p leaseq-loadgen
bin_dir=$(peers_release_dir)
loadgen=$bin_dir/leaseq-loadgen

# --- starting and stopping servers -------------------------------------
server_pid="" server_name=""
stop_server() {
    if [[ -n $server_pid ]]; then
        if [[ $server_name == rabbitmq ]]; then
            peers_rabbitmq_stop leaseqpeers@localhost "$server_pid"
        else
            peers_stop_group "$server_pid"
        fi
        server_pid=""
    fi
}
peers_epmd_note
cleanup() {
    stop_server
    peers_epmd_cleanup
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start_server() { # name
    local name=$1 log=$out/$1.log
    server_name=$name
    case "$name" in
        leaseq-server)
            setsid "$bin_dir/leaseq-server" --bind 127.0.0.1:29324 > "$log" 2>&1 &
            server_pid=$!; port=29324 ;;
        beanstalkd)
            setsid beanstalkd -l 127.0.0.1 -p 21300 > "$log" 2>&1 &
            server_pid=$!; port=21300 ;;
        redis)
            setsid redis-server --bind 127.0.0.1 --port 26379 --save '' --appendonly no --protected-mode yes \
                --dir "$work" > "$log" 2>&1 &
            server_pid=$!; port=26379 ;;
        rabbitmq)
            peers_rabbitmq_start leaseqpeers@localhost "$work/rabbitmq" 25673 25674 "$log"
            server_pid=$peers_rabbitmq_pid
            peers_rabbitmq_wait_boot "$log" "$server_pid" 90 || return 1
            port=25673 ;;
        nats)
            setsid nats-server -a 127.0.0.1 -p 24222 -js -sd "$work/nats" > "$log" 2>&1 &
            server_pid=$!; port=24222 ;;
        moto)
            (cd "$work" && exec setsid "$OLDPWD/$venv/bin/moto_server" -H 127.0.0.1 -p 25000) > "$log" 2>&1 &
            server_pid=$!; port=25000 ;;
    esac
    peers_wait_port "$port" 60 "$server_pid"
}

loadgen_args() { # name -> protocol and address
    case "$1" in
        leaseq-server) echo "--protocol sqs --address 127.0.0.1:29324" ;;
        beanstalkd) echo "--protocol beanstalk --address 127.0.0.1:21300" ;;
        redis) echo "--protocol redis --address 127.0.0.1:26379" ;;
        rabbitmq) echo "--protocol amqp --address amqp://127.0.0.1:25673/%2f" ;;
        nats) echo "--protocol nats --address nats://127.0.0.1:24222 --nats-storage memory" ;;
        moto) echo "--protocol sqs --address 127.0.0.1:25000" ;;
    esac
}

requirement() { # server name -> the binary its skip reason is under
    case "$1" in
        beanstalkd) echo beanstalkd ;; redis) echo redis-server ;; rabbitmq) echo rabbitmq-server ;;
        nats) echo nats-server ;; moto) echo moto ;; *) echo none ;;
    esac
}

servers=(leaseq-server beanstalkd redis rabbitmq nats moto)
if [[ -n $only ]]; then read -r -a servers <<< "$only"; fi
for s in "${servers[@]}"; do
    reason=${skip_reason[$(requirement "$s")]:-}
    [[ -n $reason ]] && echo "skipping $s: $reason"
done

run_timeout=$(awk -v d="$duration" -v w="$warmup" 'BEGIN { printf "%d", d + w + 60 }')
failures=0
for round in $(seq 1 "$rounds"); do
    # Rotate the order each round so no server always goes first or last.
    n=${#servers[@]}
    for i in $(seq 0 $((n - 1))); do
        name=${servers[$(((i + round - 1) % n))]}
        [[ -n ${skip_reason[$(requirement "$name")]:-} ]] && continue
        echo "=== round $round/$rounds: $name ($(date +%T))"
        if ! start_server "$name"; then
            echo "could not start $name (see $out/$name.log); skipping it this round"
            stop_server; failures=$((failures + 1)); continue
        fi
        modes=("--batch 1" "--batch 10")
        # moto cannot come near the open-loop rate; its closed loop says enough.
        [[ $name != moto ]] && modes+=("--batch 1 --rate $open_rate")
        for mode in "${modes[@]}"; do
            # shellcheck disable=SC2046,SC2086
            if ! timeout "$run_timeout" "$loadgen" run $(loadgen_args "$name") --label "$name" --round "$round" \
                --connections "$connections" --duration "$duration" --warmup "$warmup" $mode \
                --queue "loadgen$round" --json "$runs"; then
                echo "run failed: $name $mode"; failures=$((failures + 1))
            fi
        done
        stop_server
    done
done

"$loadgen" report --input "$runs" --markdown "$out/report.md" --svg "$out/peers.svg"
cat "$out/report.md"
echo "results: $runs, $out/report.md, $out/peers.svg"
if [[ $failures -gt 0 ]]; then
    echo "$failures runs or starts failed"
    # The smoke must not fail CI over a peer; leaseq-server's own runs must pass.
    grep -q '"label":"leaseq-server"' "$runs" || exit 1
    [[ $smoke -eq 1 ]] || exit 1
fi
