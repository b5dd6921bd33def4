#!/usr/bin/env bash
# Replicated queues at the same durability, on loopback: leaseq-server's
# 3-node cluster (--cluster) against one durable leaseq-server (--sync always),
# a 3-node RabbitMQ cluster with a quorum queue and a 3-node NATS cluster with
# an R3 JetStream file stream. Every send counts only once it is committed:
# on a quorum of the nodes (leaseq's cluster, quorum queue confirms, JetStream
# publish acks of a replicated stream) or on the one node's disk (leaseq-1).
#
# For each round, each system in turn (the order rotates every round) is
# started, runs the same closed-loop workloads with leaseq-loadgen (single
# messages and batches of 10), then takes one failover probe (its leader
# killed with SIGKILL under a light load, see `leaseq-loadgen failover`) and
# is stopped again, so no idle cluster takes CPU from the one measured.
# Kills beyond the rounds (--kills) run on fresh clusters afterwards. Starts
# by timing one fdatasync on the disk the data dirs are on, since every
# figure here depends on it. Ends with a table, ratios and failover times.
#
#   bash bench/cluster-peers.sh            # full: 3 rounds, 5 s per run, 5 kills per cluster
#   bash bench/cluster-peers.sh --smoke    # CI: 1 round, 1 s runs, 1 kill, installs nothing, skips what is missing
#   options: --rounds N  --duration S  --connections N  --kills N  --out DIR  --no-install  --install
#            --only "leaseq-3 leaseq-1 rabbitmq-quorum nats-r3"
#            --spread   (clients over all three nodes instead of node 1)
#            --server PATH   (another leaseq-server binary, e.g. a build with --cluster)
#
# leaseq-3 needs `leaseq-server --cluster`; without it (the flag is not in
# --help) it is skipped with that reason and the rest still runs.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib/peers.sh
source bench/lib/peers.sh

# --- asking a cluster who leads --------------------------------------------
# `leaseq-loadgen failover` runs `bash bench/cluster-peers.sh --leader-pid
# SYSTEM STATE QUEUE` to learn which process to kill; STATE is written by
# start_system below (the nodes' ports, names and process ids), QUEUE is the
# probe's queue or stream (RabbitMQ and NATS lead each one separately).

# json_get URL KEY: the top-level KEY of URL's JSON answer, empty on any failure.
json_get() {
    python3 - "$1" "$2" << 'EOF' 2> /dev/null || true
import json, sys, urllib.request
try:
    value = json.load(urllib.request.urlopen(sys.argv[1], timeout=2)).get(sys.argv[2])
    print("" if value is None else value)
except Exception:
    pass
EOF
}

# nats_stream_leader MONITOR_PORT STREAM: the server name leading STREAM.
nats_stream_leader() {
    python3 - "http://127.0.0.1:$1/jsz?streams=true&accounts=true" "$2" << 'EOF' 2> /dev/null || true
import json, sys, urllib.request
jsz = json.load(urllib.request.urlopen(sys.argv[1], timeout=2))
for account in jsz.get("account_details") or []:
    for stream in account.get("stream_detail") or []:
        leader = (stream.get("cluster") or {}).get("leader")
        if stream.get("name") == sys.argv[2] and leader:
            print(leader)
            sys.exit(0)
EOF
}

