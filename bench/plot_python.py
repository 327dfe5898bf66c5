#!/usr/bin/env python3
"""Cost per buffer against buffers a message: Python beside C and cuda.core.

Reads the directory scripts/bench_python_c.sh fills (bench_python_R.txt:
bench/bench_python.py's BENCH lines; bench_pool_R.txt: bench_pool's
printed lines, R = 1 .. ROUNDS) and writes

  --svg FILE    a log-log chart, µs a buffer against n, one line each for
                Python through cucore (to the answer, and to the lease
                end), Python through cuda.core (to the answer) and C
                (bench_pool's first send: the raw driver calls and cucore's);
                each point the median over the rounds of one start
  --table FILE  the same medians as a Markdown table, with two ratios:
                cucore / cuda.core (Python, to the answer) and Python to
                the lease end / C cucore

  python3 bench/plot_python.py /tmp/b --svg /tmp/b/python.svg \\
          --table /tmp/b/python.md --title "H100, 21bc56c"

Uses plot.py's SVG writer (the standard library only). Exit status 0, or 1
when the directory holds no round.
"""

import argparse
import glob
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plot import svg  # noqa: E402

BENCH_RE = re.compile(r"^BENCH name=(\S+) impl=(\S+) n=(\d+) value=([0-9.]+) unit=(\S+)")
POOL_RE = re.compile(r"^pool buffers, first send, (\d+)/message\s+raw\s+([0-9.]+) ns"
                     r"\s+cucore\s+([0-9.]+) ns")
LINES = {  # label: (source, key)
    "Python cucore, to the answer": ("py", "cucore"),
    "Python cucore, to the lease end": ("py", "cucore+leases"),
    "Python cuda.core, to the answer": ("py", "cuda.core"),
    "C cucore, first send": ("c", "cucore"),
    "raw driver (C), first send": ("c", "raw"),
}


def read_round(py_path, c_path):
    """{(source, key): {n: µs}} of one round."""
    out = {}
    with open(py_path) as f:
        for text in f:
            m = BENCH_RE.match(text)
            if m and m.group(1) == "pipe_buffers" and m.group(5) == "us_per_buffer":
                out.setdefault(("py", m.group(2)), {})[int(m.group(3))] = float(m.group(4))
    if os.path.exists(c_path):
        with open(c_path) as f:
            for text in f:
                m = POOL_RE.match(text)
                if m:
                    n = int(m.group(1))
                    out.setdefault(("c", "raw"), {})[n] = float(m.group(2)) / 1000
                    out.setdefault(("c", "cucore"), {})[n] = float(m.group(3)) / 1000
    return out


def medians(rounds):
    """{label: {n: median µs over the rounds that measured it}}."""
    series = {}
    for label, key in LINES.items():
        pts = {}
        for n in sorted({n for r in rounds for n in r.get(key, {})}):
            vals = [r[key][n] for r in rounds if n in r.get(key, {})]
            pts[n] = statistics.median(vals)
        if len(pts) >= 2:
            series[label] = pts
    return series


def table(series, nrounds):
    ns = sorted({n for s in series.values() for n in s})
    labels = list(series)
    head = "| n | " + " | ".join(labels) + " | cucore / cuda.core | lease end / C |"
    rows = [f"Medians of {nrounds} round(s), µs a buffer.", "", head,
            "|" + "---|" * (len(labels) + 3)]

    def get(label, n):
        return series.get(label, {}).get(n)

    def ratio(a, b):
        return f"×{a / b:.2f}" if a is not None and b else "—"

    for n in ns:
        cells = [f"{get(label, n):.2f}" if get(label, n) is not None else "—"
                 for label in labels]
        rows.append(f"| {n} | " + " | ".join(cells) + " | "
                    + ratio(get("Python cucore, to the answer", n),
                            get("Python cuda.core, to the answer", n)) + " | "
                    + ratio(get("Python cucore, to the lease end", n),
                            get("C cucore, first send", n)) + " |")
    return "\n".join(rows) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--svg")
    ap.add_argument("--table")
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    rounds = []
    for py_path in sorted(glob.glob(os.path.join(a.dir, "bench_python_*.txt"))):
        r = py_path.rsplit("_", 1)[1]
        rounds.append(read_round(py_path, os.path.join(a.dir, "bench_pool_" + r)))
    series = medians(rounds)
    if not series:
        print(f"{a.dir}: no bench_python_R.txt with pipe_buffers figures", file=sys.stderr)
        return 1
    title = "Pool buffers through a Pipe: µs a buffer, median of %d round(s)" % len(rounds)
    if a.title:
        title += " (" + a.title + ")"
    if a.svg:
        svg(series, title, a.svg)
    text = table(series, len(rounds))
    if a.table:
        with open(a.table, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
