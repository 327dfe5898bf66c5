#!/usr/bin/env python3
"""docs/PERFORMANCE.md, generated from bench runs, so that it cannot drift.

    scripts/bench.sh OUT && python3 bench/make_performance.py OUT > docs/PERFORMANCE.md

    make_performance.py [--partial] [--svg FILE | --no-svg] RUN [RUN ...]   the page, on stdout
    make_performance.py [--partial] --readme-snippet RUN [RUN ...]        README's figures, on stdout
    make_performance.py [--partial] --readme FILE RUN [RUN ...]           rewrites FILE's block
    make_performance.py --selftest                                        this script's tests

RUN is a directory scripts/bench.sh filled (results.jsonl and machine.txt)
or a results.jsonl (machine.txt beside it). With several RUNs a cell is
taken from the first RUN that has it, and when cells come from more than
one run each is marked with its run's letter. The chart (--svg, default
docs/perf-buffers.svg of this tree) is written beside the page; the page
links it relative to docs/. Exit status 1, naming what is missing, when a
headline figure is in no RUN, unless --partial (the page then says so).
The standard library only (Debian's /usr/bin/python3; no matplotlib).

The JSON lines (bench/bench_report.h writes the C benches'; bench_python.py,
compare_cuda_core.py and any other bench write the same shape):

    {"bench": NAME, "driver": "cuda"|"sim", "figure": TEXT, "unit": "ns"|"B",
     "note": TEXT, COLUMN: number, ... [, "row": LABEL]}

COLUMN is one of COLUMNS below: "raw" (the raw driver calls, or the least a
hand-written program must do), "cucore" (cucore from C), "python" (cucore's
Python objects), "cuda_core", "torch" (PyTorch's torch.multiprocessing).

How a line reaches the headline table, all of it table-driven:
  1. HEADLINE names it: each row lists (column, bench, figure[, key]); the
     cell is the line's value under key (default: the column). A figure
     starting "re:" is a regular expression. The first source found for a
     column wins, so a column may list fallbacks.
  2. A line carrying "row": LABEL goes to the row of that label, each of its
     COLUMN keys to that column; a row of its own, after HEADLINE's, when
     no row has that label.
  3. A line of a bench that HEADLINE does not name, carrying a "torch" key,
     gets a row of its own (its figure), as in 2.
So a new bench (bench/bench_torch.py) needs no change here: its lines with
a "torch" column (and "python" beside it, where it measures cucore's side)
appear as rows, and its "N/message" figures as chart lines (CHART, 3).
Rows of 2 and 3 are not required; HEADLINE's are (every column but torch).
README lists README_LINES, cells named "{ROW_ID.COLUMN}".
"""

import argparse
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from plot import svg as draw_svg  # noqa: E402

COLUMNS = [("raw", "raw driver"), ("cucore", "cucore C"), ("python", "cucore Python"),
           ("cuda_core", "cuda.core"), ("torch", "PyTorch")]
COLUMN_KEYS = [k for k, _ in COLUMNS]
OPTIONAL_COLUMNS = {"torch"}  # in HEADLINE rows, never required

POOL_NS = (1, 64, 4096)  # the pool and share rows' buffers a message


def _pool_row(n):
    return (f"pool_{n}", f"Pool buffer, first send, {n} a message (per buffer, to the lease end)",
            "pool", [
                ("raw", "bench_pool", f"pool buffers, first send, {n}/message"),
                ("cucore", "bench_pool", f"pool buffers, first send, {n}/message"),
                ("python", "bench_python", f"pipe_buffers, cucore+leases, {n}/message"),
                ("cuda_core", "bench_python", f"pipe_buffers, cuda.core, {n}/message"),
                ("cuda_core", "compare_cuda_core", f"pool buffer share, batched {n}/message"),
            ])


def _share_rows(n):
    fig = f"pool buffers, n={n} (per buffer)"
    return [(f"share_channel_{n}", f"Pool buffers on a channel, {n} a message (exports cached)",
             "share", [("cucore", "bench_share", fig, "raw")]),
            (f"share_attach_{n}", f"Pool buffers detached + attached, {n} a message",
             "share", [("cucore", "bench_share", fig, "cucore")])]


