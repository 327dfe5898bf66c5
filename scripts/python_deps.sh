#!/usr/bin/env bash
# Downloads Debian's packages of Dask's `distributed` and what it imports
# (apt-get download: no install, no root needed beyond apt's cache) and
# unpacks their Python modules into DIR (default build-carry/pydeps), for
# a machine that can install nothing (the GPU machine): carry DIR there and
# give it to scripts/gpu_python.sh as CUCORE_PY_DEPS=DIR. The modules are
# Debian's, built for Debian's python3; on another Python version their C
# speedups do not load and those packages use their pure-Python code, except
# psutil, which has none: distributed then needs that machine's own psutil,
# and gpu_python.sh says so when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-carry/pydeps}
pkgs=(python3-distributed python3-dask python3-cloudpickle python3-toolz
      python3-tblib python3-zict python3-sortedcontainers python3-msgpack
      python3-tornado python3-yaml python3-fsspec python3-partd python3-locket
      python3-click python3-jinja2 python3-markupsafe python3-packaging
      python3-urllib3 python3-psutil python3-heapdict)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download "${pkgs[@]}" >/dev/null)
rm -rf "$dir"
mkdir -p "$dir"
for deb in "$tmp"/*.deb; do
    dpkg -x "$deb" "$tmp/root"
done
cp -r "$tmp/root/usr/lib/python3/dist-packages/." "$dir/"
echo "$dir: $(ls "$dir" | wc -l) entries, $(du -sh "$dir" | cut -f1)"
