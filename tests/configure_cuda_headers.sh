#!/usr/bin/env bash
# Configure checks every CUDA header the build includes and says where the
# toolkit came from: a directory holding only cuda.h fails at configure
# naming cudaTypedefs.h; headers older than the newest pinned ABI version
# fail naming the version needed; CUCORE_CUDA_INCLUDE in the environment is
# used and named as the source.
#
#   configure_cuda_headers.sh SOURCE_DIR C_COMPILER CUDA_INCLUDE
set -euo pipefail
src=$1 cc=$2 cuda=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "configure_cuda_headers: $*" >&2; exit 1; }

# configure NAME [CMAKE_ARGS...]: output of a fresh configure, status in $rc.
configure() {
    local name=$1
    shift
    rc=0
    out=$(cmake -S "$src" -B "$tmp/b-$name" -DCMAKE_C_COMPILER="$cc" -DCUCORE_TESTS=OFF \
        -DCUCORE_BENCH=OFF "$@" 2>&1) || rc=$?
    out=$(tr -s ' \n' ' ' <<<"$out") # CMake wraps its messages
}

mkdir -p "$tmp/only-cuda-h" "$tmp/old" "$tmp/good"
cp "$cuda/cuda.h" "$tmp/only-cuda-h/"
CUCORE_CUDA_INCLUDE=$tmp/only-cuda-h configure only-cuda-h
[ $rc -ne 0 ] || fail "configure passed with cuda.h alone"
grep -qF "cudaTypedefs.h not found in $tmp/only-cuda-h (from the CUCORE_CUDA_INCLUDE environment variable)" <<<"$out" ||
    fail "no word of cudaTypedefs.h and where the headers came from: $out"
grep -qF -- "-DCUCORE_CUDA_INCLUDE=DIR" <<<"$out" || fail "does not say how to point elsewhere: $out"

sed 's/^#define CUDA_VERSION [0-9]*/#define CUDA_VERSION 12040/' "$cuda/cuda.h" >"$tmp/old/cuda.h"
cp "$cuda/cudaTypedefs.h" "$tmp/old/"
configure old -DCUCORE_CUDA_INCLUDE="$tmp/old"
[ $rc -ne 0 ] || fail "configure passed with CUDA 12.4 headers"
grep -qF "is CUDA_VERSION '12040'; cucore needs the headers of CUDA 12.8 or newer" <<<"$out" ||
    fail "no word of the version needed: $out"

ln -s "$cuda/cuda.h" "$cuda/cudaTypedefs.h" "$tmp/good/"
CUCORE_CUDA_INCLUDE=$tmp/good configure good
[ $rc -eq 0 ] || fail "configure failed with good headers: $out"
grep -qF "headers from $tmp/good (the CUCORE_CUDA_INCLUDE environment variable)" <<<"$out" ||
    fail "does not say where the headers came from: $out"
grep -qx "CUCORE_CUDA_INCLUDE:PATH=$tmp/good" "$tmp/b-good/CMakeCache.txt" || fail "the environment's directory is not the one used"
echo "configure_cuda_headers: cuda.h alone, old headers and CUCORE_CUDA_INCLUDE from the environment checked"