# (row id, label, how-section, [(column, bench, figure[, key]), ...])
HEADLINE = [
    ("device", "Device to the wire and back (C: record; Python: pickle)", "device", [
        ("raw", "bench_device", "device encode+decode"),
        ("cucore", "bench_device", "device encode+decode"),
        ("python", "bench_python", "device_pickle, cucore"),
        ("cuda_core", "bench_python", "device_pickle, cuda.core"),
        ("cuda_core", "compare_cuda_core", "Device pickle round trip (dumps + loads)"),
    ]),
    ("kernel_first", "Kernel, first send (1 MiB PTX, loaded there)", "kernel", [
        ("raw", "bench_kernel", "kernel send first time, 1 MiB PTX"),
        ("cucore", "bench_kernel", "kernel send first time, 1 MiB PTX"),
    ]),
    ("kernel_ref", "Kernel sent again, by reference (1 MiB PTX)", "kernel", [
        ("raw", "bench_kernel", "kernel by reference on a channel, 1 MiB PTX"),
        ("cucore", "bench_kernel", "kernel by reference on a channel, 1 MiB PTX"),
    ]),
] + [_pool_row(n) for n in POOL_NS] + [
    ("vmm", "VMM allocation of 2 chunks, sent and mapped", "vmm", [
        ("raw", "bench_vmm", r"re:vmm share, 2 x \d+ MiB chunks"),
        ("cucore", "bench_vmm", r"re:vmm share, 2 x \d+ MiB chunks"),
    ]),
] + [r for n in POOL_NS for r in _share_rows(n)]

# Chart lines, µs a buffer against n: (label, column, bench, figure with {n}[, key]).
CHART_NS = (1, 4, 16, 64, 256, 1024, 4096)
CHART = [
    ("raw driver (C), first send", "raw", "bench_pool", "pool buffers, first send, {n}/message"),
    ("cucore C, first send", "cucore", "bench_pool", "pool buffers, first send, {n}/message"),
    ("cucore Python, to the lease end", "python", "bench_python",
     "pipe_buffers, cucore+leases, {n}/message"),
    ("cuda.core (Python), to the answer", "cuda_core", "bench_python",
     "pipe_buffers, cuda.core, {n}/message"),
    ("cuda.core (Python), to the answer", "cuda_core", "compare_cuda_core",
     "pool buffer share, batched {n}/message"),
    ("cucore C, detach + attach", "cucore", "bench_share", "pool buffers, n={n} (per buffer)",
     "cucore"),
    ("cucore C, channel (exports cached)", "cucore", "bench_share",
     "pool buffers, n={n} (per buffer)", "raw"),
]
N_IN_FIGURE = re.compile(r"\b(\d+)/message\b")

# README's block: (text with {ROW_ID.COLUMN} cells). A line whose cells are
# not all there is left out (--partial) or is an error.
README_LINES = [
    "a pool buffer to another process, 64 a message: **{pool_64.cucore}** from C (the raw "
    "driver calls: "
    "{pool_64.raw}), **{pool_64.python}** from Python (cuda.core: {pool_64.cuda_core})",
    "one pool buffer a message from Python: **{pool_1.python}** (cuda.core: {pool_1.cuda_core})",
    "a kernel sent again, by reference: **{kernel_ref.cucore}** (its first send, "
    "which the driver loads: {kernel_first.cucore})",
]
README_BEGIN = "<!-- performance: begin (bench/make_performance.py --readme README.md RUN...) -->"
README_END = "<!-- performance: end -->"

