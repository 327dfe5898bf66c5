#!/usr/bin/env bash
# Builds cucore in build/ and runs `cucore demo`: a producer and a consumer
# process with reversed GPU visibility sharing real objects. With no GPU
# (no libcuda.so.1) the demo switches to the simulated driver and says so.
# build/ is configured as scripts/test.sh configures it (build_options.sh),
# so either script may run first; this one builds only what README's first
# steps use (target cucore-quickstart): the library, the command, the
# simulator and, when the interpreter's development files and dlpack.h
# are there, the Python package in build/python. CUCORE_CUDA_INCLUDE=DIR:
# the CUDA headers (default /usr/local/cuda/include).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/build_options.sh
cmake -S . -B build "${cuc_plain_opts[@]}" >/dev/null
cmake --build build -j"$(nproc 2>/dev/null || echo 2)" --target cucore-quickstart >/dev/null
if ! compgen -G "build/python/cucore/_core*.so" >/dev/null; then
    echo "note: no Python package built (no Python development files or dlpack.h for" \
        "${CUCORE_PYTHON_EXECUTABLE:-/usr/bin/python3}; python/README.md says what it needs)"
fi
exec build/tools/cucore demo "$@"
