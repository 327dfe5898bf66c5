#!/usr/bin/env bash
# ctest's python_pip_install: `pip install ./python --no-build-isolation`
# works offline with the distribution's setuptools. The tree is copied to
# a scratch directory first (pip builds in place), the package installed
# into a --target there, and imported from it alone against the simulator.
# Usage: pip_install_check.sh SOURCE_DIR PYTHON SIM_LIBRARY
set -euo pipefail
src=$1 python=$2 sim=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/tree"
cp -r "$src/python" "$src/src" "$src/include" "$tmp/tree/"
rm -rf "$tmp/tree/python/build" "$tmp/tree/python/"*.egg-info
"$python" -m pip install --quiet --no-build-isolation --no-index --no-deps \
    --target "$tmp/site" "$tmp/tree/python"
cd "$tmp"
env -u PYTHONPATH PYTHONPATH="$tmp/site" CUCORE_DRIVER="$sim" CUCORE_SIM_GPUS=4 \
    "$python" -c '
import pickle, cucore
devs = cucore.devices()
assert len(devs) == 4 and cucore.__file__.startswith("'"$tmp"'/site/")
d = pickle.loads(pickle.dumps(devs[2]))
assert d is devs[2]
print("pip-installed cucore", cucore.__version__, "sees", len(devs), "devices; pickle OK")
'
