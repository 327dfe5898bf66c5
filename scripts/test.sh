#!/usr/bin/env bash
# Builds cucore and runs every test: the plain build in build/ (which also
# builds build/tools/cucore, build/examples and build/bench), then the
# whole suite again under AddressSanitizer + UndefinedBehaviorSanitizer in
# build-asan/, then the concurrency tests (ctest label "concurrency") under
# ThreadSanitizer in build-tsan/. Each configuration's options are forced (build_options.sh),
# whatever configured the directory before. With no GPU the tests use the
# simulated driver; CUCORE_TEST_DRIVER=real runs them against libcuda.so.1
# (on a GPU machine). CUCORE_TEST_SANITIZE=0 skips the sanitizer build.
# CUCORE_CUDA_INCLUDE=DIR: the CUDA headers (default /usr/local/cuda/include).
#
# Prints how many tests each configuration ran; fails if one failed, or if
# one ran none (ctest --no-tests=error; a configuration whose every test
# skipped ran none too). CUCORE_TEST_SUMMARY=FILE also writes one line per
# configuration there: NAME TESTS PASSED SKIPPED FAILED (.ci/run reads it).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/build_options.sh
jobs=$(nproc 2>/dev/null || echo 2)
driver=${CUCORE_TEST_DRIVER:-sim}
sanitize=${CUCORE_TEST_SANITIZE:-1}
summary=${CUCORE_TEST_SUMMARY:-/dev/null}
: >"$summary"
failed=0
lines=()
ctest_prefix=()

# count JUNIT STATUS: test cases of that status in ctest's JUnit report.
count() {
    local n
    n=$(grep -c "status=\"$2\"" "$1" 2>/dev/null) || true
    echo "${n:-0}"
}

# run_suite NAME DIR [-L LABEL] CMAKE_OPTIONS...
run_suite() {
    local name=$1 dir=$2 rc=0 junit passed failed_n skipped total line label=()
    shift 2
    if [ "${1:-}" = -L ]; then
        label=(-L "$2")
        shift 2
    fi
    cmake -S . -B "$dir" "${cuc_plain_opts[@]}" -DCUCORE_TEST_DRIVER="$driver" "$@" >/dev/null
    cmake --build "$dir" -j"$jobs"
    junit=$PWD/$dir/ctest-junit.xml
    rm -f "$junit" "$dir/python/pytest.log"
    (cd "$dir" && "${ctest_prefix[@]}" ctest --no-tests=error --output-on-failure -j"$jobs" "${label[@]}" --output-junit "$junit") ||
        rc=$?
    passed=$(count "$junit" run)
    failed_n=$(count "$junit" fail)
    skipped=$(count "$junit" notrun)
    total=$((passed + failed_n + skipped))
    line="$name ($dir, $driver driver): $((passed + failed_n)) of $total tests ran: $passed passed, $failed_n failed, $skipped skipped"
    if [ -f "$dir/python/pytest.log" ]; then # ctest's python_pytest: pytest's own summary
        echo "== $name: pytest: $(tail -n 1 "$dir/python/pytest.log")"
    fi
    echo "== $line"
    lines+=("$line")
    echo "$name $total $passed $skipped $failed_n" >>"$summary"
    if [ $rc -ne 0 ] || [ $((passed + failed_n)) -eq 0 ]; then
        failed=1
    fi
}

echo "== plain build ($driver driver)"
run_suite plain build
if [ "$sanitize" = 1 ]; then
    echo "== ASan + UBSan build ($driver driver)"
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
        run_suite asan build-asan -DCUCORE_SANITIZE=ON -DCUCORE_BENCH=OFF
fi
if [ "$sanitize" = 1 ]; then
    # The tests that run threads (ctest label "concurrency"). setarch -R:
    # TSan's shadow mapping fails under some kernels' ASLR settings.
    echo "== ThreadSanitizer build ($driver driver, concurrency tests)"
    if command -v setarch >/dev/null && setarch "$(uname -m)" -R true 2>/dev/null; then
        ctest_prefix=(setarch "$(uname -m)" -R)
    fi
    TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
        run_suite tsan build-tsan -L concurrency -DCUCORE_TSAN=ON -DCUCORE_BENCH=OFF
    ctest_prefix=()
fi
echo "== summary"
printf '   %s\n' "${lines[@]}"
exit $failed
