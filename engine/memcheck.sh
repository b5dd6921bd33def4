#!/usr/bin/env bash
# Runs the engine's unit tests under valgrind memcheck: the tagged id-or-history
# word (src/identity.rs) and the slot bodies read and written under a claim
# (src/slot.rs, src/lifecycle.rs) are the crate's `unsafe` code, and these
# tests drive every path through them. Any memcheck error or definite leak
# fails the script. Skips with a message where valgrind is missing and cannot
# be installed. About 3 minutes on a 2-core machine.
#
# Usage: engine/memcheck.sh [extra test-binary arguments, e.g. a name filter]
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v valgrind >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "engine/memcheck.sh: valgrind missing; installing it with apt-get"
        apt-get install -y -qq valgrind >/dev/null 2>&1 || true
    fi
fi
if ! command -v valgrind >/dev/null 2>&1; then
    echo "engine/memcheck.sh: SKIPPED: valgrind is not installed and could not be installed"
    exit 0
fi

# The test binary's path, as cargo reports it (the hash in its name changes).
binary=$(cargo test -p leaseq --lib --no-run --message-format=json 2>/dev/null |
    grep -o '"executable":"[^"]*"' | cut -d'"' -f4 | head -n 1)
if [ -z "$binary" ]; then
    echo "engine/memcheck.sh: cargo did not report the unit-test binary" >&2
    exit 1
fi

start=$(date +%s)
# Definite leaks only: the test harness's own threads leave "possibly lost"
# blocks behind at exit, which say nothing about the engine.
valgrind --quiet --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
    "$binary" -q --test-threads=2 "$@"
echo "engine/memcheck.sh: clean under memcheck in $(($(date +%s) - start)) s"
