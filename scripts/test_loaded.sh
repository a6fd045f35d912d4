#!/usr/bin/env bash
# `make test-loaded`: the whole suite (`make test`) and then the demo (`make demo`) beside CPU busy loops that keep
# the load average at 4 or more on a 2-core machine (the load a shared CI runner sees), to prove the suite's and the
# demo's deadlines survive a busy machine. The busy loops are killed on any exit (trap); the exit code is the first
# failing step's. At the end it prints each step's duration, result and the load averages.
# Usage: scripts/test_loaded.sh [BUSY_LOOPS]   (default 2; MAKE overrides the make command)
set -u

busy_loops="${1:-2}"
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
    summary+=("$(printf '%-6s %5ds  exit %d  load after: %s' "$name" $((end - start)) "$rc" "$(cut -d' ' -f1-3 /proc/loadavg)")")
    if [ "$rc" -ne 0 ] && [ "$status" -eq 0 ]; then
        status=$rc
    fi
}

run_step test "$make_cmd" --no-print-directory test
run_step demo "$make_cmd" --no-print-directory demo

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
