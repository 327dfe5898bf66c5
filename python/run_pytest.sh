#!/usr/bin/env bash
# ctest's python_pytest: runs the pytest suite with PYTHON (the build's
# interpreter), writes its output to LOG as well, exits with pytest's
# status (5, no test collected, is a failure). pytest's last line (the
# summary) is what scripts/test.sh prints.
set -uo pipefail
python=$1 log=$2
shift 2
# The ThreadSanitizer build: CUCORE_TSAN_PRELOAD, its runtime, preloaded
# into python only (bash crashes under it), and CUCORE_TSAN_LOGS, where
# every process of the suite writes its reports; any report fails the run.
logs=${CUCORE_TSAN_LOGS:-}
[ -z "$logs" ] || { rm -rf "$logs" && mkdir -p "$logs"; } || exit 1
env ${CUCORE_TSAN_PRELOAD:+LD_PRELOAD="$CUCORE_TSAN_PRELOAD"} \
    "$python" -m pytest -v -p no:cacheprovider "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
if [ -n "$logs" ] && [ -n "$(ls -A "$logs")" ]; then
    cat "$logs"/* | tee -a "$log"
    echo "ThreadSanitizer reports from $(ls "$logs" | wc -l) process(es) in $logs" | tee -a "$log"
    [ "$rc" -ne 0 ] || rc=1
fi
exit "$rc"
