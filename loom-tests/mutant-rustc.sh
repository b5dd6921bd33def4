#!/usr/bin/env bash
# RUSTC_WORKSPACE_WRAPPER for the mutant runs in loom-tests/ci.sh.
#
# Cargo calls it as `mutant-rustc.sh <rustc> <args...>` for workspace members
# only, so dependencies keep the artifacts of the plain loom build and only
# leaseq and loom-tests are rebuilt per mutant. It adds
# `--cfg leaseq_mutant="$LEASEQ_MUTANT"`, exactly what
# RUSTFLAGS='--cfg loom --cfg leaseq_mutant="..."' would give those crates.
set -euo pipefail
rustc="$1"
shift
if [[ -n "${LEASEQ_MUTANT:-}" && " $* " == *" --crate-name "* ]]; then
    exec "$rustc" "$@" --cfg "leaseq_mutant=\"${LEASEQ_MUTANT}\""
fi
exec "$rustc" "$@"