# How each figure is measured: one paragraph a how-section, in HEADLINE's order.
HOW = {
    "device": """**Device.** C (`bench_device`): one round creates a message, adds a
device record, encodes it, decodes the bytes, resolves the UUID to the local
device and destroys both messages; 2,000,000 rounds in one process, the mean.
Raw: `cuDeviceGetUuid`, then a `cuDeviceGet` + `cuDeviceGetUuid` scan for the
device with that UUID. Python (`bench_python.py`): `pickle.loads(pickle.dumps(d))`,
the least of 5 × 20,000; cuda.core the same for its `Device(0)`, which
carries the ordinal, not the UUID. Bound: in C the seven public calls and the
record's checks; in Python pickle's own cost for an object of that shape
(`device_pickle, pickle` in the run), which cucore's figure sits just above.""",
    "kernel": """**Kernel** (`bench_kernel`, a 1 MiB PTX image: a small kernel padded with
comments). First send: a receiver with an empty cache decodes the message and
gets the kernel (shape check, `cuLibraryLoadData`, `cuLibraryGetKernel`, the
SHA-256 on a second thread beside the load), `cuKernelGetFunction`, unloads it;
raw: those driver calls; 200 iterations, the mean. By reference: once the
receiver said it holds the image, a send carries the hash and name only and
the receiver's cache answers; raw: hash + name through a socket pair and
`cuLibraryGetKernel` + `cuKernelGetFunction` on a kept library; 200
iterations. Bound: the driver's load (the PTX JIT) the first time; a send, a
receive and their wake-ups by reference.""",
    "pool": """**Pool buffers.** C (`bench_pool`): an importer process (fork + exec, its GPUs
the exporter's reversed by UUID) holds the pool; n fresh 4 KiB buffers,
allocated before the clock, each `cuc_msg_add_buffer` (the driver's
`cuMemPoolExportPointer`), one `cuc_channel_send`; the importer's
`cuc_msg_get_buffer` each (`cuMemPoolImportPointer`), its frees
(`cuc_buffer_unref_many_async`) and release; the clock stops when the
exporter's `cuc_pool_lease_wait` has seen every lease end. 16384 / n rounds
(at least 3) after a tenth as many untimed; the mean per buffer. Raw: the same
driver calls, the 64-byte export data over a `SOCK_SEQPACKET` pair and a
one-byte acknowledgement. Python (`bench_python.py`, `cucore+leases`): the n
buffers as one list through a `multiprocessing` Pipe to a spawned child that
unpickles, closes and answers; the clock stops at the lease end, as C's;
rounds as C's from 64 on, at most 1024 below. cuda.core: an IPC-enabled
`DeviceMemoryResource`'s buffers the same way, the clock stopping at the
child's answer (it has no lease end; `compare_cuda_core.py`'s figure, used
where the Python bench did not run, stops at the import's acknowledgement).
Bound: from 64 a message, the driver's per-pointer export; at 1, a round
trip's wake-ups.""",
    "vmm": """**VMM** (`bench_vmm`): an allocation of 2 chunks of the owner's
granularity (2 MiB on an H100 or H200), made once; a round sends it
(`cuc_msg_add_vmm`: an fd a chunk), the importer maps it (import, reserve, map,
access for the owner found by UUID) and unmaps it, and stops when the
exporter's `cuc_vmm_lease_wait` returns; raw: the same driver calls and the
fds by hand; 2000 rounds, the mean a round. Bound: the driver's export,
import, map and unmap of each chunk.""",
    "share": """**Share point** (`bench_share`, both columns cucore from C): n 4 KiB buffers,
their exports cached and the pool imported (a warm-up round of each), to an
importer process. Channel: the message of n buffers by `cuc_channel_send`.
Detached: the same message as bytes (`cuc_share_detach`) through a pipe,
`cuc_share_attach`ed by the importer, its fds and leases from the exporter's
share point, each pointer once the claim is confirmed. Both stop when the
importer has dropped the buffers and answered and the exporter's lease wait
has returned; max(3, 16384 / n) rounds of each, alternated; the mean per
buffer. What differs between the two is the attach's exchange with the
share point (the fds, the claim and its confirm), once a message; the
imports and the releases are the same work.""",
}
HOW_OTHER = """**{bench}** (rows from its lines, `bench/{bench}.*` says what it
times): {notes}"""


# ---------------------------------------------------------------- reading --

class Run:
    """One RUN: its lines, its machine.txt, its letter."""

    def __init__(self, path, letter):
        self.letter = letter
        if os.path.isdir(path):
            self.jsonl, self.dir = os.path.join(path, "results.jsonl"), path
        else:
            self.jsonl, self.dir = path, os.path.dirname(path) or "."
        self.lines = load_lines(self.jsonl)
        self.meta = load_machine(os.path.join(self.dir, "machine.txt"))
        self.sim = (any(r.get("driver") == "sim" for r in self.lines)
                    or "sim" in self.meta.get("CUCORE_DRIVER", ""))

    def describe(self):
        m = self.meta
        gpu = "the simulator (no GPU)" if self.sim else m.get("gpu", "GPU not named")
        bits = [gpu]
        for key, text in (("driver", "driver {}"), ("commit", "commit `{}`"), ("date", "{}")):
            if m.get(key):
                bits.append(text.format(m[key]))
        if m.get("source"):
            bits.append(m["source"])
        return ", ".join(bits)

    def short(self):
        gpu = "simulator" if self.sim else re.sub(r"^NVIDIA ", "", self.meta.get("gpu", "GPU"))
        return f"{gpu.split()[0] if gpu else 'GPU'}, {self.meta.get('commit', 'commit ?')}"


