#!/usr/bin/env bash
# ctest's python_pytest: runs the pytest suite with PYTHON (the build's
# interpreter), writes its output to LOG as well, exits with pytest's
# status (5, no test collected, is a failure). pytest's last line (the
# summary) is what scripts/test.sh prints.
set -uo pipefail
python=$1 log=$2
shift 2
"$python" -m pytest -v -p no:cacheprovider "$@" 2>&1 | tee "$log"
exit "${PIPESTATUS[0]}"
