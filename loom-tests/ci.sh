#!/usr/bin/env bash
# Loom model check of leaseq's lease state machine (docs/loom.md).
#
# 1. Runs every model in loom-tests/tests/ at its recorded bound (exhaustive,
#    or a preemption bound; LOOM_MAX_PREEMPTIONS, if set, overrides all) and
#    prints each model's executions and wall time.
# 2. Rebuilds the engine once per mutant (a real bug switched on with
#    `--cfg leaseq_mutant="..."`), runs the model file meant to catch it, and
#    fails unless a model fails. A mutant that survives means the models
#    check too little.
#
# Builds go to target/loom (RUSTFLAGS="--cfg loom" would otherwise thrash the
# normal build). Mutants are passed to the workspace crates only, through
# loom-tests/mutant-rustc.sh, so the dependencies are built once.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/loom}"
export RUSTFLAGS="--cfg loom"
# Each mutant run stops at the first model failure; a mutant that needs more
# than this to be caught counts as surviving.
MUTANT_TIMEOUT_S="${MUTANT_TIMEOUT_S:-300}"
# mutant:model file that must catch it (docs/loom.md says why each one does).
MUTANTS=(
    cas_as_store:loom_ack_expiry
    relaxed_publish:loom_extend_expiry
    look_before_disarm:loom_timers
    relaxed_stats:loom_stats
    unsettled_load:loom_extend_expiry
    relaxed_link:loom_stats
    bucket_start_deadline:loom_timers
    notify_before_store:loom_journal
    relaxed_durable:loom_journal
)

step() { printf '\n=== %s (%s)\n' "$1" "$(date +%T)"; }
started=$SECONDS
log_dir="$CARGO_TARGET_DIR/loom-ci"
mkdir -p "$log_dir"

step "models"
cargo test -p loom-tests --features models --release --no-run
# One model at a time, so the printed wall times are each model's own.
cargo test -p loom-tests --features models --release -- --nocapture --test-threads=1 2>&1 | tee "$log_dir/models.log" |
    grep -E 'loom model|^test result|FAILED|panicked' || true
if ! grep -q 'loom model' "$log_dir/models.log" || grep -qE 'FAILED|panicked' "$log_dir/models.log"; then
    echo "loom models failed; see $log_dir/models.log" >&2
    exit 1
fi
printf 'models: %d s\n' $((SECONDS - started))

survivors=()
for entry in "${MUTANTS[@]}"; do
    mutant="${entry%%:*}"
    catcher="${entry#*:}"
    step "mutant $mutant (expect $catcher to fail)"
    mutant_started=$SECONDS
    export LEASEQ_MUTANT="$mutant"
    export RUSTC_WORKSPACE_WRAPPER="$PWD/loom-tests/mutant-rustc.sh"
    # A mutant that does not compile proves nothing: build first, separately.
    cargo test -p loom-tests --features models --release --test "$catcher" --no-run 2>"$log_dir/$mutant.build.log" || {
        cat "$log_dir/$mutant.build.log" >&2
        echo "mutant $mutant does not build" >&2
        exit 1
    }
    status=0
    timeout "$MUTANT_TIMEOUT_S" cargo test -p loom-tests --features models --release --test "$catcher" -- --test-threads=2 \
        >"$log_dir/$mutant.log" 2>&1 || status=$?
    # `|| true`: no FAILED line (a survivor) must reach the report below, not
    # end the script under `set -e`.
    caught_by=$(grep -E '^test .* FAILED$' "$log_dir/$mutant.log" | sed -E 's/^test (.*) \.\.\. FAILED$/\1/' | tr '\n' ' ' || true)
    # A deadlock loom finds aborts the test binary while it unwinds (loom's
    # cleanup panics again), so no FAILED line is printed: the model that
    # found it is named on its panic line instead.
    if [[ -z "$caught_by" ]] && grep -q 'deadlock; threads' "$log_dir/$mutant.log"; then
        caught_by="$(grep -m1 -B1 'deadlock; threads' "$log_dir/$mutant.log" | sed -nE "s/^thread '([^']*)'.*/\1/p") (deadlock)"
    fi
    if [[ $status -ne 0 && $status -ne 124 && -n "$caught_by" ]]; then
        echo "caught by: $caught_by"
        grep -m1 -A1 'panicked at' "$log_dir/$mutant.log" | tail -n1 || true
    else
        echo "SURVIVED (exit $status); see $log_dir/$mutant.log" >&2
        survivors+=("$mutant")
    fi
    printf 'mutant %s: %d s\n' "$mutant" $((SECONDS - mutant_started))
    unset LEASEQ_MUTANT RUSTC_WORKSPACE_WRAPPER
done

step "done in $((SECONDS - started)) s"
if [[ ${#survivors[@]} -gt 0 ]]; then
    echo "mutants not caught by any model: ${survivors[*]}" >&2
    exit 1
fi
echo "all ${#MUTANTS[@]} mutants caught"