# leader_pid SYSTEM QUEUE: prints the process id of QUEUE's leader from the
# sourced state.
leader_pid() {
    local i leader="" queue=$2
    case "$1" in
        leaseq-3)
            for i in 0 1 2; do
                leader=$(json_get "http://127.0.0.1:${ports[$i]}/cluster/status" leader)
                [[ $leader =~ ^[123]$ ]] && { echo "${pids[$((leader - 1))]}"; return 0; }
            done ;;
        rabbitmq-quorum)
            # name, type, leader and members of the queue; the members go to the log.
            for i in 0 1 2; do
                leader=$(peers_rabbitmqctl "${nodes[$i]}" list_queues name type leader members \
                    --quiet --no-table-headers 2> /dev/null | awk -v q="$queue" '$1 == q' | tee -a "$members_log" |
                    awk 'NR == 1 { print $3 }') || true
                [[ -n $leader ]] && break
            done
            for i in 0 1 2; do
                [[ ${nodes[$i]} == "$leader" ]] && { echo "${pids[$i]}"; return 0; }
            done ;;
        nats-r3)
            for i in 0 1 2; do
                leader=$(nats_stream_leader "${monitor_ports[$i]}" "$queue")
                [[ -n $leader ]] && break
            done
            for i in 0 1 2; do
                [[ n$((i + 1)) == "$leader" ]] && { echo "${pids[$i]}"; return 0; }
            done ;;
    esac
    echo "no leader found for $1 (last answer: '$leader')" >&2
    return 1
}

if [[ ${1:-} == --leader-pid ]]; then
    # shellcheck disable=SC1090
    source "$3"
    leader_pid "$2" "$4"
    exit
fi

# --- options ---------------------------------------------------------------
smoke=0 rounds=3 duration=5 warmup=1 connections=32 install=1 out="" only="" kills=5 spread=0 server=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --smoke) smoke=1; rounds=1; duration=1; warmup=0.3; connections=8; install=0; kills=1 ;;
        --rounds) rounds=$2; shift ;;
        --duration) duration=$2; shift ;;
        --connections) connections=$2; shift ;;
        --kills) kills=$2; shift ;;
        --out) out=$2; shift ;;
        --no-install) install=0 ;;
        --install) install=1 ;;
        --only) only=$2; shift ;;
        --spread) spread=1 ;;
        --server) server=$2; shift ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
if [[ -z $out ]]; then
    out=target/cluster-peers$([[ $smoke -eq 1 ]] && echo -smoke)
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
runs=$out/runs.jsonl failovers=$out/failover.jsonl members_log=$out/rabbitmq-quorum.members.txt
: > "$runs"
: > "$failovers"
: > "$members_log"
: > "$out/fdatasync.tsv"
# On the disk, not tmpfs: the data dirs' fdatasync is what is measured.
work=$(mktemp -d /var/tmp/leaseq-cluster-peers.XXXXXX)
chmod 711 "$work" # RabbitMQ runs as its own user and keeps its nodes' dirs in here

# --- what is installed -------------------------------------------------------
declare -A skip_reason=()
if [[ $install -eq 1 ]]; then
    peers_install_apt "$out/apt.log" rabbitmq-server nats-server
fi
command -v python3 > /dev/null || { echo "cluster-peers.sh needs python3 (JSON status pages, fdatasync timing)" >&2; exit 1; }
command -v rabbitmq-server > /dev/null || skip_reason[rabbitmq-quorum]="rabbitmq-server is not installed"
if ! command -v nats-server > /dev/null; then
    skip_reason[nats-r3]="nats-server is not installed"
elif ! nats-server --help 2>&1 | grep -q -- '--jetstream'; then
    skip_reason[nats-r3]="this nats-server has no JetStream"
fi

echo "building leaseq-server and leaseq-loadgen (release)"
cargo build --release -q -p leaseq-server -p leaseq-loadgen
bin_dir=$(peers_release_dir)
loadgen=$bin_dir/leaseq-loadgen
server=${server:-$bin_dir/leaseq-server}
if ! "$server" --help 2>&1 | grep -q -- '--cluster'; then
    skip_reason[leaseq-3]="this leaseq-server has no --cluster (the cluster mode is not built yet)"
fi