def load_lines(path):
    rows = []
    with open(path) as f:
        for ln, text in enumerate(f, 1):
            text = text.strip()
            if not text:
                continue
            try:
                row = json.loads(text)
            except json.JSONDecodeError as e:
                raise SystemExit(f"make_performance.py: {path}:{ln}: not JSON ({e})")
            if isinstance(row, dict) and "bench" in row and "figure" in row:
                rows.append(row)
    return rows


def load_machine(path):
    """machine.txt (scripts/bench.sh): "key: value" lines, CUCORE_DRIVER=...,
    and nvidia-smi's "name, uuid, driver_version" line."""
    meta = {}
    if not os.path.exists(path):
        return meta
    with open(path) as f:
        for text in f:
            text = text.strip()
            if text.startswith("CUCORE_DRIVER="):
                meta["CUCORE_DRIVER"] = text.split("=", 1)[1]
            elif re.match(r"^[a-z ]+:", text):
                k, v = text.split(":", 1)
                meta.setdefault(k.strip(), v.strip())
            elif text.count(",") == 2 and "gpu" not in meta:
                name, _uuid, drv = (x.strip() for x in text.split(","))
                meta["gpu"] = name
                meta.setdefault("driver", drv)
    return meta


def match(figure, pattern):
    if pattern.startswith("re:"):
        return re.fullmatch(pattern[3:], figure) is not None
    return figure == pattern


def find(runs, bench, pattern, key):
    """(value, run, line) of the first run with the figure and key, or None."""
    for run in runs:
        for line in run.lines:
            if line["bench"] == bench and match(line["figure"], pattern) \
                    and isinstance(line.get(key), (int, float)):
                return line[key], run, line
    return None


# ---------------------------------------------------------------- the rows --

class Cell:
    def __init__(self, value, unit, run, line):
        self.value, self.unit, self.run, self.line = value, unit, run, line


def build_rows(runs):
    """[(row id, label, how, {column: Cell}, [missing (column, sources wanted, label)])]"""
    rows, named = [], {src[1] for _, _, _, srcs in HEADLINE for src in srcs}
    for rid, label, how, sources in HEADLINE:
        cells, wanted = {}, {}
        for src in sources:
            col, bench, fig = src[:3]
            key = src[3] if len(src) > 3 else col
            alt = f"{bench} '{fig}'"
            wanted[col] = wanted[col] + " or " + alt if col in wanted else alt
            if col in cells:
                continue
            got = find(runs, bench, fig, key)
            if got:
                cells[col] = Cell(got[0], got[2].get("unit", "ns"), got[1], got[2])
        missing = [(c, wanted[c], label) for c in wanted
                   if c not in cells and c not in OPTIONAL_COLUMNS]
        rows.append([rid, label, how, cells, missing])
    by_label = {r[1]: r for r in rows}
    for run in runs:
        for line in run.lines:
            label = line.get("row")
            if not label and (line["bench"] in named or "torch" not in line):
                continue
            label = label or line["figure"]
            row = by_label.get(label)
            if row is None:
                row = by_label[label] = [None, label, "bench:" + line["bench"], {}, []]
                rows.append(row)
            for col in COLUMN_KEYS:
                if isinstance(line.get(col), (int, float)) and col not in row[3]:
                    row[3][col] = Cell(line[col], line.get("unit", "ns"), run, line)
    return rows


# -------------------------------------------------------------- formatting --

