#!/usr/bin/env python3
"""plot-bench.py [options] OUTDIR BENCH.json [...] — sy-bench's --json output (alltoall, attn, moe-ll) as one SVG per
file in OUTDIR, for bench/RESULTS.md's "Plots" section (bench/plots/):

  alltoall  time against bytes per rank (log-log) and bus bandwidth against bytes per rank, ours beside NCCL
  attn      the same against tokens per rank, one line per plan (random, even); the direct-store reference
            as a horizontal line in the bandwidth panel
  moe-ll    dispatch and combine time against tokens per rank (log-log), one line per wire and mode

NCCL's lines are drawn where the file has them (not with --no-nccl, not on the host backend); the bandwidth panel
only where a bus bandwidth was measured (none at world 1). Times are kernel times (CUPTI) where every line of the
figure has them, else CUDA-event times (--time picks). Files are named ENTRY_DEVICE.svg (alltoall_2xH200.svg),
ENTRY_wWORLD.svg without a device. The title names the entry, device, world size, backend, commit and version,
taken from --device / --commit or else from the JSON header's "device", "commit", "date" and "version" keys where
present (sy-bench writes "entry", "version" and "rows"; world and backend come from the rows).

options:
  --device NAME   the machine, e.g. 2xH200 (title and file name)
  --commit REV    the commit the run measured (title)
  --time auto|kernel|event   which time to plot (default auto)
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
    plans = sorted({r["plan"] for r in rows}, key=lambda p: (p != "random", p))
    marks = {"random": "o", "even": "^"}
    by_plan = {p: [r for r in rows if r["plan"] == p] for p in plans}
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
        plot_line(ax, xs, [val(r["ours"]["kernel_us" if i else "time_us"]) for r in rs], color=OURS, marker=m,
                  label=f"switchyard, {p} plan")
        if has_nccl:
            plot_line(ax, xs, [val(r["nccl"]["kernel_us" if i else "time_us"]) for r in rs], color=NCCL, marker=m,
                      linestyle="--", label=f"NCCL, {p} plan")
    log_axes(ax, "tokens per rank", time_axis_label(basis, rows[0].get("backend")))
    ax.legend(fontsize="small")
    if bw:
        ax = axes[0][1]
        for p in plans:
            rs = by_plan[p]
            xs = [r["tokens_per_rank"] for r in rs]
            m = marks.get(p, "o")
            plot_line(ax, xs, [val(r["ours"].get("busbw_GBs")) for r in rs], color=OURS, marker=m,
                      label=f"switchyard, {p}")
            if has_nccl:
                plot_line(ax, xs, [val(r["nccl"].get("busbw_GBs")) for r in rs], color=NCCL, marker=m,
                          linestyle="--", label=f"NCCL, {p}")
        refs = sorted(v for v in (val(r.get("store_reference_GBs")) for r in rows) if v)
        if refs:
            ref = refs[len(refs) // 2]
            ax.axhline(ref, color="gray", linestyle=":", label=f"direct-store reference {ref:.1f} GB/s")
        log_axes(ax, "tokens per rank", "bus bandwidth (GB/s: busiest link end / event time)")
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
    return re.sub(r"[^A-Za-z0-9.+-]+", "_", s).strip("_")


def main(argv):
    opts = {"device": None, "commit": None, "time": "auto"}
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
    if opts["time"] not in ("auto", "kernel", "event") or len(args) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    outdir, paths = args[0], args[1:]
    os.makedirs(outdir, exist_ok=True)
    plt.rcParams["svg.hashsalt"] = "plot-bench"  # the same JSON gives the same SVG
    plt.rcParams["svg.fonttype"] = "none"  # text as text: smaller files, searchable titles
    written, status = set(), 0
    for path in paths:
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            sys.stderr.write(f"plot-bench.py: {path}: {e}\n")
            status = 1
            continue
        entry, rows = doc.get("entry"), doc.get("rows") or []
        if entry not in DRAW:
            sys.stderr.write(f"plot-bench.py: {path}: unknown entry {entry!r}\n")
            status = 1
            continue
        if not rows:
            sys.stderr.write(f"plot-bench.py: {path}: no rows\n")
            status = 1
            continue
        world = doc.get("world", rows[0].get("world"))
        backend = rows[0].get("backend", "?")
        device = opts["device"] or doc.get("device")
        commit = opts["commit"] or doc.get("commit")
        try:
            fig, basis = DRAW[entry](rows, opts["time"])
        except (KeyError, TypeError, ValueError) as e:
            sys.stderr.write(f"plot-bench.py: {path}: {type(e).__name__}: {e}\n")
            status = 1
            continue
        head = f"{entry} — {device or 'device not named'} — world {world} — {backend} backend"
        tail = " · ".join(x for x in (f"commit {commit}" if commit else "commit not named", doc.get("date"),
                                        f"switchyard {doc['version']}" if doc.get("version") else None,
                                        f"{basis} time, medians, slowest rank") if x)
        fig.suptitle(f"{head}\n{tail}", fontsize="medium")
        fig.tight_layout()
        name = f"{entry}_{slug(device) if device else f'w{world}'}"
        if name in written:
            name += f"_w{world}"
        written.add(name)
        out = os.path.join(outdir, name + ".svg")
        fig.savefig(out, format="svg", metadata={"Date": None})
        plt.close(fig)
        print(out)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
