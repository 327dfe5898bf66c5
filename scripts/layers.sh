#!/usr/bin/env bash
# The architecture check (docs/DESIGN.md, "Architecture"). Prints every
# finding and exits 1 on any:
#   1. src/: the include graph between modules (a module is a .c file and
#      the .h of the same name) has no cycle, and no edge that a layer may
#      not take (up the layers, or across to one it does not build on);
#      python/src/ (the extension, layered by file: the table below) the
#      same;
#   2. tools/, examples/ and python/src/ include no src/ header: only <cucore.h>,
#      cucore/*.h and their own files, and their CMakeLists.txt add no
#      src/ include path;
#   3. src/wire/ makes no driver call (it is in the table below: wire
#      builds on base and os only);
#   4. with a build directory (scripts/layers.sh BUILD): the same two
#      rules as 1 for the calls between modules, read from the library's
#      and the extension's object files with nm (defined and undefined
#      symbols).
# Usage: scripts/layers.sh [BUILD_DIR]
set -euo pipefail
export LC_ALL=C  # sort and join must agree on one collation (the GPU machine has a UTF-8 locale)
cd "$(dirname "$0")/.."
build=${1:-}

# Each layer, bottom up, with the layers it may use.
declare -A uses=(
    [base]=""
    [os]="base"
    [driver]="base os"
    [wire]="base os"
    [frame]="base os wire"
    [lease]="base os wire frame"
    [device]="base os driver wire"
    [exec]="base os driver wire device"
    [memory]="base os driver wire lease device exec"
    [channel]="base os wire frame lease device exec memory"
    [share]="base os wire frame lease device exec memory channel"
)
order="base os driver wire frame lease device exec memory channel share"

# python/src: each file's layer (python/src/handle.h says what each is),
# named py.LAYER in the table above, each module as py.LAYER/FILE.
declare -A pyfile=(
    [handle]=handle [mem]=mem
    [device]=type [stream]=type [event]=type [kernel]=type [launch]=type [pool]=type
    [buffer]=type [vmm]=type [slab]=type
    [wire]=wire [channel]=top [share]=top [module]=module
)
uses[py.handle]=""
uses[py.mem]="py.handle"
uses[py.type]="py.handle py.mem"
uses[py.wire]="py.handle"
uses[py.top]="py.handle py.wire"
uses[py.module]="py.handle py.mem py.type py.wire py.top"
problems=0
edges=$(mktemp)
trap 'rm -f "$edges"' EXIT

say() {
    echo "$*"
    problems=$((problems + 1))
}

module_of() { # src/wire/msg.c -> wire/msg
    local p=${1#src/}
    echo "${p%.*}"
}

includes_of() { # the quoted includes of a file, one a line
    grep -o '^#include "[^"]*"' "$1" | sed 's/#include "\(.*\)"/\1/' || true
}

may_use() { # from-layer to-layer
    [ "$1" = "$2" ] && return 0
    case " ${uses[$1]:-} " in *" $2 "*) return 0 ;; esac
    return 1
}

# Checks the edges in $edges ("from to" module pairs) for what kind says.
check_edges() {
    local kind=$1 from to lf lt loops
    while read -r from to; do
        lf=${from%%/*} lt=${to%%/*}
        if ! may_use "$lf" "$lt"; then
            say "$kind: $from -> $to: layer $lf may not use $lt (it builds on: ${uses[$lf]:-nothing})"
        fi
    done < "$edges"
    # tsort names every loop it has to break.
    loops=$( (awk '$1 != $2' "$edges" | tsort >/dev/null) 2>&1 | grep -v "input contains a loop" || true)
    if [ -n "$loops" ]; then
        say "$kind: cycle through: $(echo "$loops" | sed 's/^tsort: //' | tr '\n' ' ')"
    fi
}

# ---- 1. the include graph of src/ ----
for layer in $(ls src); do
    [ -d "src/$layer" ] || continue
    if [ -z "${uses[$layer]+x}" ]; then
        say "src/$layer is not a layer of the table in scripts/layers.sh"
        continue
    fi
done
for f in src/*/*.c src/*/*.h; do
    from=$(module_of "$f")
    includes_of "$f" | while read -r inc; do
        case $inc in
        cucore.h | cucore/*) ;; # the public headers
        */*)
            if [ -f "src/$inc" ]; then
                to=$(module_of "src/$inc")
                if [ "$to" != "$from" ]; then echo "$from $to"; fi
            else
                echo "UNRESOLVED $f $inc"
            fi
            ;;
        *) echo "UNRESOLVED $f $inc" ;;
        esac
    done
done | sort -u > "$edges"
if grep -q '^UNRESOLVED' "$edges"; then
    grep '^UNRESOLVED' "$edges" | while read -r _ f inc; do
        echo "include: $f includes \"$inc\": name a src/ header by its layer (\"wire/wire.h\")"
    done
    problems=$((problems + $(grep -c '^UNRESOLVED' "$edges")))
    sed -i '/^UNRESOLVED/d' "$edges"