def fmt(value, unit):
    if unit != "ns":
        return f"{value:.0f} {unit}" if value >= 100 else f"{value:#.3g} {unit}"
    for scale, name in ((1e9, "s"), (1e6, "ms"), (1e3, "µs")):
        if value >= scale:
            v = value / scale
            return f"{v:#.3g} {name}" if v < 100 else f"{v:.0f} {name}"
    return f"{value:#.3g} ns" if value < 100 else f"{value:.0f} ns"


def cell_text(cells, col, marked):
    c = cells.get(col)
    if c is None:
        return "—"
    text = fmt(c.value, c.unit)
    raw = cells.get("raw")
    if col == "cucore" and raw and raw.run is c.run and raw.value > 0:
        text += f" (×{c.value / raw.value:.2f})"
    if marked:
        text += f" <sup>{c.run.letter}</sup>"
    return text


def used_runs(rows):
    return {c.run.letter: c.run for row in rows for c in row[3].values()}


def headline_table(rows, marked):
    """The rows that have a cell (an empty one is named by the banner)."""
    out = ["| figure | " + " | ".join(name for _, name in COLUMNS) + " |",
           "|---|" + "--:|" * len(COLUMNS)]
    for _rid, label, _how, cells, _miss in rows:
        if not cells:
            continue
        out.append(f"| {label} | " + " | ".join(cell_text(cells, k, marked)
                                                for k in COLUMN_KEYS) + " |")
    return out


def chart_series(runs):
    """{label: {n: µs}} and the runs the points came from."""
    series, used = {}, {}
    for label, col, bench, fig, *key in CHART:
        if label in series:
            continue  # an earlier source of that line had it
        pts = {}
        for n in CHART_NS:
            got = find(runs, bench, fig.format(n=n), key[0] if key else col)
            if got:
                pts[n] = got[0] / 1000.0
                used[got[1].letter] = got[1]
        if len(pts) >= 2:
            series[label] = pts
    extra = {}
    named = {c[2] for c in CHART}
    for run in runs:
        for line in run.lines:
            m = N_IN_FIGURE.search(line["figure"])
            if not m or line["bench"] in named or line.get("unit", "ns") != "ns":
                continue
            for col in ("torch", "python"):
                if isinstance(line.get(col), (int, float)) and ("torch" in line):
                    lab = f"{dict(COLUMNS)[col]}: {N_IN_FIGURE.sub('n/message', line['figure'])}"
                    extra.setdefault(lab, {}).setdefault(int(m.group(1)), line[col] / 1000.0)
                    used[run.letter] = run
    series.update({k: v for k, v in extra.items() if len(v) >= 2})
    return series, used


def how_sections(rows):
    out, seen = [], set()
    for _rid, _label, how, cells, _miss in rows:
        if how in seen or not cells:
            continue
        seen.add(how)
        if how in HOW:
            out += [HOW[how], ""]
        elif how.startswith("bench:"):
            bench = how[6:]
            notes = sorted({c.line.get("note", "") for r in rows if r[2] == how
                            for c in r[3].values()} - {""})
            out += [HOW_OTHER.format(bench=bench, notes="; ".join(notes) or "no notes."), ""]
    return out


def shown_path(path):
    """PATH relative to this tree when it is in it, else absolute."""
    root = os.path.abspath(os.path.join(HERE, ".."))
    full = os.path.abspath(path)
    return os.path.relpath(full, root) if full.startswith(root + os.sep) else full


