#!/usr/bin/env bash
# ctest's readme_c and readme_python: README.md's snippets are complete
# programs that run as written, on a machine without a GPU too, so README
# cannot drift from the library. Every ```c block is compiled against the
# build's headers and shared library (with the README's own pieces only:
# nothing is added to the block) and run; every ```python block is run with
# the interpreter given. The environment is ctest's: CUCORE_DRIVER=sim
# (and, for Python, PYTHONPATH at the built package), as README's lines
# say. Each block must exit 0 and print something; a README without a
# block of the language fails (the test would check nothing).
#   readme_snippets.sh c README CC INCLUDE_DIR LIB_DIR [CFLAGS...]
#   readme_snippets.sh python README PYTHON
set -euo pipefail
lang=$1 readme=$2
shift 2
case $lang in
c)
    cc=$1 include=$2 libdir=$3
    shift 3
    cflags=("$@")
    ;;
python) python=$1 ;;
*) echo "readme_snippets: unknown language $lang" >&2; exit 2 ;;
esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The blocks that open with a line "```LANG", one file each.
awk -v lang="$lang" -v dir="$tmp" '
    $0 == "```" lang { n++; out = sprintf("%s/snippet%d.%s", dir, n, lang == "python" ? "py" : lang); inblock = 1; next }
    inblock && /^```/ { inblock = 0; close(out); next }
    inblock { print > out }
' "$readme"
shopt -s nullglob
blocks=("$tmp"/snippet*)
[ ${#blocks[@]} -gt 0 ] || { echo "readme_snippets: no \`\`\`$lang block in $readme" >&2; exit 1; }

status=0
for f in "${blocks[@]}"; do
    if [ "$lang" = c ]; then
        "$cc" -std=c11 -Wall -Wextra -Werror "${cflags[@]}" -I"$include" -o "$f.bin" "$f" \
            -L"$libdir" -lcucore -Wl,-rpath,"$libdir" || { status=1; continue; }
        run=("$f.bin")
    else
        run=("$python" "$f")
    fi
    rc=0
    out=$(cd "$tmp" && "${run[@]}" 2>&1) || rc=$?
    echo "== README $lang block $(basename "$f") (exit $rc):"
    echo "$out"
    if [ $rc -ne 0 ] || [ -z "$out" ]; then
        echo "readme_snippets: the block failed or printed nothing" >&2
        status=1
    fi
done
echo "readme_snippets: ${#blocks[@]} $lang block(s) of $readme ran"
exit $status
