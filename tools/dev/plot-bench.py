#!/usr/bin/env python3
"""plot-bench.py [options] OUTDIR BENCH.json [...]
plot-bench.py [--time T] --from-results bench/RESULTS.md OUTDIR

sy-bench's measured figures (alltoall, attn, moe-ll) as one SVG per run in OUTDIR, for bench/RESULTS.md's "Plots"
section (bench/plots/). A run is either a --json file of sy-bench, or (--from-results) a table of RESULTS.md:

  alltoall  time against bytes per rank (log-log) and bus bandwidth against bytes per rank, ours beside NCCL
  attn      the same against tokens per rank, one line per plan (random, even) where the run names one; the
            direct-store reference as a horizontal line in the bandwidth panel
  moe-ll    dispatch and combine time against tokens per rank (log-log), one line per wire and mode

NCCL's lines are drawn where the run has them (not with --no-nccl, not on the host backend); the bandwidth panel
only where a bus bandwidth was measured (none at world 1). Times are kernel times (CUPTI) where every line of the
figure has them, else CUDA-event times (--time picks). Files are named ENTRY_DEVICE.svg (alltoall_2xH200.svg),
ENTRY_wWORLD.svg without a device. The title names the entry, device, world size, backend, commit, date and
version where known.

From JSON: --device / --commit, else the JSON header's "device", "commit", "date" and "version" keys where present
(sy-bench writes "entry", "version" and "rows"; world and backend come from the rows).

From RESULTS.md: every "### ENTRY, DEVICE" section (DEVICE as "2 × H200") with a table, as tools/dev/results-table.py
writes it (or with the 2026-11-22 tables' column names: "ours time_us", sizes as "64 KiB"). The table's columns are
read back into the rows the JSON had: ours' and NCCL's µs (event), kernel and busbw; moe-ll's disp/comb µs and
kernel and NCCL's; columns drawn nowhere (host µs, graph, #wrong, speedup, DS..CR) are skipped. "-" is not measured,
and a column the table lacks (kernel time before 16b4ca2, attn's plan) is drawn nowhere: a figure shows only what
the table holds. The date and commit come from the section's line "`... sy-bench ...` (DATE, COMMIT)", the world from
its `syrun -n N` (or --world), the backend from --backend there, else cuda where the table has NCCL figures (sy-bench
measures NCCL on the cuda backend only). attn's direct-store reference is drawn where the section's text states it,
or its "## DEVICE" text does for the same commit. A section with no table ("Not yet measured") draws nothing and is
named on stderr; a table that cannot be read is named with the reason, and the exit status is 1.

options:
  --device NAME   the machine, e.g. 2xH200 (title and file name; JSON only)
  --commit REV    the commit the run measured (title; JSON only)
  --time auto|kernel|event   which time to plot (default auto)
  --from-results FILE        draw the tables of FILE (bench/RESULTS.md) instead of JSON files
  --format svg|png           png to look at a figure where no SVG viewer is at hand (default svg)
"""
import json
import os
import re
import sys

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
except ImportError:
    sys.stderr.write("plot-bench.py: needs matplotlib, which is not installed here: python3 -m pip install matplotlib\n")
    sys.exit(2)

OURS, NCCL = "tab:blue", "tab:orange"


def val(v):
    """A measured value, or None where sy-bench wrote null or 0 (not measured)."""
    return v if isinstance(v, (int, float)) and v > 0 else None


def pick_time(series, mode):
    """series: list of (event values, kernel values); returns (basis name, index 0 or 1)."""
    if mode == "event":
        return "event", 0
    have_kernel = all(all(v is not None for v in s[1]) for s in series if s[0])
    if mode == "kernel" and not have_kernel:
        raise ValueError("--time kernel, but some values have no kernel time (no CUPTI in that run)")
    return ("kernel", 1) if have_kernel else ("event", 0)


def size_label(b, _pos=None):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift:
            v = b / (1 << shift)
            return f"{v:g} {unit}"
    return f"{b:g} B"


