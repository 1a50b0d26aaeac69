#!/usr/bin/env bash
# For maintainers, on a GPU machine: refresh everything the book measures.
#   scripts/gpu_refresh.sh tests      the tests marked gpu
#   scripts/gpu_refresh.sh notebooks  every chapter re-executed in place (make rerun-all UPDATE=1); every
#                                     chapter runs compute-sanitizer on its kernels itself (check.memcheck)
# Logs go to $LOGS (default build/gpu-logs). PYTHON=python3 where there is no .venv.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
LOGS=${LOGS:-build/gpu-logs}
mkdir -p "$LOGS"
status=0
step() {  # step NAME COMMAND...: run, log, and report the exit code
    local name=$1; shift
    "$@" > "$LOGS/$name.log" 2>&1
    local rc=$?
    echo "$name: exit $rc ($(tail -n 1 "$LOGS/$name.log"))"
    [ $rc -eq 0 ] || status=1
}
for part in "$@"; do
    case $part in
        tests) step gpu-test make gpu-test PYTHON="$PYTHON" ;;
        notebooks) step rerun-all make rerun-all PYTHON="$PYTHON" UPDATE=1 ;;
        *) echo "unknown part $part (tests, notebooks)"; exit 2 ;;
    esac
done
exit $status
