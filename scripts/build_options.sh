# Sourced by the scripts: the CMake options they force, so that whichever
# runs first, and whatever an earlier configure left in a cache, build/ is
# configured the same way (every test, example and bench built; warnings
# are errors) and the CUDA headers come from CUCORE_CUDA_INCLUDE when the
# environment sets it (default /usr/local/cuda/include).
#
#   cuc_plain_opts   the options of build/ (demo.sh, test.sh's plain suite)
#   cuc_cuda_opts    -DCUCORE_CUDA_INCLUDE=... when the environment sets it
# shellcheck shell=bash disable=SC2034 # the arrays are used by the sourcing script
cuc_cuda_opts=()
if [ -n "${CUCORE_CUDA_INCLUDE:-}" ]; then
    cuc_cuda_opts=("-DCUCORE_CUDA_INCLUDE=$CUCORE_CUDA_INCLUDE")
fi
# The Python package is built for CUCORE_PYTHON_EXECUTABLE (default the
# distribution's /usr/bin/python3, whose packages the tests use), when it
# is there.
cuc_python_opts=()
cuc_python=${CUCORE_PYTHON_EXECUTABLE:-/usr/bin/python3}
if [ -x "$cuc_python" ]; then
    cuc_python_opts=("-DPython3_EXECUTABLE=$cuc_python")
fi
cuc_plain_opts=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCUCORE_WERROR=ON -DCUCORE_TESTS=ON
    -DCUCORE_BENCH=ON -DCUCORE_SANITIZE=OFF -DCUCORE_FUZZ=OFF "${cuc_cuda_opts[@]}"
    "${cuc_python_opts[@]}")
