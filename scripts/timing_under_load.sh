#!/usr/bin/env bash
# The timing tests (pytest -m timing: a sleep, a wait, a detection of something slow or late) run RUNS times
# (default 20) beside two busy processes (python -c 'while True: pass' x2), started here and killed at the end.
# Each must pass every run: a test that fails on a loaded machine depends on its speed (docs/contributing.md).
#   scripts/timing_under_load.sh [RUNS] [PYTEST ARGS...]    (default args: -m timing)
#   scripts/timing_under_load.sh 20 -m "timing and not slow"   (the fast ones only)
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-20}
shift $(( $# > 0 ? 1 : 0 ))
[ $# -gt 0 ] || set -- -m timing
python=.venv/bin/python
[ -x "$python" ] || python=python3
"$python" -c 'while True: pass' & busy1=$!
"$python" -c 'while True: pass' & busy2=$!
trap 'kill "$busy1" "$busy2" 2>/dev/null' EXIT
logs=$(mktemp -d)
passed=0
for i in $(seq "$runs"); do
  began=$(date +%s)
  if "$python" -m pytest -q -p no:randomly -p no:xdist "$@" > "$logs/run$i.log" 2>&1; then
    passed=$((passed + 1))
    echo "run $i: passed ($(( $(date +%s) - began )) s): $(grep -E '(passed|failed)' "$logs/run$i.log" | tail -1)"
  else
    echo "run $i: FAILED ($(( $(date +%s) - began )) s); log: $logs/run$i.log"
    grep -E '^(FAILED|ERROR)' "$logs/run$i.log" | head -20
  fi
done
echo "timing tests: $passed of $runs runs passed beside two busy processes (logs: $logs)"
[ "$passed" -eq "$runs" ]