def page(runs, rows, svg_link, missing, command):
    used = used_runs(rows)
    marked = len(used) > 1
    sources = " ".join(shown_path(r.jsonl) for r in runs)
    out = ["<!-- Generated by bench/make_performance.py from " + sources +
           "; do not edit: run the command under \"Reproduce\" -->", "",
           "# Performance", ""]
    if any(r.sim for r in used.values()):
        out += ["> **THESE ARE THE SIMULATOR'S NUMBERS, NOT A GPU'S.** The simulated",
                "> driver (`CUCORE_DRIVER=sim`) checks that the benches run; its figures say",
                "> nothing about a GPU. On a GPU machine: `scripts/bench.sh OUT && python3",
                "> bench/make_performance.py OUT > docs/PERFORMANCE.md`.", ""]
    if any(r.meta.get("source") for r in used.values()):
        out += ["> Reconstructed: these figures were copied from dated runs' notes",
                "> (docs/runs/) into results.jsonl form, not written by one run of",
                "> `scripts/bench.sh`; the next GPU run's page replaces them.", ""]
    if missing:
        out += ["> Not in " + ("these runs" if len(runs) > 1 else "this run") +
                " (—): " + "; ".join(sorted({w.replace("'", "`") for _c, w, _r in missing})) + ".", ""]
    out += ["Per buffer, per object or per round: the raw driver calls doing the same",
            "work beside cucore (from C and from Python), cuda.core 1.2 and PyTorch",
            "where a bench measures them (×: cucore C / raw). Figures move between",
            "starts of one machine by up to ×1.6: compare within a run (where cells",
            "come from several runs, a letter names each cell's). Dated runs, and",
            "what each showed: [runs/](runs/README.md).", ""]
    if marked:
        out += ["Runs (each cell's letter):", ""]
        out += [f"- <sup>{k}</sup> {used[k].describe()}" for k in sorted(used)]
    elif used:
        out += ["Run: " + next(iter(used.values())).describe() + "."]
    out += ["", "## Headline", ""] + headline_table(rows, marked) + [""]
    if svg_link:
        out += ["## µs a buffer against buffers a message", "",
                f"![µs a buffer against n, log-log: raw driver, cucore C and Python, "
                f"cuda.core]({svg_link})", ""]
    out += ["## How each figure is measured", ""] + how_sections(rows)
    out += ["## Reproduce", "",
            "    scripts/bench.sh OUT && python3 bench/make_performance.py OUT > docs/PERFORMANCE.md",
            "",
            "on the GPU machine: `scripts/bench.sh` builds (Release) and runs every",
            "`bench/bench_*.c`, the Python benches when the extension builds for its",
            "interpreter (`CUCORE_PYTHON`, the one with cuda.core and PyTorch),",
            "`bench/compare_cuda_core.py` and `bench/bench_torch.py` where they can",
            "run; OUT gets each bench's output, `results.jsonl` (every figure of the",
            "run, more than this page shows) and `machine.txt`. The generator also",
            "writes the chart (`--svg`) and refuses a run that lacks a headline",
            "figure unless `--partial`; `--readme README.md` refreshes README's",
            "figures. `CUCORE_DRIVER=sim CUCORE_BENCH_QUICK=1 scripts/bench.sh OUT`",
            "runs everything on the simulator (`scripts/bench_check.sh` checks that",
            "and this script). This page was made by:", "", "    " + command]
    return "\n".join(out) + "\n"


def readme_block(rows, partial):
    cells = {row[0]: row[3] for row in rows if row[0]}
    out, missing = [], []
    for text in README_LINES:
        refs = re.findall(r"\{(\w+)\.(\w+)\}", text)
        got = [cells.get(rid, {}).get(col) for rid, col in refs]
        if not all(got):
            missing.append(text)
            continue
        runs = sorted({c.run.letter: c.run for c in got}.items())
        line = re.sub(r"\{(\w+)\.(\w+)\}",
                      lambda m: fmt(cells[m.group(1)][m.group(2)].value,
                                    cells[m.group(1)][m.group(2)].unit), text)
        out.append(f"- {line} ({'; '.join(r.short() for _, r in runs)})")
    if missing and not partial:
        return None, missing
    block = [README_BEGIN,
             "Measured on a GPU, each beside what does the same work (how, and every other",
             "figure: [docs/PERFORMANCE.md](docs/PERFORMANCE.md); `python3",
             "bench/make_performance.py --readme README.md OUT` rewrites these lines from",
             "a run of `scripts/bench.sh OUT`):", ""] + out + ["", README_END]
    return "\n".join(block) + "\n", missing