# --- the disk and the versions ----------------------------------------------
fsync_samples=$([[ $smoke -eq 1 ]] && echo 50 || echo 500)
# measure_fdatasync [N]: one 4 KiB append and its fdatasync, N times, in the work dir.
measure_fdatasync() {
    python3 - "$work/fsync-probe" "${1:-$fsync_samples}" << 'EOF'
import os, statistics, sys, time
path, n = sys.argv[1], int(sys.argv[2])
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
block, times = b"x" * 4096, []
for i in range(n):
    os.pwrite(fd, block, i * 4096)
    start = time.perf_counter()
    os.fdatasync(fd)
    times.append((time.perf_counter() - start) * 1e6)
os.close(fd)
os.unlink(path)
times.sort()
print(f"median {statistics.median(times):.0f} µs, p99 {times[int(0.99 * (n - 1))]:.0f} µs, "
      f"max {times[-1]:.0f} µs over {n} appends of 4 KiB")
EOF
}
fdatasync=$(measure_fdatasync)
filesystem=$(df -T "$work" | awk 'NR == 2 { print $2 " on " $1 }')
echo "fdatasync on $work ($filesystem): $fdatasync"

nats_sync="not set"
if [[ -z ${skip_reason[nats-r3]:-} ]]; then
    # sync_interval arrived in nats-server 2.10; an older server refuses the field.
    printf 'listen: 127.0.0.1:24299\njetstream { store_dir: "%s", sync_interval: always }\n' "$work/nats-probe" > "$work/nats-probe.conf"
    if timeout 10 nats-server -t -c "$work/nats-probe.conf" > "$work/nats-probe.log" 2>&1; then
        nats_sync="always"
    else
        nats_sync="unsupported ($(grep -o 'unknown field.*' "$work/nats-probe.log" | head -1 || echo refused)): file store syncs on its own timer"
    fi
fi

{
    echo "- machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), $(free -g | awk '/Mem:/ { print $2 }') GiB, shared with other work"
    echo "- disk: $filesystem; fdatasync $fdatasync"
    echo "- leaseq-server: $("$server" --version 2>&1 | head -1) ($server), tree $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    command -v rabbitmq-server > /dev/null &&
        echo "- RabbitMQ: $(dpkg-query -W -f '${Version}' rabbitmq-server 2>/dev/null || echo '?') (Erlang $(dpkg-query -W -f '${Version}' erlang-base 2>/dev/null || echo '?'))"
    command -v nats-server > /dev/null && echo "- NATS: $(nats-server --version 2>&1 | head -1); JetStream sync_interval: $nats_sync"
    echo "- clients: $([[ $spread -eq 1 ]] && echo 'spread over the three nodes (connection i on node i mod 3)' || echo 'all on node 1')"
} > "$out/environment.md"
cat "$out/environment.md"

# --- starting and stopping one system ----------------------------------------
# The running system: its name, the process groups started (setsid), and for
# RabbitMQ its node names and the Erlang VMs' process ids.
sys_name="" sys_groups=() sys_nodes=() sys_vms=()

