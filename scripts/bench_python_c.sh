#!/usr/bin/env bash
# Issue 14's comparisons on one start of a machine: bench/bench_python.py
# (cucore's Python objects beside cuda.core's) and bench_pool's C first
# send, alternated ROUNDS times (default 2), since figures move between
# starts more than the ratios asked for. Prints, for each round, µs a
# buffer at n = 64 / 256 / 1024 / 4096: Python to the lease end against C
# (the like-for-like pair: both stop when the exporter has seen every lease
# end), with the child closing a buffer at a time and with one
# Buffer.close_many a list (as C's importer), and, at every n, the Python
# pipe against cuda.core's (both to the answer). Outputs (each bench's
# lines, and bench/plot_python.py's medians of the rounds: python.md and
# the chart python.svg) go to OUT_DIR.
#
#   scripts/gpu_python.sh                 # builds the extension for the machine's python
#   scripts/bench_python_c.sh [OUT_DIR [ROUNDS]]
#
# CUCORE_PY_BUILD: the extension's directory (default
# /tmp/cucore-gpu-python-build/python, where gpu_python.sh builds it);
# CUCORE_PYTHON_EXECUTABLE: the python (default /opt/torch/.venv/bin/python3,
# else python3). Anywhere: CUCORE_DRIVER=sim CUCORE_PY_BUILD=build/python
# CUCORE_PYTHON_EXECUTABLE=/usr/bin/python3 checks that it runs.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/build_options.sh
out=${1:-${OUT:-/tmp/cucore-bench-python-c}}
rounds=${2:-2}
py=${CUCORE_PYTHON_EXECUTABLE:-/opt/torch/.venv/bin/python3}
[ -x "$py" ] || py=python3
ext=${CUCORE_PY_BUILD:-/tmp/cucore-gpu-python-build/python}
build=${CUCORE_BENCH_BUILD:-/tmp/cucore-bench-build}
mkdir -p "$out"
[ -d "$ext/cucore" ] || { echo "no cucore extension in $ext: run scripts/gpu_python.sh first" >&2; exit 1; }
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCUCORE_TESTS=OFF -DCUCORE_BENCH=ON \
    -DCUCORE_SANITIZE=OFF -DCUCORE_FUZZ=OFF -DCUCORE_PYTHON=OFF "${cuc_cuda_opts[@]}" \
    >"$out/configure.log" 2>&1 &&
    cmake --build "$build" -j"$(nproc 2>/dev/null || echo 2)" --target bench_pool \
        >"$out/build.log" 2>&1 || { tail -20 "$out/configure.log" "$out/build.log"; exit 1; }

# figure FILE IMPL N: bench_python's value for pipe_buffers IMPL at N
figure() {
    awk -v impl="$2" -v n="$3" '$2 == "name=pipe_buffers" && $3 == "impl=" impl &&
        $4 == "n=" n { sub("value=", "", $5); print $5 }' "$1"
}
# c_figure FILE N: bench_pool's cucore first send at N, in µs
c_figure() {
    awk -v n="$2" '$0 ~ "first send, " n "/message" { print $10 / 1000 }' "$1"
}

rc=0
for r in $(seq 1 "$rounds"); do
    pyout=$out/bench_python_$r.txt cout=$out/bench_pool_$r.txt
    PYTHONPATH=$ext "$py" bench/bench_python.py >"$pyout" 2>&1 || { echo "bench_python.py failed:"; tail -5 "$pyout"; rc=1; }
    "$build/bench/bench_pool" 16384 4096 100 >"$cout" 2>&1 || { echo "bench_pool failed:"; tail -5 "$cout"; rc=1; }
    for impl in cucore+leases cucore-many+leases; do
        echo "== round $r: Python ($impl) to the lease end / C first send (µs a buffer)"
        for n in 64 256 1024 4096; do
            p=$(figure "$pyout" $impl $n) c=$(c_figure "$cout" $n)
            awk -v n=$n -v p="$p" -v c="$c" 'BEGIN { if (p == "" || c == "")
                print "  n=" n ": missing"; else printf "  n=%d: %.2f / %.2f = x%.2f\n", n, p, c, p / c }'
        done
    done
    echo "== round $r: Python pipe, cucore / cuda.core, to the answer (µs a buffer)"
    for n in 1 4 16 64 256 1024 4096; do
        p=$(figure "$pyout" cucore $n) q=$(figure "$pyout" cuda.core $n)
        awk -v n=$n -v p="$p" -v q="$q" 'BEGIN { if (p == "" || q == "")
            print "  n=" n ": cuda.core not run"; else printf "  n=%d: %.2f / %.2f = x%.2f\n", n, p, q, p / q }'
    done
done
echo "== medians of the rounds: $out/python.md, chart $out/python.svg"
"$py" bench/plot_python.py "$out" --svg "$out/python.svg" --table "$out/python.md" &&
    cat "$out/python.md" || rc=1
exit $rc