def rewrite_readme(path, block):
    with open(path) as f:
        text = f.read()
    begin = text.find("<!-- performance: begin")
    end = text.find(README_END)
    if begin < 0 or end < begin:
        raise SystemExit(f"make_performance.py: {path} has no '{README_BEGIN[:24]}...' block")
    end += len(README_END) + 1
    with open(path, "w") as f:
        f.write(text[:begin] + block + text[end:])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="*", help="scripts/bench.sh output directories or results.jsonl")
    ap.add_argument("--partial", action="store_true",
                    help="write the page even when headline figures are missing")
    ap.add_argument("--svg", default=os.path.join(HERE, "..", "docs", "perf-buffers.svg"),
                    help="the chart (default: docs/perf-buffers.svg)")
    ap.add_argument("--no-svg", action="store_true", help="no chart")
    ap.add_argument("--page-dir", default=os.path.join(HERE, "..", "docs"),
                    help="where the page will live, for the chart's link (default: docs/)")
    ap.add_argument("--readme-snippet", action="store_true", help="print README's block")
    ap.add_argument("--readme", metavar="FILE", help="rewrite FILE's performance block")
    ap.add_argument("--selftest", action="store_true", help="run this script's tests")
    a = ap.parse_args(argv)
    if a.selftest:
        return selftest()
    if not a.runs:
        ap.error("name at least one RUN (a scripts/bench.sh output directory)")
    runs = [Run(p, chr(ord("a") + i)) for i, p in enumerate(a.runs)]
    if not any(r.lines for r in runs):
        print("make_performance.py: no figures in " + ", ".join(r.jsonl for r in runs),
              file=sys.stderr)
        return 1
    rows = build_rows(runs)
    missing = [m for row in rows for m in row[4]]
    if missing and not a.partial:
        print("make_performance.py: the headline needs figures these runs lack "
              "(--partial writes the page without them):", file=sys.stderr)
        for col, wanted, label in missing:
            print(f"  {label}, {dict(COLUMNS)[col]}: {wanted}", file=sys.stderr)
        return 1
    if a.readme_snippet or a.readme:
        block, lacking = readme_block(rows, a.partial)
        if block is None:
            print("make_performance.py: README lines lack cells: " + " | ".join(lacking),
                  file=sys.stderr)
            return 1
        if a.readme:
            rewrite_readme(a.readme, block)
        else:
            sys.stdout.write(block)
        return 0
    link = None
    if not a.no_svg:
        series, used = chart_series(runs)
        if series:
            who = "; ".join(f"{k}: {used[k].short()}" if len(used) > 1 else used[k].short()
                            for k in sorted(used))
            draw_svg(series, f"Pool buffers: µs a buffer against buffers a message ({who})",
                     a.svg)
            link = os.path.relpath(os.path.abspath(a.svg), os.path.abspath(a.page_dir))
    command = " ".join(["python3 bench/make_performance.py"] + (["--partial"] if a.partial else [])
                       + [shown_path(p) for p in a.runs]) + " > docs/PERFORMANCE.md"
    sys.stdout.write(page(runs, rows, link, missing, command))
    return 0


# ------------------------------------------------------------------ tests --

