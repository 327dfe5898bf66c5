#!/usr/bin/env bash
# Builds cucore (Release) and runs every benchmark docs/PERFORMANCE.md
# needs, into one directory: every bench/bench_*.c there is (those named
# below with their arguments, any other with none), the Python benches
# (bench/bench_python.py, and bench/bench_torch.py where it exists) when
# the extension builds for the interpreter, and the same work through
# cuda.core (bench/compare_cuda_core.py, the same n as bench_pool). Then
# bench/make_performance.py writes the page of the run there.
#
#   scripts/bench.sh [OUT_DIR]          default ${OUT:-/tmp/cucore-bench}
#   python3 bench/make_performance.py OUT_DIR > docs/PERFORMANCE.md   # the page, and its chart
#
# OUT_DIR gets NAME.txt per bench (its printed lines), results.jsonl (every
# figure of every bench as a JSON line: bench/bench_report.h and
# bench/make_performance.py say the keys), machine.txt (date, host,
# commit, driver, GPU), PERFORMANCE.md + perf-buffers.svg (the page of this
# run; --partial, saying what it lacks, when a headline figure is missing)
# and tables.md (bench/plot.py: every figure of the run as Markdown).
#
# CUCORE_PYTHON: the Python that runs the Python benches and cuda.core's,
# and that the extension is built for (default /opt/torch/.venv/bin/python3
# where it exists, else Debian's /usr/bin/python3); CUCORE_PY_BUILD=DIR: an
# extension built elsewhere (scripts/gpu_python.sh's
# /tmp/cucore-gpu-python-build/python) instead of this build's. The page
# and the plot need only the standard library.
#
# The driver is the real one unless CUCORE_DRIVER is set (CUCORE_DRIVER=sim
# runs everything on the simulator, which checks that the benches work but
# measures nothing about a GPU; scripts/bench_check.sh does that and checks
# the page). CUCORE_BENCH_QUICK=1 uses few iterations.
# CUCORE_BENCH_BUILD=DIR: the build (default /tmp/cucore-bench-build).
# CUCORE_CUDA_INCLUDE=DIR: the CUDA headers (default /usr/local/cuda/include).
# CUCORE_COMMIT=TEXT: the commit machine.txt names (default: git rev-parse HEAD).
# Exits non-zero if a bench failed; a bench exiting 77 (cuda.core not
# installed, no GPU) is reported, not a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/build_options.sh
out=${1:-${OUT:-/tmp/cucore-bench}}
build=${CUCORE_BENCH_BUILD:-/tmp/cucore-bench-build}
quick=${CUCORE_BENCH_QUICK:-0}
mkdir -p "$out"
python=${CUCORE_PYTHON:-}
if [ -z "$python" ]; then
    python=python3
    [ -x /usr/bin/python3 ] && python=/usr/bin/python3
    [ -x /opt/torch/.venv/bin/python3 ] && python=/opt/torch/.venv/bin/python3
fi
python_opts=()
pyexe=$(command -v "$python" 2>/dev/null) && python_opts=("-DPython3_EXECUTABLE=$pyexe")
export CUCORE_BENCH_JSONL="$out/results.jsonl"
: >"$CUCORE_BENCH_JSONL"
rm -f "$out/PERFORMANCE.md" "$out/perf-buffers.svg"

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCUCORE_TESTS=OFF -DCUCORE_BENCH=ON \
    -DCUCORE_SANITIZE=OFF -DCUCORE_FUZZ=OFF "${cuc_cuda_opts[@]}" "${python_opts[@]}" \
    >"$out/configure.log" 2>&1 || { tail -20 "$out/configure.log"; exit 1; }
ext=${CUCORE_PY_BUILD:-$build/python}
cmake --build "$build" -j"$(nproc 2>/dev/null || echo 2)" >"$out/build.log" 2>&1 ||
    { grep -E "error" "$out/build.log" | head -20; exit 1; }

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "host: $(uname -n), $(nproc) CPUs, $(uname -r)"
    # CUCORE_COMMIT names the tree where its .git cannot (a copy of a
    # working tree whose .git is another commit's, as the GPU machine gets).
    if [ -n "${CUCORE_COMMIT:-}" ]; then
        echo "commit: $CUCORE_COMMIT"
    else
        echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (dirty tree)')"
    fi
    echo "CUCORE_DRIVER=${CUCORE_DRIVER:-(unset: libcuda.so.1)}"
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader
} >"$out/machine.txt" 2>&1
cat "$out/machine.txt"

# name, then its arguments (full, quick)
# bench_pool: BUFFERS per figure, MAX_N, SHARE_ROUNDS; bench_vmm: ROUNDS;
# bench_share: BUFFERS per figure.
if [ "$quick" = 1 ]; then
    device_args="200000" kernel_args="100 2000" fanout_args="200" py_args="--quick"
    pool_args="512 4096 100" vmm_args="100" share_args="512"
else
    device_args="2000000" kernel_args="2000 20000" fanout_args="2000" py_args=""
    pool_args="16384 4096 2000" vmm_args="2000" share_args="16384"
fi

# the n of bench_pool (1, 4, ... up to its MAX_N), for cuda.core too
batches="1,4,16,64,256,1024,4096"

failed=0
run() {
    local name=$1; shift
    echo "== $name $*"
    "$@" >"$out/$name.txt" 2>&1
    local rc=$?
    cat "$out/$name.txt"
    if [ $rc -eq 77 ]; then
        echo "($name skipped: exit 77)"
    elif [ $rc -ne 0 ]; then
        echo "($name FAILED: exit $rc)"
        failed=1
    fi
}

# Word splitting of the argument strings is intended.
# shellcheck disable=SC2086
{
    run bench_device "$build/bench/bench_device" $device_args
    run bench_kernel "$build/bench/bench_kernel" $kernel_args
    run bench_fanout "$build/bench/bench_fanout" $fanout_args
    run bench_pool "$build/bench/bench_pool" $pool_args
    run bench_vmm "$build/bench/bench_vmm" $vmm_args
    run bench_share "$build/bench/bench_share" $share_args
    for extra in "$build"/bench/bench_*; do
        name=$(basename "$extra")
        case $name in bench_device|bench_kernel|bench_fanout|bench_pool|bench_vmm|bench_share) continue ;; esac
        [ -x "$extra" ] && run "$name" "$extra"
    done
    if [ -d "$ext/cucore" ]; then
        for b in bench_python bench_torch; do
            [ -f "bench/$b.py" ] &&
                run "$b" env PYTHONPATH="$ext" "$python" "bench/$b.py" $py_args
        done
    else
        echo "(bench_python skipped: no cucore extension in $ext for $python;" \
            "$out/configure.log says why)"
    fi
    run compare_cuda_core "$python" bench/compare_cuda_core.py $py_args --batches "$batches"
}
python3 bench/plot.py "$out" --table "$out/tables.md" || { echo "(plot FAILED)"; failed=1; }
page() {
    python3 bench/make_performance.py "$@" --svg "$out/perf-buffers.svg" --page-dir "$out" \
        "$out" >"$out/PERFORMANCE.md"
}
if page 2>"$out/make_performance.log"; then
    echo "== $out/PERFORMANCE.md: the page of this run"
elif page --partial; then
    cat "$out/make_performance.log"
    echo "== $out/PERFORMANCE.md: the page of this run, without the figures above (--partial)"
else
    echo "(make_performance.py FAILED)"
    failed=1
fi
echo "== outputs in $out; docs/PERFORMANCE.md: python3 bench/make_performance.py $out > docs/PERFORMANCE.md"
exit $failed