stop_system() {
    local i
    if [[ $sys_name == rabbitmq-quorum ]]; then
        for i in "${!sys_nodes[@]}"; do
            peers_rabbitmq_stop "${sys_nodes[$i]}" "${sys_groups[$i]}"
        done
        # A VM that did not stop (or a half-started node) is ended by its own id.
        for i in "${sys_vms[@]}"; do
            [[ $i =~ ^[0-9]+$ ]] && kill -KILL "$i" 2> /dev/null || true
        done
    else
        for i in "${sys_groups[@]}"; do
            peers_stop_group "$i"
        done
    fi
    sys_name="" sys_groups=() sys_nodes=() sys_vms=()
}
peers_epmd_note
cleanup() {
    stop_system
    peers_epmd_cleanup
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# wait_until SECONDS COMMAND...: polls COMMAND every 0.3 s until it succeeds.
wait_until() {
    local deadline=$((SECONDS + $1))
    shift
    until "$@"; do
        ((SECONDS < deadline)) || return 1
        sleep 0.3
    done
}

leaseq3_ports=(29411 29412 29413)
rabbit_amqp=(25681 25682 25683) rabbit_dist=(25691 25692 25693)
nats_client=(24231 24232 24233) nats_route=(26231 26232 26233) nats_monitor=(28231 28232 28233)

leaseq_has_leader() {
    [[ $(json_get "http://127.0.0.1:${leaseq3_ports[0]}/cluster/status" leader) =~ ^[123]$ ]]
}

rabbit_all_running() {
    peers_rabbitmqctl "${sys_nodes[0]}" await_online_nodes 3 --timeout 5 > /dev/null 2>&1
}

nats_meta_leader() {
    local leader
    leader=$(python3 - "http://127.0.0.1:${nats_monitor[0]}/jsz" << 'EOF' 2> /dev/null || true
import json, sys, urllib.request
print((json.load(urllib.request.urlopen(sys.argv[1], timeout=2)).get("meta_cluster") or {}).get("leader") or "")
EOF
    )
    [[ -n $leader ]]
}

# start_system NAME: starts it, waits until it serves, writes its state file.
start_system() {
    local name=$1 i n
    sys_name=$name
    # Every start is a new cluster: nothing left from the last one (a probe
    # leaves its queue behind) may be led, recovered or looked up.
    rm -rf "${work:?}/$name"
    case "$name" in
        leaseq-1)
            setsid "$server" --bind 127.0.0.1:29400 --data-dir "$work/leaseq-1/data" --sync always > "$out/leaseq-1.log" 2>&1 &
            sys_groups=($!)
            peers_wait_port 29400 60 "${sys_groups[0]}" || return 1 ;;
        leaseq-3)
            local peers=()
            for i in 0 1 2; do peers+=(--peer "$((i + 1))=127.0.0.1:${leaseq3_ports[$i]}"); done
            for i in 0 1 2; do
                n=$((i + 1))
                setsid "$server" --cluster --node-id "$n" --bind "127.0.0.1:${leaseq3_ports[$i]}" \
                    --data-dir "$work/leaseq-3/n$n" "${peers[@]}" $([[ $n -eq 1 ]] && echo --bootstrap) \
                    > "$out/leaseq-3.n$n.log" 2>&1 &
                sys_groups+=($!)
            done
            for i in 0 1 2; do peers_wait_port "${leaseq3_ports[$i]}" 60 "${sys_groups[$i]}" || return 1; done
            wait_until 60 leaseq_has_leader || { echo "leaseq-3 elected no leader in 60 s"; return 1; }
            echo "ports=(${leaseq3_ports[*]}) pids=(${sys_groups[*]})" > "$work/state" ;;
        rabbitmq-quorum)
            for i in 0 1 2; do
                sys_nodes+=("leaseqr$((i + 1))@localhost")
                peers_rabbitmq_start "${sys_nodes[$i]}" "$work/rabbitmq-quorum/n$((i + 1))" "${rabbit_amqp[$i]}" \
                    "${rabbit_dist[$i]}" "$out/rabbitmq-quorum.n$((i + 1)).log"
                sys_groups+=("$peers_rabbitmq_pid")
            done
            for i in 0 1 2; do
                peers_rabbitmq_wait_boot "$out/rabbitmq-quorum.n$((i + 1)).log" "${sys_groups[$i]}" 120 || return 1
                sys_vms+=("$(peers_rabbitmqctl "${sys_nodes[$i]}" eval 'os:getpid().' 2> /dev/null | tr -d '"')")
            done
            for i in 1 2; do
                { peers_rabbitmqctl "${sys_nodes[$i]}" stop_app &&
                    peers_rabbitmqctl "${sys_nodes[$i]}" join_cluster "${sys_nodes[0]}" &&
                    peers_rabbitmqctl "${sys_nodes[$i]}" start_app; } >> "$out/rabbitmq-quorum.join.log" 2>&1 || return 1
            done
            wait_until 60 rabbit_all_running || { echo "the RabbitMQ nodes did not all come online"; return 1; }
            echo "nodes=(${sys_nodes[*]}) pids=(${sys_vms[*]}) members_log=$members_log" > "$work/state" ;;
        nats-r3)
            local routes
            routes=$(printf 'nats-route://127.0.0.1:%s, ' "${nats_route[@]}")
            for i in 0 1 2; do
                n=$((i + 1))
                {
                    echo "server_name: n$n"
                    echo "listen: 127.0.0.1:${nats_client[$i]}"
                    echo "http: 127.0.0.1:${nats_monitor[$i]}"
                    echo "jetstream {"
                    echo "  store_dir: \"$work/nats-r3/n$n\""
                    [[ $nats_sync == always ]] && echo "  sync_interval: always"
                    echo "}"
                    echo "cluster {"
                    echo "  name: leaseq-bench"
                    echo "  listen: 127.0.0.1:${nats_route[$i]}"
                    echo "  routes: [ ${routes%, } ]"
                    echo "}"
                } > "$work/nats-r3.n$n.conf"
                setsid nats-server -c "$work/nats-r3.n$n.conf" > "$out/nats-r3.n$n.log" 2>&1 &
                sys_groups+=($!)
            done
            for i in 0 1 2; do peers_wait_port "${nats_client[$i]}" 60 "${sys_groups[$i]}" || return 1; done
            wait_until 60 nats_meta_leader || { echo "NATS elected no JetStream meta leader in 60 s"; return 1; }
            echo "monitor_ports=(${nats_monitor[*]}) pids=(${sys_groups[*]})" > "$work/state" ;;
    esac
}

