#!/usr/bin/env bash
# Builds cucore and runs every test: the plain build, then the whole suite
# again under AddressSanitizer + UndefinedBehaviorSanitizer. With no GPU the
# tests use the simulated driver; CUCORE_TEST_DRIVER=real runs them against
# libcuda.so.1 instead (on a GPU machine).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
driver=${CUCORE_TEST_DRIVER:-sim}
sanitize=${CUCORE_TEST_SANITIZE:-1}

run_suite() {
    local dir=$1; shift
    cmake -S . -B "$dir" -DCUCORE_WERROR=ON -DCUCORE_TEST_DRIVER="$driver" "$@" >/dev/null
    cmake --build "$dir" -j"$jobs"
    (cd "$dir" && ctest --output-on-failure -j"$jobs")
}

echo "== plain build ($driver driver)"
run_suite build
if [ "$sanitize" = 1 ]; then
    echo "== ASan + UBSan build ($driver driver)"
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
        run_suite build-asan -DCUCORE_SANITIZE=ON -DCUCORE_BENCH=OFF
fi
