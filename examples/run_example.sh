#!/usr/bin/env bash
# Runs an example and checks what it printed, as ctest's pass regex cannot
# (it ignores the exit status):
#   run_example.sh [--max-lines N] TEXT... -- COMMAND [ARGS...]
# Passes when COMMAND exits 0 and its output (stdout and stderr) holds every
# TEXT, each as a fixed string; a TEXT written !TEXT must not be there, and
# with --max-lines the output is at most N lines (a short, clean
# transcript).
set -uo pipefail
want=() absent=() max_lines=
if [ "${1:-}" = --max-lines ]; then
    max_lines=$2
    shift 2
fi
while [ $# -gt 0 ] && [ "$1" != -- ]; do
    case $1 in
    !*) absent+=("${1#!}") ;;
    *) want+=("$1") ;;
    esac
    shift
done
[ $# -gt 1 ] || { echo "usage: run_example.sh [--max-lines N] TEXT... -- COMMAND [ARGS...]" >&2; exit 2; }
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
for text in "${absent[@]}"; do
    if grep -qF -- "$text" "$log"; then
        echo "UNWANTED in the output: $text" >&2
        status=1
    fi
done
lines=$(wc -l <"$log")
if [ -n "$max_lines" ] && [ "$lines" -gt "$max_lines" ]; then
    echo "the output has $lines lines, more than $max_lines" >&2
    status=1
fi
exit $status
