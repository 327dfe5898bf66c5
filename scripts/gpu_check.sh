#!/usr/bin/env bash
# On a GPU machine: builds with the machine's own compiler, runs the whole
# suite against the real driver (CUCORE_DRIVER unset), and compares
# `cucore devices` with nvidia-smi. Logs go to ${OUT:-/tmp/cucore-gpu}.
# CUCORE_CUDA_INCLUDE=DIR: the CUDA headers (default /usr/local/cuda/include).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/build_options.sh
out=${OUT:-/tmp/cucore-gpu}
mkdir -p "$out"
unset CUCORE_DRIVER
b=/tmp/cucore-gpu-build
cmake -S . -B $b "${cuc_plain_opts[@]}" -DCUCORE_TEST_DRIVER=real >"$out/configure.log" 2>&1 || { tail -20 "$out/configure.log"; exit 1; }
cmake --build $b -j"$(nproc)" >"$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -20; exit 1; }
(cd $b && ctest --no-tests=error --output-on-failure -j4 --timeout 300) >"$out/ctest.log" 2>&1
rc=$?
grep -E "tests passed|tests failed|\*\*\*|Failed|Skipped|Not Run" "$out/ctest.log" | tail -40
echo "== cucore devices vs nvidia-smi"
$b/tools/cucore devices
nvidia-smi -L
nvidia-smi --query-gpu=pci.bus_id,uuid --format=csv,noheader
exit $rc