def log_axes(ax, xlabel, ylabel, bytes_x=False):
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if bytes_x:
        ax.xaxis.set_major_formatter(FuncFormatter(size_label))
    else:
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _p: f"{x:g}"))
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _p: f"{y:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.grid(True, which="major", alpha=0.3)
    for label in ax.get_xticklabels():
        label.set_rotation(45)
        label.set_horizontalalignment("right")


def plot_line(ax, xs, ys, **kw):
    pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
    if pts:
        ax.plot([p[0] for p in pts], [p[1] for p in pts], **kw)
        return True
    return False


def time_axis_label(basis, backend):
    if basis == "kernel":
        return "time per call (µs, kernel time: CUPTI)"
    return "time per call (µs, host clock)" if backend == "host" else "time per call (µs, CUDA events)"


def nccl_present(n, key="time_us"):
    return not n.get("absent") and val(n.get(key)) is not None


def draw_alltoall(rows, time_mode):
    xs = [r["bytes_per_rank"] for r in rows]
    ours = ([val(r["ours"]["time_us"]) for r in rows], [val(r["ours"].get("kernel_us")) for r in rows])
    has_nccl = any(nccl_present(r["nccl"]) for r in rows)
    nccl = ([val(r["nccl"]["time_us"]) if nccl_present(r["nccl"]) else None for r in rows],
            [val(r["nccl"].get("kernel_us")) if nccl_present(r["nccl"]) else None for r in rows])
    basis, i = pick_time([ours, nccl] if has_nccl else [ours], time_mode)
    bw = any(val(r["ours"].get("busbw_GBs")) for r in rows)
    fig, axes = plt.subplots(1, 2 if bw else 1, figsize=(12 if bw else 6.5, 4.8), squeeze=False)
    ax = axes[0][0]
    plot_line(ax, xs, ours[i], color=OURS, marker="o", label="switchyard sy_alltoall")
    if has_nccl:
        plot_line(ax, xs, nccl[i], color=NCCL, marker="s", linestyle="--", label="NCCL send/recv")
    log_axes(ax, "bytes per rank", time_axis_label(basis, rows[0].get("backend")), bytes_x=True)
    ax.legend()
    if bw:
        ax = axes[0][1]
        plot_line(ax, xs, [val(r["ours"].get("busbw_GBs")) for r in rows], color=OURS, marker="o", label="switchyard")
        if has_nccl:
            plot_line(ax, xs, [val(r["nccl"].get("busbw_GBs")) if nccl_present(r["nccl"]) else None for r in rows],
                      color=NCCL, marker="s", linestyle="--", label="NCCL")
        log_axes(ax, "bytes per rank", "bus bandwidth (GB/s, event time)", bytes_x=True)
        ax.set_yscale("linear")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _p: f"{y:g}"))
        ax.legend()
    return fig, basis