fi
check_edges include
echo "include graph: $(wc -l < "$edges") edges between $(tr ' ' '\n' < "$edges" | sort -u | wc -l) modules in $(echo $order | wc -w) layers"

py_module_of() { # python/src/buffer.c (or its buffer.c.o) -> py.type/buffer, or UNLAYERED
    local f=${1##*/}
    f=${f%.o}
    f=${f%.*}
    if [ -n "${pyfile[$f]+x}" ]; then echo "py.${pyfile[$f]}/$f"; else echo "UNLAYERED $1"; fi
}

for f in python/src/*.c python/src/*.h; do
    from=$(py_module_of "$f")
    case $from in UNLAYERED*) echo "$from"; continue ;; esac
    includes_of "$f" | while read -r inc; do
        [ -f "python/src/$inc" ] || continue # public headers (checked in 2)
        to=$(py_module_of "python/src/$inc")
        if [ "$to" != "$from" ]; then echo "$from $to"; fi
    done
done | sort -u > "$edges"
if grep -q '^UNLAYERED' "$edges"; then
    grep '^UNLAYERED' "$edges" | while read -r _ f; do
        echo "python: $f is in no layer of the table in scripts/layers.sh"
    done
    problems=$((problems + $(grep -c '^UNLAYERED' "$edges")))
    sed -i '/^UNLAYERED/d' "$edges"
fi
check_edges "python include"
echo "python include graph: $(wc -l < "$edges") edges between $(tr ' ' '\n' < "$edges" | sort -u | wc -l) modules"

# ---- 2. tools/ and examples/ on the public headers ----
for f in tools/*.[ch] examples/*.[ch] python/src/*.[ch]; do
    dir=$(dirname "$f")
    includes_of "$f" | while read -r inc; do
        case $inc in
        cucore.h | cucore/*) ;;
        *) if [ ! -f "$dir/$inc" ]; then echo "$f: includes \"$inc\", which is neither public nor its own"; fi ;;
        esac
    done
done > "$edges"
if [ -s "$edges" ]; then
    cat "$edges"
    problems=$((problems + $(wc -l < "$edges")))
fi
for c in tools/CMakeLists.txt examples/CMakeLists.txt python/CMakeLists.txt; do
    if grep -n 'src' "$c" | grep -v '^\s*#' | grep -q 'SOURCE_DIR}/src'; then
        say "$c: adds src/ to an include path"
    fi
    if grep -q 'cucore_static' "$c"; then
        say "$c: links the static library (link the shared one, as a user does)"
    fi
done

# ---- 3. the wire moves bytes ----
if grep -ln '#include <cuda\|#include "driver/' src/wire/* 2>/dev/null; then
    say "src/wire/: the files above include the driver"
fi

# ---- 4. the calls, from the objects ----
if [ -n "$build" ]; then
    objdir="$build/src/CMakeFiles/cucore_obj.dir"
    [ -d "$objdir" ] || { echo "no objects in $objdir: build first"; exit 1; }
    defs=$(mktemp)
    trap 'rm -f "$edges" "$defs"' EXIT
    for o in "$objdir"/*/*.c.o; do
        m=${o#"$objdir"/}
        m=${m%.c.o}
        nm --defined-only -g "$o" | awk -v m="$m" 'NF == 3 { print $3, m }'
    done | sort > "$defs"
    for o in "$objdir"/*/*.c.o; do
        m=${o#"$objdir"/}
        m=${m%.c.o}
        nm -u "$o" | awk '{ print $NF }' | sort | join - "$defs" | awk -v m="$m" '$2 != m { print m, $2 }'
    done | sort -u > "$edges"
    check_edges call
    echo "call graph: $(wc -l < "$edges") edges between modules, from $(ls "$objdir"/*/*.c.o | wc -l) objects"
    if nm -u "$objdir"/wire/*.c.o | grep -q 'cuc__drv_table\|cuc__driver_get'; then
        say "src/wire/: an object uses the driver table"
    fi
    pydir="$build/python/CMakeFiles/cucore_python.dir/src"
    pyobjs=()
    for o in "$pydir"/*.c.o; do # those of today's sources (a removed file's may linger)
        f=${o##*/}
        if [ -f "python/src/${f%.o}" ]; then pyobjs+=("$o"); fi
    done
    if [ ${#pyobjs[@]} -gt 0 ]; then
        for o in "${pyobjs[@]}"; do
            nm --defined-only -g "$o" | awk -v m="$(py_module_of "$o")" 'NF == 3 { print $3, m }'
        done | sort > "$defs"
        for o in "${pyobjs[@]}"; do
            m=$(py_module_of "$o")
            nm -u "$o" | awk '{ print $NF }' | sort | join - "$defs" | awk -v m="$m" '$2 != m { print m, $2 }'
        done | sort -u > "$edges"
        check_edges "python call"
        echo "python call graph: $(wc -l < "$edges") edges between modules, from ${#pyobjs[@]} objects"
    fi
fi

if [ "$problems" -gt 0 ]; then
    echo "layers: $problems problem(s)"
    exit 1
fi
echo "layers: no cycle, no edge a layer may not take"
