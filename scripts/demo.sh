#!/usr/bin/env bash
# Builds cucore in build/ and runs `cucore demo`: a producer and a consumer
# process with reversed GPU visibility sharing real objects. With no GPU
# (no libcuda.so.1) the demo switches to the simulated driver and says so.
# build/ is configured as scripts/test.sh configures it (build_options.sh),
# so either script may run first; this one builds only the command and the
# simulator. CUCORE_CUDA_INCLUDE=DIR: the CUDA headers (default
# /usr/local/cuda/include).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/build_options.sh
cmake -S . -B build "${cuc_plain_opts[@]}" >/dev/null
cmake --build build -j"$(nproc 2>/dev/null || echo 2)" --target cucore-cli cucore-sim >/dev/null
exec build/tools/cucore demo "$@"
