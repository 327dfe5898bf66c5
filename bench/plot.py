#!/usr/bin/env python3
"""Cost per buffer against buffers a message, from one run of scripts/bench.sh.

Reads the JSON lines the benches wrote (results.jsonl: bench/bench_report.h
and bench/make_performance.py say the keys) and writes

  --svg FILE    a log-log chart, µs a buffer against n: every figure whose
                name holds "<n>/message" or "<n>/msg" (bench_pool's first
                send and cached re-send, bench_view* and bench_legacy*
                when they exist, cuda.core's batched share), the raw-driver
                column and cucore's as separate lines. SVG written with the
                standard library only (no matplotlib on the GPU machine).
  --table FILE  Markdown tables of the whole run (scripts/bench.sh's
                tables.md): per n, raw / cucore / cuda.core for the first
                send, and the cached re-send; then every figure of the run
                with its raw column and ratio.

  python3 bench/plot.py /tmp/cucore-bench --table /tmp/cucore-bench/tables.md

docs/PERFORMANCE.md and its chart are bench/make_performance.py's, which
draws with svg() here (so does bench/plot_python.py).

Exit status 0, or 1 when the results hold no figure at all.
"""

import argparse
import json
import math
import os
import re
import sys
from xml.sax.saxutils import escape

N_RE = re.compile(r"(\d+)/(message|msg)\b")
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
          "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"]


def load(path):
    rows = []
    with open(path) as f:
        for ln, text in enumerate(f, 1):
            text = text.strip()
            if not text:
                continue
            try:
                rows.append(json.loads(text))
            except json.JSONDecodeError as e:
                print(f"plot.py: {path}:{ln}: not JSON ({e}); line skipped", file=sys.stderr)
    return rows


def series_of(rows):
    """{label: {n: µs}} for every per-n figure measured in ns."""
    out = {}
    for r in rows:
        if r.get("unit") != "ns":
            continue
        m = N_RE.search(r.get("figure", ""))
        if not m:
            continue
        n = int(m.group(1))
        template = N_RE.sub("n/" + m.group(2), r["figure"])
        cols = [("cuda.core", r.get("cuda_core"))] if "cuda_core" in r else \
            [("raw driver", r.get("raw")), ("cucore", r.get("cucore"))]
        for who, v in cols:
            if v is None or v <= 0:
                continue
            label = f"{who}: {template}"
            out.setdefault(label, {})[n] = v / 1000.0
    return {k: v for k, v in out.items() if len(v) >= 2}


def svg(series, title, path):
    w, h, left, right, top, bottom = 980, 560, 70, 330, 40, 50
    ns = sorted({n for s in series.values() for n in s})
    ys = [v for s in series.values() for v in s.values()]
    if not ns or not ys:
        return False
    x0, x1 = math.log2(min(ns)), math.log2(max(ns)) or 1
    if x1 == x0:
        x1 = x0 + 1
    y0 = math.floor(math.log10(min(ys)))
    y1 = math.ceil(math.log10(max(ys)))
    if y1 == y0:
        y1 = y0 + 1
    pw, ph = w - left - right, h - top - bottom

    def px(n):
        return left + (math.log2(n) - x0) / (x1 - x0) * pw

    def py(v):
        return top + ph - (math.log10(v) - y0) / (y1 - y0) * ph

    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
         f'font-family="sans-serif" font-size="12">',
         f'<rect width="{w}" height="{h}" fill="white"/>',
         f'<text x="{left}" y="22" font-size="15">{escape(title)}</text>']
    for e in range(y0, y1 + 1):
        y = py(10 ** e)
        o.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" '
                 'stroke="#ddd"/>')
        label = f"{10 ** e:g}"
        o.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{label}</text>')
    for n in ns:
        x = px(n)
        o.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + ph}" stroke="#eee"/>')
        o.append(f'<text x="{x:.1f}" y="{top + ph + 18}" text-anchor="middle">{n}</text>')
    o.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" '
             'stroke="#333"/>')
    o.append(f'<text x="{left + pw / 2}" y="{h - 10}" text-anchor="middle">'
             'buffers a message (n)</text>')
    o.append(f'<text transform="translate(18,{top + ph / 2}) rotate(-90)" '
             'text-anchor="middle">µs a buffer (log)</text>')
    for i, (label, pts) in enumerate(sorted(series.items())):
        c = COLORS[i % len(COLORS)]
        dash = ' stroke-dasharray="6,4"' if label.startswith("raw") else \
            (' stroke-dasharray="2,3"' if label.startswith("cuda.core") else "")
        path_d = " ".join(f"{'M' if k == 0 else 'L'}{px(n):.1f},{py(v):.1f}"
                          for k, (n, v) in enumerate(sorted(pts.items())))
        o.append(f'<path d="{path_d}" fill="none" stroke="{c}" stroke-width="2"{dash}/>')
        for n, v in sorted(pts.items()):
            o.append(f'<circle cx="{px(n):.1f}" cy="{py(v):.1f}" r="3" fill="{c}">'
                     f'<title>{escape(label)}, n={n}: {v:.3f} µs</title></circle>')
        ly = top + 10 + 18 * i
        o.append(f'<line x1="{left + pw + 12}" y1="{ly}" x2="{left + pw + 40}" y2="{ly}" '
                 f'stroke="{c}" stroke-width="2"{dash}/>')
        o.append(f'<text x="{left + pw + 46}" y="{ly + 4}">{escape(label)}</text>')
    o.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(o) + "\n")
    return True


