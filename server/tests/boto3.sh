#!/usr/bin/env bash
# Runs server/tests/boto3_smoke.py with real boto3, and a smoke test with the
# AWS CLI, against a leaseq-server on a free loopback port; then the same
# Python test with boto3 1.28.0 / botocore 1.31.0, which speaks SQS's
# query protocol. The venvs live under target/;
# each part skips (with the reason) when PyPI cannot be reached.
# Usage: bash server/tests/boto3.sh
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

# The AWS CLI (v1, from PyPI) in a venv of its own: it pins its botocore.
cli_venv="$target/awscli-venv"
if [ ! -x "$cli_venv/bin/aws" ]; then
    rm -rf "$cli_venv"
    if ! { python3 -m venv "$cli_venv" && timeout 300 "$cli_venv/bin/pip" install --quiet \
        --disable-pip-version-check 'awscli>=1.32'; } >"$target/awscli-pip.log" 2>&1; then
        echo "AWS CLI smoke: SKIPPED: pip could not install awscli (PyPI unreachable?); see $target/awscli-pip.log"
        rm -rf "$cli_venv"
    fi
fi

cargo build --quiet -p leaseq-server --bin leaseq-server

# The AWS CLI against the server on port $1, signing with key $2 and secret
# $3: create a queue, send, receive, delete, and check the queue is empty.
cli_smoke() {
    local port=$1 url receipt body left
    [ -x "$cli_venv/bin/aws" ] || return 0
    aws() {
        AWS_ACCESS_KEY_ID="$2" AWS_SECRET_ACCESS_KEY="$3" AWS_DEFAULT_REGION=us-east-1 AWS_CONFIG_FILE=/dev/null \
            AWS_SHARED_CREDENTIALS_FILE=/dev/null timeout 60 "$cli_venv/bin/aws" \
            --endpoint-url "http://127.0.0.1:$port" --output text sqs "${@:4}"
    }
    url="$(aws "$port" "$2" "$3" create-queue --queue-name cli-smoke --query QueueUrl)"
    aws "$port" "$2" "$3" send-message --queue-url "$url" --message-body "from the AWS CLI" >/dev/null
    read -r receipt body < <(aws "$port" "$2" "$3" receive-message --queue-url "$url" \
        --visibility-timeout 30 --query 'Messages[0].[ReceiptHandle,Body]')
    [ "$body" = "from the AWS CLI" ] || { echo "AWS CLI smoke: received body '$body'" >&2; exit 1; }
    aws "$port" "$2" "$3" delete-message --queue-url "$url" --receipt-handle "$receipt"
    left="$(aws "$port" "$2" "$3" get-queue-attributes --queue-url "$url" \
        --attribute-names ApproximateNumberOfMessages ApproximateNumberOfMessagesNotVisible \
        --query 'Attributes.[ApproximateNumberOfMessages,ApproximateNumberOfMessagesNotVisible]')"
    [ "$(echo $left)" = "0 0" ] || { echo "AWS CLI smoke: left behind: $left" >&2; exit 1; }
    aws "$port" "$2" "$3" delete-queue --queue-url "$url"
    if [ "${4:-}" = "--signed" ]; then
        if aws "$port" "$2" "wrong-secret" list-queues >/dev/null 2>"$target/awscli-refused.log"; then
            echo "AWS CLI smoke: a badly signed request was accepted" >&2
            exit 1
        fi
        grep -q "SignatureDoesNotMatch" "$target/awscli-refused.log" \
            || { echo "AWS CLI smoke: refusal without SQS's error:" >&2; cat "$target/awscli-refused.log" >&2; exit 1; }
    fi
    echo "AWS CLI smoke: ok${4:+ ($4)}"
}

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

    timeout 120 "${PYTHON:-$venv/bin/python}" server/tests/boto3_smoke.py "http://127.0.0.1:$port" "${SMOKE_ARGS[@]}"
    [ -n "${PYTHON:-}" ] || cli_smoke "$port" "${SMOKE_ARGS[0]:-AKIDANY}" "${SMOKE_ARGS[1]:-any-secret}" "${SMOKE_ARGS[2]:-}"

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

# The query protocol, through the last botocore line that spoke it to SQS.
query_venv="$target/boto3-query-venv"
if [ ! -x "$query_venv/bin/python" ] || ! "$query_venv/bin/python" -c 'import boto3' 2>/dev/null; then
    rm -rf "$query_venv"
    if ! { python3 -m venv "$query_venv" && timeout 300 "$query_venv/bin/pip" install --quiet \
        --disable-pip-version-check 'boto3==1.28.0' 'botocore==1.31.0'; } >"$target/boto3-query-pip.log" 2>&1; then
        echo "boto3 smoke (query protocol): SKIPPED: pip could not install boto3 1.28.0; see $target/boto3-query-pip.log"
        rm -rf "$query_venv"
    fi
fi
if [ -x "$query_venv/bin/python" ]; then
    export PYTHON="$query_venv/bin/python" EXPECT_PROTOCOL=query
    SMOKE_ARGS=()
    run_smoke
    SMOKE_ARGS=(AKIDBOTO3SMOKE smoke/secret+key --signed)
    run_smoke --credentials-file "$credentials"
fi
