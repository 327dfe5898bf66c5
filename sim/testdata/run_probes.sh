#!/bin/bash
# Builds and runs the driver probes against the real driver and against
# the simulator, from the repository root (sim/FACTS.md lists what they
# showed):
#
#   sim/testdata/run_probes.sh [BUILD_DIR]
#
# BUILD_DIR (default /tmp/cucore-gpu-build) is a cucore build made with
#   cmake -S . -B BUILD_DIR -DCUCORE_TESTS=OFF && cmake --build BUILD_DIR
# It is configured that way if it has no CMakeCache.txt yet, and the
# library and the simulator are always brought up to date (an incremental
# build: a build dir left from an older checkout is not used stale). Then:
#   probe_ipc        PROBE_LIB=libcuda.so.1, and the simulator with one GPU
#   probe_adopt      the same (memory another allocator owns, fills)
#   probe_lifetimes  CUCORE_DRIVER unset, and CUCORE_DRIVER=sim
# Outputs go to $OUT (default /tmp/probes): NAME.real.txt, NAME.sim.txt,
# their stderr as .err, probe_ipc.diff and probe_adopt.diff (real vs
# sim), and steps.txt with
# each step's exit status (124: it ran past its time). Every step is
# bounded by timeout; the script prints the diffs and the statuses.
set -u

build=${1:-/tmp/cucore-gpu-build}
out=${OUT:-/tmp/probes}
cuda_inc=${CUDA_INC:-/usr/local/cuda/include}
jobs=$(nproc 2>/dev/null || echo 2)
bin="$build/probes"
cflags=(-std=c11 -O1 -g -Wall -Wextra -D_GNU_SOURCE)

mkdir -p "$out" "$bin" || exit 1
: >"$out/steps.txt"

# step NAME SECONDS CMD...: runs CMD under timeout, records its status.
step() {
    local name=$1 secs=$2 rc
    shift 2
    timeout -k 5 "$secs" "$@"
    rc=$?
    echo "$name $rc" >>"$out/steps.txt"
    return $rc
}

: >"$out/build.log"
if [ ! -e "$build/CMakeCache.txt" ]; then
    step cmake-configure 60 cmake -S . -B "$build" -DCUCORE_TESTS=OFF \
        >>"$out/build.log" 2>&1
fi
step cmake-build 120 cmake --build "$build" -j "$jobs" --target cucore cucore-sim \
    >>"$out/build.log" 2>&1

# The build puts every library in one directory (CMakeLists.txt: the
# installed libdir's path below the build tree, build/lib here); find it
# rather than assume it.
sim=$(find "$build" -name libcucore-sim.so -print -quit)
lib=$(find "$build" -name libcucore.so -print -quit)
if [ -z "$sim" ] || [ -z "$lib" ]; then
    echo "run_probes: no libcucore-sim.so or libcucore.so under $build (see $out/build.log)" >&2
    exit 1
fi
libdir=$(dirname "$lib")

step cc-probe_ipc 60 cc "${cflags[@]}" -I"$cuda_inc" -Itests -Isrc \
    -DCUC_SIM_PATH='getenv("PROBE_LIB")' sim/testdata/probe_ipc.c \
    -o "$bin/probe_ipc" -ldl 2>"$out/cc-probe_ipc.err"
step cc-probe_adopt 60 cc "${cflags[@]}" -I"$cuda_inc" -Itests -Isrc \
    -DCUC_SIM_PATH='getenv("PROBE_LIB")' sim/testdata/probe_adopt.c \
    -o "$bin/probe_adopt" -ldl 2>"$out/cc-probe_adopt.err"
step cc-probe_lifetimes 60 cc "${cflags[@]}" -Iinclude sim/testdata/probe_lifetimes.c \
    -o "$bin/probe_lifetimes" -L"$libdir" -lcucore -Wl,-rpath,"$libdir" \
    2>"$out/cc-probe_lifetimes.err"

clean_env=(env -u CUDA_VISIBLE_DEVICES -u CUCORE_SIM_UUIDS -u CUCORE_SIM_HIDE
           -u CUCORE_SIM_POOL_BYTES -u CUCORE_DRIVER)

step probe_ipc.real 45 "${clean_env[@]}" PROBE_LIB=libcuda.so.1 \
    "$bin/probe_ipc" >"$out/probe_ipc.real.txt" 2>"$out/probe_ipc.real.err"
step probe_ipc.sim 45 "${clean_env[@]}" PROBE_LIB="$sim" CUCORE_SIM_GPUS=1 \
    "$bin/probe_ipc" >"$out/probe_ipc.sim.txt" 2>"$out/probe_ipc.sim.err"
step probe_adopt.real 45 "${clean_env[@]}" PROBE_LIB=libcuda.so.1 \
    "$bin/probe_adopt" >"$out/probe_adopt.real.txt" 2>"$out/probe_adopt.real.err"
step probe_adopt.sim 45 "${clean_env[@]}" PROBE_LIB="$sim" CUCORE_SIM_GPUS=1 \
    "$bin/probe_adopt" >"$out/probe_adopt.sim.txt" 2>"$out/probe_adopt.sim.err"
step probe_lifetimes.real 60 "${clean_env[@]}" \
    "$bin/probe_lifetimes" >"$out/probe_lifetimes.real.txt" 2>"$out/probe_lifetimes.real.err"
step probe_lifetimes.sim 60 "${clean_env[@]}" CUCORE_DRIVER=sim CUCORE_SIM_GPUS=1 \
    "$bin/probe_lifetimes" >"$out/probe_lifetimes.sim.txt" 2>"$out/probe_lifetimes.sim.err"

diff -u "$out/probe_ipc.real.txt" "$out/probe_ipc.sim.txt" >"$out/probe_ipc.diff"
diff -u "$out/probe_adopt.real.txt" "$out/probe_adopt.sim.txt" >"$out/probe_adopt.diff"
diff -u "$out/probe_lifetimes.real.txt" "$out/probe_lifetimes.sim.txt" \
    >"$out/probe_lifetimes.diff"

echo "=== probe_ipc: real (-) vs sim (+) ==="
cat "$out/probe_ipc.diff"
echo "=== probe_adopt: real (-) vs sim (+) ==="
cat "$out/probe_adopt.diff"
echo "=== probe_lifetimes: real (-) vs sim (+) ==="
cat "$out/probe_lifetimes.diff"
for f in "$out"/*.err; do
    [ -s "$f" ] && { echo "=== $(basename "$f") ==="; tail -n 20 "$f"; }
done
echo "=== steps (exit status) ==="
cat "$out/steps.txt"