def draw_attn(rows, time_mode):
    plans = sorted({r.get("plan") for r in rows}, key=lambda p: (p != "random", p or ""))
    marks = {"random": "o", "even": "^"}
    by_plan = {p: [r for r in rows if r.get("plan") == p] for p in plans}
    has_nccl = any(nccl_present(r["nccl"]) for r in rows)
    series = []
    for p in plans:
        rs = by_plan[p]
        series.append(([val(r["ours"]["time_us"]) for r in rs], [val(r["ours"].get("kernel_us")) for r in rs]))
        if has_nccl:
            series.append(([val(r["nccl"]["time_us"]) for r in rs], [val(r["nccl"].get("kernel_us")) for r in rs]))
    basis, i = pick_time(series, time_mode)
    bw = any(val(r["ours"].get("busbw_GBs")) for r in rows)
    fig, axes = plt.subplots(1, 2 if bw else 1, figsize=(12 if bw else 6.5, 4.8), squeeze=False)
    ax = axes[0][0]
    for p in plans:
        rs = by_plan[p]
        xs = [r["tokens_per_rank"] for r in rs]
        m = marks.get(p, "o")
        plan = f", {p} plan" if p else ""
        plot_line(ax, xs, [val(r["ours"]["kernel_us" if i else "time_us"]) for r in rs], color=OURS, marker=m,
                  label=f"switchyard{plan}")
        if has_nccl:
            plot_line(ax, xs, [val(r["nccl"]["kernel_us" if i else "time_us"]) for r in rs], color=NCCL, marker=m,
                      linestyle="--", label=f"NCCL{plan}")
    log_axes(ax, "tokens per rank", time_axis_label(basis, rows[0].get("backend")))
    ax.legend(fontsize="small")
    if bw:
        ax = axes[0][1]
        for p in plans:
            rs = by_plan[p]
            xs = [r["tokens_per_rank"] for r in rs]
            m = marks.get(p, "o")
            plan = f", {p}" if p else ""
            plot_line(ax, xs, [val(r["ours"].get("busbw_GBs")) for r in rs], color=OURS, marker=m,
                      label=f"switchyard{plan}")
            if has_nccl:
                plot_line(ax, xs, [val(r["nccl"].get("busbw_GBs")) for r in rs], color=NCCL, marker=m,
                          linestyle="--", label=f"NCCL{plan}")
        refs = sorted(v for v in (val(r.get("store_reference_GBs")) for r in rows) if v)
        if refs:
            ref = refs[len(refs) // 2]
            ax.axhline(ref, color="gray", linestyle=":", label=f"direct-store reference {ref:.1f} GB/s")
        label = rows[0].get("busbw_label", "bus bandwidth (GB/s: busiest link end / event time)")
        log_axes(ax, "tokens per rank", label)
        ax.set_yscale("linear")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _p: f"{y:g}"))
        ax.legend(fontsize="small")
    return fig, basis


def draw_moe(rows, time_mode):
    rows = [r for r in rows if r.get("supported", True)]
    combos = []
    for r in rows:
        if (r["wire"], r["mode"]) not in combos:
            combos.append((r["wire"], r["mode"]))
    has_nccl = any(not r["nccl"].get("absent") for r in rows)
    series = []
    for part in ("dispatch", "combine"):
        series.append(([val(r[part]["time_us"]) for r in rows], [val(r[part].get("kernel_us")) for r in rows]))
        if has_nccl:
            series.append(([val(r["nccl"].get(f"{part}_us")) for r in rows],
                           [val(r["nccl"].get(f"{part}_kernel_us")) for r in rows]))
    basis, i = pick_time(series, time_mode)
    colors = plt.get_cmap("tab10").colors
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), squeeze=False)
    for ax, part in zip(axes[0], ("dispatch", "combine")):
        for c, (wire, mode) in enumerate(combos):
            rs = [r for r in rows if (r["wire"], r["mode"]) == (wire, mode)]
            xs = [r["tokens_per_rank"] for r in rs]
            color = colors[c % len(colors)]
            plot_line(ax, xs, [val(r[part].get("kernel_us" if i else "time_us")) for r in rs], color=color, marker="o",
                      label=f"switchyard {wire} {mode}")
            if has_nccl:
                key = f"{part}_kernel_us" if i else f"{part}_us"
                plot_line(ax, xs, [None if r["nccl"].get("absent") else val(r["nccl"].get(key)) for r in rs],
                          color=color, marker="x", linestyle="--", label=f"NCCL {wire} {mode}")
        log_axes(ax, "tokens per rank", time_axis_label(basis, rows[0].get("backend")))
        ax.set_title(part, fontsize="medium")
        ax.legend(fontsize="x-small")
    return fig, basis


DRAW = {"alltoall": draw_alltoall, "attn": draw_attn, "moe-ll": draw_moe}


def slug(s):
    return re.sub(r"[^A-Za-z0-9.+-]+", "_", s.replace("×", "x").replace(" ", "")).strip("_")