def selftest():
    import contextlib
    import io
    import tempfile
    import unittest
    import xml.etree.ElementTree as ET

    def full_run(d, extra=(), machine="commit: abc1234\nNVIDIA H100 80GB HBM3, GPU-1, 580.1\n",
                 drop=None, driver="cuda"):
        os.makedirs(d, exist_ok=True)
        lines = []
        for _rid, _label, _how, sources in HEADLINE:
            for col, bench, fig, *key in sources:
                fig = fig[3:].replace(r"\d+", "2") if fig.startswith("re:") else fig
                if (bench, fig) == drop:
                    continue
                lines.append({"bench": bench, "driver": driver, "figure": fig, "unit": "ns",
                              (key[0] if key else col): 1000.0 + len(lines), "note": "n"})
        for n in CHART_NS:
            lines.append({"bench": "bench_pool", "driver": driver, "unit": "ns",
                          "figure": f"pool buffers, first send, {n}/message",
                          "raw": 2000.0, "cucore": 2100.0, "note": ""})
        lines += list(extra)
        with open(os.path.join(d, "results.jsonl"), "w") as f:
            f.write("\n".join(json.dumps(x) for x in lines) + "\n")
        with open(os.path.join(d, "machine.txt"), "w") as f:
            f.write(machine)

    def run(*argv):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(list(argv))
        return rc, out.getvalue(), err.getvalue()

    class T(unittest.TestCase):
        def setUp(self):
            self.tmp = tempfile.TemporaryDirectory()
            self.d = self.tmp.name
            self.svg = os.path.join(self.d, "c.svg")

        def tearDown(self):
            self.tmp.cleanup()

        def test_full_run_gives_every_row_and_a_chart(self):
            full_run(self.d + "/r")
            rc, out, err = run(self.d + "/r", "--svg", self.svg)
            self.assertEqual(rc, 0, err)
            for _rid, label, _how, _src in HEADLINE:
                self.assertIn(f"| {label} |", out)
            self.assertNotIn("SIMULATOR", out)
            self.assertIn("commit `abc1234`", out)
            self.assertIn("H100 80GB HBM3", out)
            self.assertLessEqual(out.count("\n"), 200)
            self.assertRegex(out, r"\| \d+(\.\d+)? µs \(×\d\.\d\d\) \|")  # cucore / raw
            ET.parse(self.svg)

        def test_missing_figure_is_refused_by_name(self):
            full_run(self.d + "/r", drop=("bench_share", "pool buffers, n=64 (per buffer)"))
            rc, out, err = run(self.d + "/r", "--no-svg")
            self.assertEqual(rc, 1)
            self.assertIn("Pool buffers detached + attached, 64 a message, cucore C: "
                          "bench_share 'pool buffers, n=64 (per buffer)'", err)
            self.assertEqual(out, "")
            rc, out, err = run(self.d + "/r", "--no-svg", "--partial")
            self.assertEqual(rc, 0)
            self.assertIn("Not in this run", out)

        def test_torch_lines_appear_without_a_table_entry(self):
            torch = [{"bench": "bench_torch", "driver": "cuda", "unit": "ns",
                      "figure": f"tensors, {n}/message", "torch": 5e4 + n, "python": 4e4,
                      "note": "torch.multiprocessing"} for n in (1, 64)]
            torch.append({"bench": "bench_torch", "driver": "cuda", "unit": "ns",
                          "figure": "x", "row": HEADLINE[3][1], "torch": 7e4})
            full_run(self.d + "/r", extra=torch)
            rc, out, err = run(self.d + "/r", "--svg", self.svg)
            self.assertEqual(rc, 0, err)
            self.assertRegex(out, r"\| tensors, 64/message \| — \| — \| 40.0 µs \| — \| 50.1 µs \|")
            self.assertRegex(out, r"\| " + re.escape(HEADLINE[3][1]) + r" \|.*\| 70.0 µs \|")
            self.assertIn("torch.multiprocessing", out)
            self.assertIn("PyTorch: tensors, n/message", open(self.svg).read())

        def test_sim_banner_and_two_runs_marked(self):
            full_run(self.d + "/s", driver="sim", machine="commit: def5678\nCUCORE_DRIVER=sim\n",
                     drop=("bench_vmm", "vmm share, 2 x 2 MiB chunks"))
            full_run(self.d + "/g")
            rc, out, err = run(self.d + "/s", self.d + "/g", "--no-svg")
            self.assertEqual(rc, 0, err)
            self.assertIn("SIMULATOR'S NUMBERS", out)
            self.assertIn("<sup>b</sup>", out)  # the VMM row from the second run
            self.assertIn("<sup>a</sup>", out)

        def test_readme_block(self):
            full_run(self.d + "/r")
            readme = os.path.join(self.d, "README.md")
            with open(readme, "w") as f:
                f.write("top\n" + README_BEGIN + "\nold\n" + README_END + "\nrest\n")
            rc, _out, err = run(self.d + "/r", "--readme", readme)
            self.assertEqual(rc, 0, err)
            text = open(readme).read()
            self.assertTrue(text.startswith("top\n" + README_BEGIN))
            self.assertTrue(text.endswith(README_END + "\nrest\n"))
            self.assertNotIn("old", text)
            self.assertEqual(text.count("\n- "), len(README_LINES))
            self.assertIn("(H100, abc1234)", text)

        def test_formats(self):
            self.assertEqual(fmt(45.3, "ns"), "45.3 ns")
            self.assertEqual(fmt(15420, "ns"), "15.4 µs")
            self.assertEqual(fmt(1895, "ns"), "1.90 µs")
            self.assertEqual(fmt(164890, "ns"), "165 µs")
            self.assertEqual(fmt(1.918e6, "ns"), "1.92 ms")
            self.assertEqual(fmt(112, "B"), "112 B")

    result = unittest.TextTestRunner(verbosity=2).run(
        unittest.defaultTestLoader.loadTestsFromTestCase(T))
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