# addresses NAME first|all: the --address of leaseq-loadgen for NAME.
addresses() {
    local list=() i
    case "$1" in
        leaseq-1) list=(127.0.0.1:29400) ;;
        leaseq-3) for i in 0 1 2; do list+=("127.0.0.1:${leaseq3_ports[$i]}"); done ;;
        rabbitmq-quorum) for i in 0 1 2; do list+=("amqp://127.0.0.1:${rabbit_amqp[$i]}/%2f"); done ;;
        nats-r3) for i in 0 1 2; do list+=("nats://127.0.0.1:${nats_client[$i]}"); done ;;
    esac
    [[ $2 == first ]] && list=("${list[0]}")
    local IFS=,
    echo "${list[*]}"
}

protocol_args() { # NAME -> protocol and the durable settings
    case "$1" in
        leaseq-1 | leaseq-3) echo "--protocol sqs" ;;
        rabbitmq-quorum) echo "--protocol amqp --amqp-queue quorum" ;;
        nats-r3) echo "--protocol nats --nats-storage file --nats-replicas 3" ;;
    esac
}

systems=(leaseq-3 leaseq-1 rabbitmq-quorum nats-r3)
if [[ -n $only ]]; then read -r -a systems <<< "$only"; fi
for s in "${systems[@]}"; do
    [[ -n ${skip_reason[$s]:-} ]] && echo "skipping $s: ${skip_reason[$s]}"
done

run_timeout=$(awk -v d="$duration" -v w="$warmup" 'BEGIN { printf "%d", d + w + 60 }')
failures=0
declare -A kills_done=()

# probe NAME ROUND: one failover probe on the running cluster.
probe() {
    local name=$1 round=$2
    [[ $name == leaseq-1 ]] && return 0
    # shellcheck disable=SC2046
    if timeout 120 "$loadgen" failover $(protocol_args "$name") --label "$name" --address "$(addresses "$name" all)" \
        --queue "failover$round" --round "$round" --connections 6 --interval-ms 20 --before 2 --give-up 60 \
        --leader-pid-command "bash bench/cluster-peers.sh --leader-pid $name $work/state failover$round" --json "$failovers"; then
        kills_done[$name]=$((${kills_done[$name]:-0} + 1))
    else
        echo "failover probe failed: $name"; failures=$((failures + 1))
    fi
}