# --from-results: results-table.py's columns (and the 2026-11-22 tables' older names) back into rows as sy-bench's JSON
# has them. Each key: (JSON path, the column names it may have). Columns not listed (host µs, graph, #wrong, speedup,
# halves, ...) are not drawn.
COLUMNS = {
    "alltoall": {
        "bytes_per_rank": ["bytes/rank"],
        "ours.time_us": ["ours µs", "ours time_us"],
        "ours.kernel_us": ["ours kernel"],
        "ours.busbw_GBs": ["busbw GB/s", "ours busbw GB/s"],
        "nccl.time_us": ["NCCL µs", "NCCL time_us"],
        "nccl.kernel_us": ["NCCL kernel"],
        "nccl.busbw_GBs": ["NCCL busbw", "NCCL busbw GB/s"],
    },
    "attn": {
        "tokens_per_rank": ["tokens/rank"],
        "plan": ["plan"],
        "ours.time_us": ["ours µs", "ours time_us"],
        "ours.kernel_us": ["ours kernel"],
        "ours.busbw_GBs": ["busbw GB/s"],
        "nccl.time_us": ["NCCL µs", "NCCL time_us"],
        "nccl.kernel_us": ["NCCL kernel"],
        "nccl.busbw_GBs": ["NCCL busbw"],
    },
    "moe-ll": {
        "tokens_per_rank": ["tokens"],
        "wire": ["wire"],
        "mode": ["mode"],
        "dispatch.time_us": ["disp µs"],
        "dispatch.kernel_us": ["disp kernel"],
        "combine.time_us": ["comb µs"],
        "combine.kernel_us": ["comb kernel"],
        "nccl.dispatch_us": ["NCCL disp"],
        "nccl.dispatch_kernel_us": ["NCCL disp kernel"],
        "nccl.combine_us": ["NCCL comb"],
        "nccl.combine_kernel_us": ["NCCL comb kernel"],
    },
}
REQUIRED = {"alltoall": ("bytes_per_rank", "ours.time_us"), "attn": ("tokens_per_rank", "ours.time_us"),
            "moe-ll": ("tokens_per_rank", "wire", "mode", "dispatch.time_us", "combine.time_us")}
TEXT = {"plan", "wire", "mode"}
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def cell_value(key, text):
    """A table cell as the JSON value: "-" is not measured (None); sizes may be written "64 KiB"."""
    if key in TEXT:
        return text
    if text == "-":
        return None
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)(?: (B|KiB|MiB|GiB))?", text)
    if not m:
        raise ValueError(f"cell {text!r} in column {key!r} is not a number")
    v = float(m.group(1)) * UNITS[m.group(2) or "B"]
    return int(v) if key in ("bytes_per_rank", "tokens_per_rank") and v == int(v) else v


