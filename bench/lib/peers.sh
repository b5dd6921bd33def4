# Sourced by bench/server-peers.sh and bench/cluster-peers.sh: what starting
# peers on loopback takes in both. Installing the servers from apt, finding the
# built binaries, waiting for a port, stopping a server's process group,
# starting and stopping one RabbitMQ node, and leaving epmd as it was found.
# Functions only (and two variables they set); nothing runs when sourced.
#
# Every wait here is bounded: a server that never comes up costs its timeout,
# not the run.

# Where cargo puts the release binaries (CARGO_TARGET_DIR when set).
peers_release_dir() {
    echo "${CARGO_TARGET_DIR:-target}/release"
}

# peers_install_apt LOG BINARY...: installs, as root with apt, the packages
# (named as their binaries) whose binary is not on PATH; retries once after
# `apt-get update`. Says so and goes on when apt cannot.
peers_install_apt() {
    local log=$1 bin
    shift
    local missing=()
    for bin in "$@"; do
        command -v "$bin" > /dev/null || missing+=("$bin")
    done
    [[ ${#missing[@]} -gt 0 ]] || return 0
    if [[ $(id -u) -eq 0 ]] && command -v apt-get > /dev/null; then
        echo "installing ${missing[*]} (apt)"
        timeout 600 env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" > "$log" 2>&1 ||
            { timeout 300 apt-get update -q > /dev/null 2>&1 &&
                timeout 600 env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >> "$log" 2>&1; } ||
            echo "apt could not install all of ${missing[*]} (see $log)"
    fi
}

# peers_wait_port PORT SECONDS [PID]: until 127.0.0.1:PORT accepts a
# connection; fails at the deadline, or as soon as PID (when given) is gone.
peers_wait_port() {
    local deadline=$((SECONDS + $2)) pid=${3:-}
    while ((SECONDS < deadline)); do
        (echo > "/dev/tcp/127.0.0.1/$1") 2> /dev/null && return 0
        [[ -z $pid ]] || kill -0 "$pid" 2> /dev/null || return 1
        sleep 0.2
    done
    return 1
}

# peers_stop_group PID: a server started with setsid leads its own process
# group: TERM the group, give it 5 s, then KILL it, and reap PID.
peers_stop_group() {
    local pid=$1
    kill -TERM -- "-$pid" 2> /dev/null || true
    for _ in $(seq 1 50); do
        kill -0 "$pid" 2> /dev/null || break
        sleep 0.1
    done
    kill -KILL -- "-$pid" 2> /dev/null || true
    wait "$pid" 2> /dev/null || true
}

# peers_rabbitmqctl NODE ARGS...: rabbitmqctl against NODE over loopback
# epmd, at most 60 s. Debian's wrapper runs it as the rabbitmq user, whose
# HOME holds the Erlang cookie every node of this machine shares.
peers_rabbitmqctl() {
    local node=$1
    shift
    env RABBITMQ_NODENAME="$node" ERL_EPMD_ADDRESS=127.0.0.1 timeout 60 rabbitmqctl -n "$node" "$@"
}

# peers_rabbitmq_start NODE DIR AMQP_PORT DIST_PORT LOG: starts one RabbitMQ
# node in the background, its mnesia and logs under DIR (made fresh), in its
# own session; sets peers_rabbitmq_pid. Erlang's schedulers do not busy-wait
# (RabbitMQ's advice on shared hosts: the spinning would take the CPU the
# other processes on this machine need).
peers_rabbitmq_pid=""
peers_rabbitmq_start() {
    local node=$1 dir=$2 amqp_port=$3 dist_port=$4 log=$5
    rm -rf "$dir"
    mkdir -p "$dir"
    chown rabbitmq:rabbitmq "$(dirname "$dir")" "$dir" 2> /dev/null || true
    (cd "$dir" && exec env RABBITMQ_NODENAME="$node" ERL_EPMD_ADDRESS=127.0.0.1 RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
        RABBITMQ_NODE_PORT="$amqp_port" RABBITMQ_DIST_PORT="$dist_port" \
        RABBITMQ_MNESIA_BASE="$dir/mnesia" RABBITMQ_LOG_BASE="$dir/log" \
        RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="+sbwt none +sbwtdcpu none +sbwtdio none" \
        setsid rabbitmq-server) > "$log" 2>&1 &
    peers_rabbitmq_pid=$!
}

# peers_rabbitmq_wait_boot LOG PID SECONDS: the AMQP port opens before the
# broker is ready; wait for the boot to finish instead.
peers_rabbitmq_wait_boot() {
    local log=$1 pid=$2 deadline=$((SECONDS + $3))
    until grep -q "Starting broker.*completed" "$log"; do
        ((SECONDS < deadline)) && kill -0 "$pid" 2> /dev/null || return 1
        sleep 0.3
    done
}

# peers_rabbitmq_stop NODE PID: the Erlang VM leaves the wrapper's process
# group, so ask the node to stop first, then stop the group.
peers_rabbitmq_stop() {
    env RABBITMQ_NODENAME="$1" ERL_EPMD_ADDRESS=127.0.0.1 timeout 30 rabbitmqctl -n "$1" stop > /dev/null 2>&1 || true
    peers_stop_group "$2"
}

# peers_epmd_note, then peers_epmd_cleanup at exit: epmd daemonizes out of
# every server's group; stop it only if it was not running before.
peers_epmd_before=""
peers_epmd_note() {
    peers_epmd_before=$(pgrep -x epmd || true)
}
peers_epmd_cleanup() {
    if [[ -z $peers_epmd_before ]] && command -v epmd > /dev/null; then
        ERL_EPMD_ADDRESS=127.0.0.1 timeout 10 epmd -kill > /dev/null 2>&1 || true
    fi
}