for round in $(seq 1 "$rounds"); do
    n=${#systems[@]}
    for i in $(seq 0 $((n - 1))); do
        name=${systems[$(((i + round - 1) % n))]}
        [[ -n ${skip_reason[$name]:-} ]] && continue
        echo "=== round $round/$rounds: $name ($(date +%T))"
        # The machine is shared: how fast the disk syncs now and how busy the
        # cores are, beside this system's figures.
        printf '%s\t%s\t%s\t%s\n' "$round" "$name" "$(measure_fdatasync 50)" "$(cut -d' ' -f1 /proc/loadavg)" \
            >> "$out/fdatasync.tsv"
        if ! start_system "$name"; then
            echo "could not start $name (see $out/$name*.log); skipping it this round"
            stop_system; failures=$((failures + 1)); continue
        fi
        reach=$([[ $spread -eq 1 ]] && echo all || echo first)
        for mode in "--batch 1" "--batch 10"; do
            # shellcheck disable=SC2046,SC2086
            if ! timeout "$run_timeout" "$loadgen" run $(protocol_args "$name") --address "$(addresses "$name" "$reach")" \
                --label "$name" --round "$round" --connections "$connections" --duration "$duration" \
                --warmup "$warmup" $mode --queue "loadgen$round" --json "$runs"; then
                echo "run failed: $name $mode"; failures=$((failures + 1))
            fi
        done
        ((round <= kills)) && probe "$name" "$round"
        stop_system
    done
done

# Kills beyond the rounds, each on a fresh cluster.
for name in "${systems[@]}"; do
    [[ -n ${skip_reason[$name]:-} || $name == leaseq-1 ]] && continue
    for kill in $(seq $((rounds + 1)) "$kills"); do
        echo "=== failover $kill/$kills: $name ($(date +%T))"
        if start_system "$name"; then probe "$name" "$kill"; else
            echo "could not start $name for a failover probe"; failures=$((failures + 1))
        fi
        stop_system
    done
done

fdatasync_after=$(measure_fdatasync)
echo "fdatasync after the runs: $fdatasync_after"
echo "- fdatasync after the runs: $fdatasync_after" >> "$out/environment.md"

report_args=(--input "$runs" --no-targets --markdown "$out/loadgen-report.md" --svg "$out/cluster-peers.svg"
    --ratio "leaseq-3/leaseq-1>=0.5" --ratio leaseq-3/rabbitmq-quorum --ratio leaseq-3/nats-r3
    --ratio leaseq-1/rabbitmq-quorum --ratio leaseq-1/nats-r3)
[[ -s $failovers ]] && report_args+=(--failover "$failovers")
if [[ -s $runs ]]; then
    "$loadgen" report "${report_args[@]}"
    {
        cat "$out/environment.md"
        echo
        for s in "${systems[@]}"; do
            [[ -n ${skip_reason[$s]:-} ]] && echo "- skipped $s: ${skip_reason[$s]}"
        done
        echo
        cat "$out/loadgen-report.md"
        echo
        echo "fdatasync and the 1-minute load average just before each system's runs (the machine is shared, so both move):"
        echo
        echo "| round | system | fdatasync | load |"
        echo "| ---: | --- | --- | ---: |"
        awk -F '\t' '{ printf "| %s | %s | %s | %s |\n", $1, $2, $3, $4 }' "$out/fdatasync.tsv"
    } > "$out/report.md"
    cat "$out/report.md"
    echo "results: $runs, $failovers, $out/report.md, $out/cluster-peers.svg"
else
    echo "no runs completed"
fi
if [[ $failures -gt 0 ]]; then
    echo "$failures runs, probes or starts failed"
    # The smoke must not fail CI over a peer; leaseq's own runs must pass.
    for s in leaseq-1 leaseq-3; do
        if [[ " ${systems[*]} " == *" $s "* && -z ${skip_reason[$s]:-} ]]; then
            grep -q "\"label\":\"$s\"" "$runs" || exit 1
        fi
    done
    [[ $smoke -eq 1 ]] || exit 1
fi
