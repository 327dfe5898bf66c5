#!/usr/bin/env bash
# On the GPU machine: builds the Python extension with the machine's own
# cmake and gcc for its python3 (CUCORE_PYTHON_EXECUTABLE, default
# /opt/torch/.venv/bin/python3), with dlpack.h from cuda.core's include
# directory (CUCORE_DLPACK_INCLUDE to change it), and runs the pytest suite
# against the real driver (CUCORE_DRIVER unset): the GPU-only tests
# (test_gpu.py: CuPy, PyTorch and numba on received buffers, a kernel
# launched into one) run there; the Dask tests skip when `distributed` is
# not importable, and this says so. CUCORE_PY_DEPS=DIR (scripts/python_deps.sh
# makes one, default build-carry/pydeps where it exists): Debian's
# distributed and what it imports, appended at the end of sys.path (the
# machine's own packages come first), for a python3 that lacks them. Logs
# go to ${OUT:-/tmp/cucore-gpu-python}.
# CUCORE_CUDA_INCLUDE=DIR: the CUDA headers (default /usr/local/cuda/include).
set -uo pipefail
cd "$(dirname "$0")/.."
py=${CUCORE_PYTHON_EXECUTABLE:-/opt/torch/.venv/bin/python3}
export CUCORE_PYTHON_EXECUTABLE=$py
. scripts/build_options.sh
out=${OUT:-/tmp/cucore-gpu-python}
mkdir -p "$out"
unset CUCORE_DRIVER
if [ -z "${CUCORE_DLPACK_INCLUDE:-}" ]; then
    site=$("$py" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    CUCORE_DLPACK_INCLUDE=$site/cuda/core/_include
fi
[ -f "$CUCORE_DLPACK_INCLUDE/dlpack.h" ] || { echo "no dlpack.h in $CUCORE_DLPACK_INCLUDE" >&2; exit 1; }
b=/tmp/cucore-gpu-python-build
cmake -S . -B $b "${cuc_plain_opts[@]}" -DCUCORE_BENCH=OFF -DCUCORE_PYTHON=ON \
    -DCUCORE_DLPACK_INCLUDE="$CUCORE_DLPACK_INCLUDE" -DCUCORE_TEST_DRIVER=real \
    >"$out/python-configure.log" 2>&1 || { tail -20 "$out/python-configure.log"; exit 1; }
cmake --build $b -j"$(nproc)" --target cucore_python cucore-cli \
    >"$out/python-build.log" 2>&1 || { grep -E "error" "$out/python-build.log" | head -20; exit 1; }
deps=${CUCORE_PY_DEPS:-}
[ -z "$deps" ] && [ -d build-carry/pydeps ] && deps=$PWD/build-carry/pydeps
# pyrun ARGS...: python with DEPS at the end of sys.path (and in spawned
# children's, which multiprocessing gives the parent's sys.path).
pyrun() {
    "$py" -c 'import runpy, site, sys
d = sys.argv.pop(1)
if d:
    site.addsitedir(d)
sys.argv.pop(0)
if sys.argv[0] == "-m":
    sys.argv.pop(0)
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
else:
    exec(sys.argv[0])' "$deps" "$@"
}
if ! pyrun "import distributed" >"$out/distributed.log" 2>&1; then
    echo "== $py cannot import distributed${deps:+ (with $deps)}: the Dask tests (test_dask.py) skip:"
    tail -n 1 "$out/distributed.log"
fi
for m in cupy torch numba.cuda cuda.core; do
    "$py" -c "import $m" 2>/dev/null && echo "== $m importable" || echo "== $m NOT importable"
done
PYTHONPATH=$b/python CUCORE_CLI=$b/tools/cucore PYTHONDONTWRITEBYTECODE=1 \
    pyrun -m pytest -v -p no:cacheprovider -rs python/tests >"$out/pytest.log" 2>&1
rc=$?
grep -E "PASSED|FAILED|ERROR|SKIPPED" "$out/pytest.log" | grep -vE " PASSED" | tail -40
tail -n 1 "$out/pytest.log"
echo "== log: $out/pytest.log (exit $rc)"
exit $rc
