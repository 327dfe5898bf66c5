#!/usr/bin/env bash
# ctest's python_pip_install: `pip install ./python --no-build-isolation`
# works offline with the distribution's setuptools and gives a package that
# stands alone, the simulated driver included. The tree is copied to a
# scratch directory first (pip builds in place), the package installed
# into a --target there, and the copy removed; then, from a directory
# outside any tree, with only PATH, the package's directory (PYTHONPATH)
# and CUCORE_DRIVER=sim in the environment (no LD_LIBRARY_PATH, no path
# to a simulator), the installed package must see the simulator's GPUs,
# loaded from its own cucore/libcucore-sim.so.
# Usage: pip_install_check.sh SOURCE_DIR PYTHON
set -euo pipefail
src=$1 python=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/tree"
cp -r "$src/python" "$src/src" "$src/include" "$src/sim" "$tmp/tree/"
rm -rf "$tmp/tree/python/build" "$tmp/tree/python/"*.egg-info
"$python" -m pip install --quiet --no-build-isolation --no-index --no-deps \
    --target "$tmp/site" "$tmp/tree/python"
rm -rf "$tmp/tree" # no build tree, no sources: the package alone
[ -f "$tmp/site/cucore/libcucore-sim.so" ] || {
    echo "the installed package has no cucore/libcucore-sim.so:" >&2
    ls -R "$tmp/site/cucore" >&2
    exit 1
}
cd /
env -i PATH=/usr/bin:/bin PYTHONPATH="$tmp/site" CUCORE_DRIVER=sim CUCORE_SIM_GPUS=4 \
    PYTHONDONTWRITEBYTECODE=1 "$python" -c '
import pickle, sys, cucore
site = sys.argv[1]
devs = cucore.devices()
assert len(devs) == 4, devs
assert cucore.__file__.startswith(site + "/cucore/"), cucore.__file__
maps = open("/proc/self/maps").read()
assert site + "/cucore/libcucore-sim.so" in maps, "the simulator was not loaded from the package"
d = pickle.loads(pickle.dumps(devs[2]))
assert d is devs[2]
print("pip-installed cucore", cucore.__version__, "sees", len(devs),
      "devices on its own simulator; pickle OK")
' "$tmp/site"
