#!/usr/bin/env bash
# Builds cucore and runs `cucore demo`: a producer and a consumer process
# with reversed GPU visibility sharing real objects. With no GPU (no
# libcuda.so.1) the demo switches to the simulated driver and says so.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCUCORE_TESTS=OFF -DCUCORE_BENCH=OFF >/dev/null
cmake --build build -j"$(nproc 2>/dev/null || echo 2)" --target cucore-cli cucore-sim >/dev/null
exec build/tools/cucore demo "$@"
