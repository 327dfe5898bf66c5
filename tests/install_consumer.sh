#!/usr/bin/env bash
# The user's case of an installed cucore, from scratch: configure and build
# the source tree in a scratch build directory (configured for the default
# prefix), `cmake --install` it into a temporary prefix, move the build
# tree away, then with only CUCORE_DRIVER=sim in the environment run
#   - the installed `cucore devices` (libcucore.a inside: the simulator is
#     found in bindir/../lib),
#   - a consumer built with find_package(cucore) against libcucore.so (the
#     simulator is found next to libcucore.so),
#   - a consumer built with `pkg-config --cflags --libs cucore` and the
#     libdir as its run path (README's line), and one without the run
#     path, which the dynamic loader cannot start (what README says).
# A consumer linked with libcucore.a outside the prefix finds the simulator
# through the dynamic loader's search (include/cucore/driver.h): it runs
# with LD_LIBRARY_PATH naming the installed libdir.
# Also: no installed file holds the scratch build tree's or the source
# tree's path (strings), cucore.pc names the prefix it was installed under
# with libdir and includedir relative to it, libcucore.so exports only cuc_*.
#
# A scratch build rather than the build tree under test: moving that one
# away would pull the files from under the tests ctest runs beside this one.
#
#   install_consumer.sh SOURCE_DIR C_COMPILER CUDA_INCLUDE [BUILD_TYPE]
set -euo pipefail
src=$1 cc=$2 cuda_include=$3 build_type=${4:-RelWithDebInfo}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
fail() { echo "install_consumer: $*" >&2; exit 1; }
# Only CUCORE_DRIVER=sim: no LD_LIBRARY_PATH, no path to the simulator.
run_clean() { env -i PATH=/usr/bin:/bin CUCORE_DRIVER=sim "$@"; }

cmake -S "$src" -B "$tmp/build" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE="$build_type" \
    -DCUCORE_CUDA_INCLUDE="$cuda_include" -DCUCORE_TESTS=OFF -DCUCORE_BENCH=OFF >/dev/null
cmake --build "$tmp/build" -j"$(nproc 2>/dev/null || echo 2)" >/dev/null
cmake --install "$tmp/build" --prefix "$prefix" >/dev/null
mv "$tmp/build" "$tmp/moved-away"
[ ! -e "$tmp/build" ] || fail "the build tree is still there"

lib=$(ls "$prefix"/lib*/libcucore.so | head -1)
libdir=$(dirname "$lib")
[ -f "$libdir/libcucore-sim.so" ] || fail "libcucore-sim.so is not installed in $libdir"
while IFS= read -r -d '' f; do
    # grep reads all (no -q): under pipefail an early exit would SIGPIPE
    # strings and make the pipeline fail, hiding a hit.
    hits=$(strings -a "$f" | grep -F -e "$tmp/build" -e "$src" || true)
    [ -z "$hits" ] || fail "$f holds a build machine path: $(head -3 <<<"$hits")"
done < <(find "$prefix" -type f -print0)

# Read the symbol table once: piping nm into an early-exiting grep -q
# under pipefail fails the script with SIGPIPE once the table is large.
syms=$(nm -D --defined-only "$lib")
bad=$(awk '{sub(/@.*/, "", $3); print $3}' <<<"$syms" | grep -v '^cuc_[a-z]' | grep -v '^CUCORE_0$' || true)
[ -z "$bad" ] || fail "unexpected exports: $bad"
grep -q ' cuc_device_get_by_uuid@@CUCORE_0$' <<<"$syms" || fail "cuc_device_get_by_uuid is not exported"
if grep -q ' cuc__' <<<"$syms"; then fail "internal symbol exported"; fi

out=$(cd / && run_clean "$prefix/bin/cucore" devices) || fail "installed cucore devices failed"
grep -qF "driver: $libdir/libcucore-sim.so (version 13000) [simulated]" <<<"$out" ||
    fail "installed cucore devices did not use the installed simulator: $out"
grep -q '^3  GPU-' <<<"$out" || fail "installed cucore devices listed no 4 GPUs: $out"

# want OUTPUT [DRIVER]: a consumer's line, the simulator DRIVER (default:
# the installed one, by its path) loaded.
want() {
    grep -qF "consumer ok: 4 devices, GPU-00112233-4455-6677-8899-aabbccddeeff, driver ${2:-$libdir/libcucore-sim.so} (simulated)" <<<"$1" ||
        fail "consumer output: $1"
}

cmake -S "$src/tests/install_consumer" -B "$tmp/b" -DCMAKE_C_COMPILER="$cc" \
    -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$tmp/b" >/dev/null
want "$(cd / && run_clean "$tmp/b/consumer")"
# Found by the loader, so known by its bare name; LD_LIBRARY_PATH names
# only the installed libdir.
want "$(cd / && run_clean LD_LIBRARY_PATH="$libdir" "$tmp/b/consumer_static")" libcucore-sim.so

pc=$libdir/pkgconfig/cucore.pc
grep -qx "prefix=$prefix" "$pc" || fail "cucore.pc does not name the prefix it was installed under: $(head -3 "$pc")"
grep -qx 'libdir=${prefix}/[^/].*' "$pc" || fail "cucore.pc libdir is not under \${prefix}: $(grep libdir= "$pc")"
grep -qx 'includedir=${prefix}/include' "$pc" || fail "cucore.pc includedir is not \${prefix}/include"
export PKG_CONFIG_PATH=$libdir/pkgconfig
[ "$(pkg-config --variable=libdir cucore)" = "$libdir" ] || fail "pkg-config libdir is $(pkg-config --variable=libdir cucore)"
# README's line, and without its run path: the loader does not find
# libcucore.so.0 (what README says to add the run path for).
# shellcheck disable=SC2046 # the flags are words
"$cc" "$src/tests/install_consumer/main.c" $(pkg-config --cflags --libs cucore) \
    -Wl,-rpath,"$(pkg-config --variable=libdir cucore)" -o "$tmp/pc_consumer"
want "$(cd / && run_clean "$tmp/pc_consumer")"
# shellcheck disable=SC2046
"$cc" "$src/tests/install_consumer/main.c" $(pkg-config --cflags --libs cucore) -o "$tmp/pc_norpath"
if out=$(cd / && run_clean "$tmp/pc_norpath" 2>&1); then
    fail "a pkg-config consumer without the run path ran: $out"
fi
grep -qF "libcucore.so.0: cannot open shared object file" <<<"$out" ||
    fail "a pkg-config consumer without the run path failed otherwise: $out"
echo "install consumer: installed cucore devices, find_package (shared, static) and pkg-config consumers ran on the installed simulator (without the run path: not found, as README says); no build path in $(find "$prefix" -type f | wc -l) installed files"
