#!/bin/bash
# Facts learned from the real driver live in sim/FACTS.md, numbered, and
# are cited by number, not retold. Fails when:
#  (a) a file that names FACTS.md cites an F-number FACTS.md does not
#      define (every F<digits> word in such a file is a citation);
#  (b) FACTS.md defines a number twice, or skips one (its "### F<n>:"
#      headings must be 1..n, each once);
#  (c) source under src/ include/ tools/ python/src sim/ (its .c and .h
#      files) names a GPU run: a GPU (H100, H200, A100) followed by a run
#      word (run, ran, session, start, box, machine), "on the H200" and
#      the like, or the word "session".
# Before checking the tree it checks itself: a small tree with each
# violation planted once must fail, and the same tree without them pass.
#
#   tests/test_facts.sh [SOURCE_DIR]      (default: this script's tree)
set -u

gpu='(H100|H200|A100)s?'
run_word='(runs?|ran|sessions?|starts?|box|machines?)'

# check ROOT: prints each violation, returns 1 if there is any.
check() {
    local root=$1 facts=$1/sim/FACTS.md bad=0 defs dups n i max cited src

    if [ ! -f "$facts" ]; then
        echo "FAIL: $facts is missing"
        return 1
    fi
    # (b) the numbers FACTS.md defines
    defs=$(sed -nE 's/^### F([0-9]+):.*/\1/p' "$facts" | sort -n)
    if [ -z "$defs" ]; then
        echo "FAIL: $facts defines no fact (### F1: ...)"
        return 1
    fi
    dups=$(uniq -d <<<"$defs")
    for n in $dups; do
        echo "FAIL: FACTS.md defines F$n more than once"
        bad=1
    done
    max=$(tail -n1 <<<"$defs")
    for ((i = 1; i <= max; i++)); do
        if ! grep -qx "$i" <<<"$defs"; then
            echo "FAIL: FACTS.md skips F$i (it defines up to F$max)"
            bad=1
        fi
    done

    # (a) every citation in a file that names FACTS.md
    while IFS= read -r f; do
        while IFS=: read -r line tok; do
            n=${tok#F}
            if ! grep -qx "$n" <<<"$defs"; then
                echo "FAIL: ${f#"$root"/}:$line cites $tok, which sim/FACTS.md does not define"
                bad=1
            fi
        done < <(sed -E 's/noqa: F[0-9]+//g' "$f" | grep -onwE 'F[0-9]+')
    done < <(grep -rIl --exclude-dir=.git --exclude-dir='build*' --exclude-dir=__pycache__ --exclude=test_facts.sh \
                  'FACTS\.md' "$root")

    # (c) narration of GPU runs in source
    src=()
    for d in src include tools python/src; do
        [ -d "$root/$d" ] && src+=("$root/$d")
    done
    cited=$(
        {
            [ ${#src[@]} -gt 0 ] && grep -rnE --include='*.c' --include='*.h' --include='*.py' \
                "\\b$gpu\\b[^.;]{0,40}\\b$run_word\\b|\\b(on|as on|with|from) (an|the|one|two) $gpu\\b|\\bsessions?\\b" \
                "${src[@]}"
            for f in "$root"/sim/*.c "$root"/sim/*.h; do
                [ -f "$f" ] || continue
                grep -nHE "\\b$gpu\\b[^.;]{0,40}\\b$run_word\\b|\\b(on|as on|with|from) (an|the|one|two) $gpu\\b|\\bsessions?\\b" "$f"
            done
        } 2>/dev/null
    )
    if [ -n "$cited" ]; then
        while IFS= read -r l; do
            echo "FAIL: ${l#"$root"/}: names a GPU run; cite the fact (sim/FACTS.md) instead"
        done <<<"$cited"
        bad=1
    fi
    return $bad
}

# The checker must fail on each planted violation and pass without them.
self_test() {
    local t ok=0
    t=$(mktemp -d) || return 1
    plant() { # plant NAME: a fresh clean tree in $t/NAME
        mkdir -p "$t/$1/sim" "$t/$1/src"
        printf '# Facts\n\n### F1: one\n\ntext\n\n### F2: two\n\ntext, as F1 says\n' \
            >"$t/$1/sim/FACTS.md"
        printf '/* cited (sim/FACTS.md F2) */\nint x;\n' >"$t/$1/src/a.c"
        printf '/* the sim, as the driver does (FACTS.md F1) */\n' >"$t/$1/sim/s.c"
    }
    expect() { # expect STATUS NAME WHAT
        check "$t/$2" >"$t/$2.out" 2>&1
        local rc=$?
        if { [ "$1" = pass ] && [ $rc -ne 0 ]; } || { [ "$1" = fail ] && [ $rc -eq 0 ]; }; then
            echo "FAIL: self-test: $3 should $1, got status $rc:"
            sed 's/^/    /' "$t/$2.out"
            ok=1
        fi
    }
    plant clean
    expect pass clean "a clean tree"
    plant undefined
    printf '/* see sim/FACTS.md F3 */\n' >>"$t/undefined/src/a.c"
    expect fail undefined "a citation of an undefined fact"
    plant twice
    printf '\n### F2: again\n' >>"$t/twice/sim/FACTS.md"
    expect fail twice "a number defined twice"
    plant gap
    sed -i 's/^### F2:/### F3:/; s/F2)/F3)/' "$t/gap/sim/FACTS.md" "$t/gap/src/a.c"
    expect fail gap "a skipped number"
    plant run
    printf '/* as the H200 run showed */\n' >>"$t/run/src/a.c"
    expect fail run "a GPU run named in src/"
    plant on_gpu
    printf '/* refused on the H200 */\n' >>"$t/on_gpu/sim/s.c"
    expect fail on_gpu "\"on the H200\" in sim/"
    plant session
    printf '/* fixed in the tenth session */\n' >>"$t/session/src/a.c"
    expect fail session "the word session in src/"
    rm -rf "$t"
    return $ok
}

root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
status=0
self_test || status=1
check "$root" || status=1
if [ $status -eq 0 ]; then
    echo "OK: $(grep -c '^### F[0-9]*:' "$root/sim/FACTS.md") facts, each cited number defined, no GPU run named in source"
fi
exit $status
