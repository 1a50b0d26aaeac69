#!/usr/bin/env bash
# For maintainers, on a GPU machine: refresh everything the book measures.
#   scripts/gpu_refresh.sh tests      the tests marked gpu
#   scripts/gpu_refresh.sh notebooks  every chapter re-executed in place (make rerun-all UPDATE=1); every
#                                     chapter runs compute-sanitizer on its kernels itself (check.memcheck)
# Logs go to $LOGS (default build/gpu-logs). Without PYTHON, make creates and fills .venv; set
# PYTHON (e.g. PYTHON=python3, on a machine without network) to use that interpreter instead.
set -uo pipefail
cd "$(dirname "$0")/.."
# The Makefile installs the venv only when PYTHON is undefined: pass it on only if the caller set it.
make_args=()
[ -n "${PYTHON:-}" ] && make_args+=(PYTHON="$PYTHON")
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
        tests) step gpu-test make gpu-test "${make_args[@]}" ;;
        notebooks) step rerun-all make rerun-all "${make_args[@]}" UPDATE=1 ;;
        *) echo "unknown part $part (tests, notebooks)"; exit 2 ;;
    esac
done
exit $status
