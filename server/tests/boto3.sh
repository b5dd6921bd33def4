#!/usr/bin/env bash
# Runs server/tests/boto3_smoke.py with real boto3 against a leaseq-server on
# a free loopback port. The venv lives under target/; skips (exit 0, with the
# reason) when PyPI cannot be reached. Usage: bash server/tests/boto3.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
target="${CARGO_TARGET_DIR:-$root/target}"
venv="$target/boto3-venv"

mkdir -p "$target"
if ! command -v python3 >/dev/null; then
    echo "boto3 smoke: SKIPPED: no python3 on this machine"
    exit 0
fi
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import boto3' 2>/dev/null; then
    rm -rf "$venv"
    if ! python3 -m venv "$venv" >"$target/boto3-venv.log" 2>&1; then
        echo "boto3 smoke: SKIPPED: python3 cannot make a venv (python3-venv missing?); see $target/boto3-venv.log"
        exit 0
    fi
    if ! timeout 300 "$venv/bin/pip" install --quiet --disable-pip-version-check 'boto3>=1.34' >"$target/boto3-pip.log" 2>&1; then
        echo "boto3 smoke: SKIPPED: pip could not install boto3 (PyPI unreachable?); see $target/boto3-pip.log"
        exit 0
    fi
fi

cargo build --quiet -p leaseq-server --bin leaseq-server

# Runs the smoke test against a fresh server started with "$@" as extra flags;
# SMOKE_ARGS are the Python test's arguments after the endpoint.
run_smoke() {
    local port log server
    port="$("$venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    log="$target/boto3-server-$port.log"
    "$target/debug/leaseq-server" --bind "127.0.0.1:$port" "$@" >"$log" 2>&1 &
    server=$!
    trap 'kill "$server" 2>/dev/null || true' EXIT

    # Wait (bounded) until the port accepts connections.
    for _ in $(seq 1 100); do
        if "$venv/bin/python" -c "import socket; socket.create_connection(('127.0.0.1', $port), 0.2)" 2>/dev/null; then
            break
        fi
        sleep 0.1
    done

    timeout 120 "$venv/bin/python" server/tests/boto3_smoke.py "http://127.0.0.1:$port" "${SMOKE_ARGS[@]}"

    # Graceful stop on SIGTERM, bounded.
    kill -TERM "$server"
    for _ in $(seq 1 100); do
        kill -0 "$server" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$server" 2>/dev/null; then
        echo "boto3 smoke: server did not stop within 10 s of SIGTERM" >&2
        exit 1
    fi
    wait "$server" || { echo "boto3 smoke: server exited with an error; see $log" >&2; exit 1; }
    trap - EXIT
    grep -q "stopped" "$log" || { echo "boto3 smoke: server log lacks its stop line" >&2; exit 1; }
}

SMOKE_ARGS=()
run_smoke

credentials="$target/boto3-credentials"
printf 'AKIDBOTO3SMOKE smoke/secret+key\n' >"$credentials"
SMOKE_ARGS=(AKIDBOTO3SMOKE smoke/secret+key --signed)
run_smoke --credentials-file "$credentials"