def split_row(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def table_rows(entry, table, extra):
    """The lines of one Markdown table as sy-bench rows (dicts as in its JSON), with extra's keys in every row."""
    head = split_row(table[0])
    where = {}
    for key, names in COLUMNS[entry].items():
        i = next((head.index(n) for n in names if n in head), None)  # the first column of that name
        if i is not None:
            where[key] = i
    missing = [COLUMNS[entry][k][0] for k in REQUIRED[entry] if k not in where]
    if missing:
        raise ValueError(f"no column {', '.join(repr(m) for m in missing)} (columns: {', '.join(head)})")
    rows = []
    for n, line in enumerate(table[2:], 3):
        cells = split_row(line)
        if len(cells) != len(head):
            raise ValueError(f"table line {n} has {len(cells)} cells, the header {len(head)}")
        r = dict(extra)
        for key in COLUMNS[entry]:  # a column the table lacks (kernel time before 16b4ca2) reads as not measured
            obj, _, field = key.rpartition(".")
            (r.setdefault(obj, {}) if obj else r)[field] = cell_value(key, cells[where[key]]) if key in where else None
        r["nccl"]["absent"] = all(v is None for v in r["nccl"].values())
        if entry == "moe-ll":
            r["supported"] = r["dispatch"]["time_us"] is not None or r["combine"]["time_us"] is not None
        rows.append(r)
    if not rows:
        raise ValueError("the table has no rows")
    return rows


def prose(lines):
    return " ".join(l.strip() for l in lines if not l.startswith("|"))


def results_sections(path):
    """bench/RESULTS.md's "### ENTRY, DEVICE" sections: yields (entry, device, lines of the section, lines of its
    "## " section before the first "###")."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    intro, cur = [], None
    for line in lines + ["## end"]:
        if line.startswith("## ") or line.startswith("### "):
            if cur:
                yield cur
                cur = None
            if line.startswith("## "):
                intro = []
            m = re.fullmatch(r"### ([^,]+), (.+)", line.strip())
            if m:
                cur = (m.group(1).strip(), m.group(2).strip(), [], intro)
        elif cur:
            cur[2].append(line)
        else:
            intro.append(line)


def from_results(path):
    """Yields (entry, device, doc) per section of RESULTS.md with a table, doc as load_json gives a JSON file's, or
    (entry, device, None, why) where there is nothing to draw."""
    for entry, device, body, intro in results_sections(path):
        if entry not in DRAW:
            yield entry, device, None, f"no entry plot-bench draws ({', '.join(DRAW)})"
            continue
        start = next((i for i, l in enumerate(body) if l.startswith("|")), None)
        if start is None:
            yield entry, device, None, "no table"
            continue
        table = []
        for l in body[start:]:
            if not l.startswith("|"):
                break
            table.append(l)
        text = prose(body)
        m = re.search(r"`([^`]*\bsy-bench\b[^`]*)`\s*\((\d{4}-\d{2}-\d{2}), ([0-9a-f]{7,40})\)", text)
        if not m:
            yield entry, device, None, "no line \"`... sy-bench ...` (DATE, COMMIT)\" above the table"
            continue
        command, date, commit = m.groups()
        w = re.search(r"\bsyrun\s+-n\s+(\d+)", command) or re.search(r"--world[ =](\d+)", command)
        b = re.search(r"--backend[ =](\w+)", command)
        extra = {"world": int(w.group(1)) if w else None, "backend": b.group(1) if b else None}
        if entry == "attn":
            # the direct-store reference this run measured, where the text states it for this run: in the section,
            # or in its device's text where that names the same commit
            intro_text = prose(intro)
            ref = re.search(r"[Dd]irect-store reference:? (?:in the same run: )?\**([0-9]+\.[0-9]+) GB/s", text)
            if not ref and re.search(rf"\bcommit {commit}\b", intro_text):
                ref = re.search(r"[Dd]irect-store reference:? (?:in the same run: )?\**([0-9]+\.[0-9]+) GB/s",
                                intro_text)
            if ref:
                extra["store_reference_GBs"] = float(ref.group(1))
            if "busiest sender" in text:  # the 2026-11-22 tables: MiB counts the busiest sender's bytes only
                extra["busbw_label"] = "bus bandwidth (GB/s: busiest sender / event time)"
        try:
            rows = table_rows(entry, table, extra)
        except ValueError as e:
            yield entry, device, None, f"table not read: {e}"
            continue
        if not extra["backend"] and any(not r["nccl"]["absent"] for r in rows):
            for r in rows:
                r["backend"] = "cuda"  # sy-bench measures NCCL on the cuda backend only
        yield entry, device, {"entry": entry, "device": device, "commit": commit, "date": date,
                              "world": extra["world"], "rows": rows, "source": path}, None


def load_json(path):
    with open(path) as f:
        return json.load(f)


def render(doc, outdir, opts, written, where):
    """Draws one run (sy-bench's JSON document, or one from from_results) into OUTDIR; returns 0, or 1 on error."""
    entry, rows = doc.get("entry"), [r for r in doc.get("rows") or [] if r.get("entry") != "gpu_slowdown"]
    if entry not in DRAW:
        sys.stderr.write(f"plot-bench.py: {where}: unknown entry {entry!r}\n")
        return 1
    if not rows:
        sys.stderr.write(f"plot-bench.py: {where}: no rows\n")
        return 1
    world = doc.get("world") or rows[0].get("world")
    backend = rows[0].get("backend")
    device = opts["device"] or doc.get("device")
    commit = opts["commit"] or doc.get("commit")
    try:
        fig, basis = DRAW[entry](rows, opts["time"])
    except (KeyError, TypeError, ValueError) as e:
        sys.stderr.write(f"plot-bench.py: {where}: {type(e).__name__}: {e}\n")
        return 1
    head = " — ".join(x for x in (entry, device or "device not named", f"world {world}" if world else None,
                                  f"{backend} backend" if backend else None) if x)
    tail = [x for x in (f"commit {commit}" if commit else "commit not named", doc.get("date"),
                        f"switchyard {doc['version']}" if doc.get("version") else None,
                        f"{basis} time, medians, slowest rank",
                        f"from {doc['source']}" if doc.get("source") else None) if x]
    lines, width = [head], int(fig.get_figwidth() * 11)  # characters a line of the title holds
    for x in tail:
        if len(lines) > 1 and len(lines[-1]) + 3 + len(x) <= width:
            lines[-1] += " · " + x
        else:
            lines.append(x)
    fig.suptitle("\n".join(lines), fontsize="medium")
    fig.tight_layout()
    name = f"{entry}_{slug(device) if device else f'w{world}'}"
    if name in written:
        name += f"_w{world}"
    written.add(name)
    out = os.path.join(outdir, f"{name}.{opts['format']}")
    fig.savefig(out, format=opts["format"], metadata={"Date": None} if opts["format"] == "svg" else None)
    plt.close(fig)
    print(out)
    return 0


def main(argv):
    opts = {"device": None, "commit": None, "time": "auto", "from-results": None, "format": "svg"}
    args = []
    it = iter(argv)
    for a in it:
        if a in ("-h", "--help"):
            print(__doc__.strip())
            return 0
        if a.startswith("--") and a[2:].split("=")[0] in opts:
            k, _, v = a[2:].partition("=")
            opts[k] = v if _ else next(it, None)
            if opts[k] is None:
                sys.stderr.write(f"plot-bench.py: {a} needs a value\n")
                return 2
        elif a.startswith("--"):
            sys.stderr.write(f"plot-bench.py: unknown option {a}\n")
            return 2
        else:
            args.append(a)
    results = opts["from-results"]
    if (opts["time"] not in ("auto", "kernel", "event") or opts["format"] not in ("svg", "png")
            or len(args) < (1 if results else 2)):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    if results and (len(args) > 1 or opts["device"] or opts["commit"]):
        sys.stderr.write("plot-bench.py: --from-results takes OUTDIR only: each section of the file names its own "
                         "device and commit (draw JSON files in a call of their own)\n")
        return 2
    outdir, paths = args[0], args[1:]
    os.makedirs(outdir, exist_ok=True)
    plt.rcParams["svg.hashsalt"] = "plot-bench"  # the same input gives the same SVG
    plt.rcParams["svg.fonttype"] = "none"  # text as text: smaller files, searchable titles
    plt.rcParams["font.sans-serif"] = ["DejaVu Sans"]  # each text names its fonts: the one drawn with, then sans-serif
    written, status = set(), 0
    if results:
        try:
            sections = list(from_results(results))
        except OSError as e:
            sys.stderr.write(f"plot-bench.py: {results}: {e}\n")
            return 1
        for entry, device, doc, why in sections:
            where = f"{results}: \"### {entry}, {device}\""
            if doc is None:
                sys.stderr.write(f"plot-bench.py: {where}: {why}; nothing drawn\n")
                if why.startswith("table not read"):
                    status = 1
                continue
            status |= render(doc, outdir, opts, written, where)
        return status
    for path in paths:
        try:
            doc = load_json(path)
        except (OSError, ValueError) as e:
            sys.stderr.write(f"plot-bench.py: {path}: {e}\n")
            status = 1
            continue
        status |= render(doc, outdir, opts, written, path)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
