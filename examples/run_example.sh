#!/usr/bin/env bash
# Runs an example and checks what it printed, as ctest's pass regex cannot
# (it ignores the exit status):
#   run_example.sh TEXT... -- COMMAND [ARGS...]
# Passes when COMMAND exits 0 and its output (stdout and stderr) holds every
# TEXT, each as a fixed string.
set -uo pipefail
want=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
    want+=("$1")
    shift
done
[ $# -gt 1 ] || { echo "usage: run_example.sh TEXT... -- COMMAND [ARGS...]" >&2; exit 2; }
shift
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$@" >"$log" 2>&1
rc=$?
cat "$log"
[ $rc -eq 0 ] || { echo "$1 exited with status $rc" >&2; exit 1; }
status=0
for text in "${want[@]}"; do
    if ! grep -qF -- "$text" "$log"; then
        echo "MISSING from the output: $text" >&2
        status=1
    fi
done
exit $status
