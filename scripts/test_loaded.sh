#!/usr/bin/env bash
# `make test-loaded`: the whole suite (`make test`) and then the demo (`make demo`) beside CPU busy loops that keep
# the load average at 4 or more on a 2-core machine (the load a shared CI runner sees), to prove the suite's and the
# demo's deadlines survive a busy machine. The busy loops are killed on any exit (trap); the exit code is the first
# failing step's. At the end it prints each step's duration, result and the load averages.
# Usage: scripts/test_loaded.sh [BUSY_LOOPS] [STEP...]   (default: 2 loops, steps `test demo`; MAKE overrides the make
# command). A step is a make target; `test-fast test-fast test-fast` runs it three times in a row (`make test-fast-loaded`).
set -u

busy_loops="${1:-2}"
shift $(( $# > 0 ? 1 : 0 ))
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(test demo)
make_cmd="${MAKE:-make}"
pids=()

stop_loops() {
    local pid
    for pid in "${pids[@]+"${pids[@]}"}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]+"${pids[@]}"}"; do
        wait "$pid" 2>/dev/null || true
    done
    pids=()
}
trap stop_loops EXIT
trap 'stop_loops; exit 130' INT
trap 'stop_loops; exit 143' TERM

for _ in $(seq 1 "$busy_loops"); do
    sh -c 'while :; do :; done' &
    pids+=("$!")
done
echo "[test-loaded] $busy_loops busy loops started (pids ${pids[*]}); load now: $(cut -d' ' -f1-3 /proc/loadavg)"

status=0
summary=()
run_step() {
    local name="$1"; shift
    local start end rc
    start=$(date +%s)
    "$@"
    rc=$?
    end=$(date +%s)
    summary+=("$(printf '%-9s %5ds  exit %d  load after: %s' "$name" $((end - start)) "$rc" "$(cut -d' ' -f1-3 /proc/loadavg)")")
    if [ "$rc" -ne 0 ] && [ "$status" -eq 0 ]; then
        status=$rc
    fi
}

for step in "${steps[@]}"; do
    run_step "$step" "$make_cmd" --no-print-directory "$step"
done

stop_loops
echo
echo "[test-loaded] summary ($busy_loops busy loops on $(nproc) cores):"
printf '  %s\n' "${summary[@]}"
if [ "$status" -eq 0 ]; then
    echo "[test-loaded] passed under load"
else
    echo "[test-loaded] FAILED under load (exit $status)"
fi
exit "$status"