def fmt_us(v):
    return "—" if v is None else (f"{v:.2f} µs" if v < 100 else f"{v:.0f} µs")


def ratio(a, b):
    return "—" if a is None or b is None or b == 0 else f"×{a / b:.2f}"


def tables(rows, series, commit):
    def get(label, n):
        return series.get(label, {}).get(n)

    first, again = "n/message", "n/message"
    fs_raw = "raw driver: pool buffers, first send, " + first
    fs_cuc = "cucore: pool buffers, first send, " + first
    ag_raw = "raw driver: pool buffers, again (cached), " + again
    ag_cuc = "cucore: pool buffers, again (cached), " + again
    cc = "cuda.core: pool buffer share, batched " + first
    ns = sorted({n for s in series.values() for n in s})
    out = [f"Pool buffers per buffer, equal n (commit {commit}):", "",
           "| n | raw first send | cucore first send | cucore/raw | cuda.core batched "
           "| cuda.core/cucore | raw again (cached) | cucore again (cached) | cucore/raw |",
           "|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for n in ns:
        r, c, k = get(fs_raw, n), get(fs_cuc, n), get(cc, n)
        ar, ac = get(ag_raw, n), get(ag_cuc, n)
        out.append(f"| {n} | {fmt_us(r)} | {fmt_us(c)} | {ratio(c, r)} | {fmt_us(k)} | "
                   f"{ratio(k, c)} | {fmt_us(ar)} | {fmt_us(ac)} | {ratio(ac, ar)} |")
    out += ["", "Every figure of the run:", "",
            "| bench | figure | raw | measured (its column) | ratio |", "|---|---|--:|--:|--:|"]
    for r in rows:
        unit = r.get("unit", "")
        col = next((k for k in ("cucore", "python", "cuda_core", "torch")
                    if r.get(k) is not None), None)
        val = r.get(col) if col else None
        raw = r.get("raw")
        out.append(f"| {r.get('bench')} | {r.get('figure')} | "
                   f"{'—' if raw is None else f'{raw:.1f} {unit}'} | "
                   f"{'—' if val is None else f'{val:.1f} {unit} ({col})'} | "
                   f"{ratio(val, raw) if raw and val is not None else '—'} |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", help="scripts/bench.sh's output directory, or a .jsonl file")
    ap.add_argument("--svg", help="write the chart here")
    ap.add_argument("--table", help="write the Markdown tables here ('-': stdout)")
    args = ap.parse_args()
    path = args.results
    if os.path.isdir(path):
        path = os.path.join(path, "results.jsonl")
    rows = load(path)
    if not rows:
        print(f"plot.py: no figures in {path}", file=sys.stderr)
        return 1
    commit, driver = "unknown", {r.get("driver") for r in rows}
    machine = os.path.join(os.path.dirname(path), "machine.txt")
    if os.path.exists(machine):
        for text in open(machine):
            if text.startswith("commit:"):
                commit = text.split(":", 1)[1].strip()
    series = series_of(rows)
    if args.svg:
        title = (f"Pool buffers: µs a buffer against buffers a message "
                 f"({'/'.join(sorted(d for d in driver if d))}, commit {commit})")
        if svg(series, title, args.svg):
            print(f"plot.py: {args.svg}: {len(series)} series")
        else:
            print("plot.py: no per-n figures to draw", file=sys.stderr)
    if args.table:
        text = tables(rows, series, commit)
        if args.table == "-":
            sys.stdout.write(text)
        else:
            with open(args.table, "w") as f:
                f.write(text)
            print(f"plot.py: {args.table}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
