#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, then builds a consumer with
# find_package(cucore) and another with pkg-config, and runs both against
# the installed simulator. Also checks that libcucore.so exports only cuc_*.
set -euo pipefail
build=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
lib=$(ls "$tmp"/prefix/lib*/libcucore.so | head -1)
# Read the symbol table once: piping nm into an early-exiting grep -q
# under pipefail fails the script with SIGPIPE once the table is large.
syms=$(nm -D --defined-only "$lib")
bad=$(awk '{sub(/@.*/, "", $3); print $3}' <<<"$syms" | grep -v '^cuc_[a-z]' | grep -v '^CUCORE_0$' || true)
if [ -n "$bad" ]; then echo "unexpected exports: $bad" >&2; exit 1; fi
grep -q ' cuc_device_get_by_uuid@@CUCORE_0$' <<<"$syms"
if grep -q ' cuc__' <<<"$syms"; then echo "internal symbol exported" >&2; exit 1; fi

cmake -S "$src/tests/install_consumer" -B "$tmp/b" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/b" >/dev/null
libdir=$(dirname "$lib")
# The installed libcucore looks for the simulator in its configured libdir,
# not in the scratch prefix: point at the scratch copy explicitly.
export CUCORE_DRIVER="$libdir/libcucore-sim.so" CUCORE_SIM_GPUS=2
LD_LIBRARY_PATH="$libdir" "$tmp/b/consumer" | grep -q 'consumer ok: 2 devices'
"$tmp/b/consumer_static" | grep -q 'consumer ok: 2 devices'

export PKG_CONFIG_PATH="$libdir/pkgconfig"
# The .pc file names the configured prefix; rebase it on the scratch one.
sed -i "s|^prefix=.*|prefix=$tmp/prefix|;s|^libdir=.*|libdir=$libdir|;s|^includedir=.*|includedir=$tmp/prefix/include|" "$libdir/pkgconfig/cucore.pc"
cc -o "$tmp/pc_consumer" "$src/tests/install_consumer/main.c" $(pkg-config --cflags --libs cucore)
LD_LIBRARY_PATH="$libdir" "$tmp/pc_consumer" | grep -q 'consumer ok: 2 devices'
echo "install consumer: find_package, static and pkg-config builds ran"
