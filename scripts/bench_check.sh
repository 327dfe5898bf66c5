#!/usr/bin/env bash
# Checks the bench tooling without a GPU and without ctest: the page
# generator's own tests (bench/make_performance.py --selftest), then a
# quick run of scripts/bench.sh on the simulator, and that the page made
# from it is sane: bench.sh exits 0; every bench the page needs wrote its
# figures (the Python ones when the extension was built); the generator
# refuses the run without --partial, naming cuda.core's figures, where
# cuda.core is not importable; with --partial the page has the simulator's
# banner, at most 200 lines, a number in every C cell of the headline, and
# a chart that parses as SVG.
#
#   scripts/bench_check.sh [OUT_DIR]    default: a new directory under /tmp
#
# The build goes to CUCORE_BENCH_BUILD (default build-bench/ in this tree).
# Takes 2-5 minutes on 2 cores.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-$(mktemp -d /tmp/cucore-bench-check.XXXXXX)}
export CUCORE_BENCH_BUILD=${CUCORE_BENCH_BUILD:-$PWD/build-bench}
py=/usr/bin/python3
[ -x "$py" ] || py=python3
fail() { echo "bench_check: FAILED: $*" >&2; exit 1; }

echo "== bench/make_performance.py --selftest"
"$py" bench/make_performance.py --selftest 2>&1 | tail -3
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "make_performance.py --selftest"

echo "== CUCORE_DRIVER=sim CUCORE_BENCH_QUICK=1 scripts/bench.sh $out (log: $out.log)"
mkdir -p "$out"
CUCORE_DRIVER=sim CUCORE_BENCH_QUICK=1 CUCORE_PYTHON=$py scripts/bench.sh "$out" >"$out.log" 2>&1 ||
    { tail -20 "$out.log"; fail "scripts/bench.sh exited $?"; }

"$py" - "$out" "$py" <<'EOF' || fail "the run's results or page (above)"
import json, os, re, subprocess, sys
import xml.etree.ElementTree as ET

out, py = sys.argv[1], sys.argv[2]
bad = []
lines = [json.loads(t) for t in open(os.path.join(out, "results.jsonl")) if t.strip()]
benches = {l["bench"] for l in lines}
need = {"bench_device", "bench_kernel", "bench_pool", "bench_vmm", "bench_share"}
if os.path.isdir(os.path.join(os.environ["CUCORE_BENCH_BUILD"], "python", "cucore")):
    need.add("bench_python")
for b in sorted(need - benches):
    bad.append(f"results.jsonl has no line of {b}")
for l in lines:
    if l.get("driver") not in ("sim", None) and l["bench"] != "compare_cuda_core":
        bad.append(f"{l['bench']} '{l['figure']}': driver {l.get('driver')}, not sim")
if "commit:" not in open(os.path.join(out, "machine.txt")).read():
    bad.append("machine.txt names no commit")

gen = [py, "bench/make_performance.py", "--no-svg", out]
has_cc = subprocess.run([py, "-c", "import cuda.core"], capture_output=True).returncode == 0
r = subprocess.run(gen, capture_output=True, text=True)
if not has_cc and (r.returncode != 1 or "cuda.core:" not in r.stderr or r.stdout):
    bad.append(f"without --partial and without cuda.core: exit {r.returncode}, stderr {r.stderr!r}")

svg = os.path.join(out, "check.svg")
r = subprocess.run([py, "bench/make_performance.py", "--partial", "--svg", svg, out],
                   capture_output=True, text=True)
page = r.stdout
if r.returncode != 0:
    bad.append(f"--partial: exit {r.returncode}: {r.stderr}")
if "THESE ARE THE SIMULATOR'S NUMBERS" not in page:
    bad.append("the page has no simulator banner")
if page.count("\n") > 200:
    bad.append(f"the page has {page.count(chr(10))} lines (at most 200)")
rows = [l for l in page.splitlines() if l.startswith("| ") and not l.startswith("| figure")]
if len(rows) < 13:
    bad.append(f"the headline has {len(rows)} rows")
num = re.compile(r"^\d+(\.\d+)? (ns|µs|ms|s)( \(×\d+\.\d\d\))?$")
for row in rows:
    cells = [c.strip() for c in row.strip("|").split("|")]
    label, raw, c = cells[0], cells[1], cells[2]
    if not num.match(c):
        bad.append(f"headline '{label}': cucore C cell {c!r}")
    if not label.startswith("Pool buffers") and not num.match(raw.split(" (")[0]):
        bad.append(f"headline '{label}': raw cell {raw!r}")
    if "bench_python" in benches and label.startswith("Pool buffer,") and not num.match(cells[3]):
        bad.append(f"headline '{label}': cucore Python cell {cells[3]!r}")
try:
    root = ET.parse(svg).getroot()
    if not root.tag.endswith("svg") or len(root.findall(".//{*}path")) < 2:
        bad.append("the chart has fewer than 2 lines")
except (OSError, ET.ParseError) as e:
    bad.append(f"the chart: {e}")
for b in bad:
    print("  " + b)
print(f"== page: {page.count(chr(10))} lines, {len(rows)} headline rows; "
      f"benches: {' '.join(sorted(benches))}")
sys.exit(1 if bad else 0)
EOF
echo "== bench_check: OK ($out)"
