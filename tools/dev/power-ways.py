#!/usr/bin/env python3
"""power-ways.py — the GPUs' SM clock and power during each of sy-bench layer's ways: SMI (lines "EPOCH, index,
clock MHz, power W, temperature, reasons" from `nvidia-smi --query-gpu=index,clocks.sm,power.draw,temperature.gpu,
clocks_event_reasons.active --format=csv,noheader -lms 50`, each after its wall-clock time) against MARKS
(SY_BENCH_LAYER_MARKS: "shape tokens way start end" lines, "== label" lines between runs). Each way's first fifth
(the warm-up steps) is left out; the means are over every GPU's samples. Usage: power-ways.py SMI MARKS"""
import sys


def samples(path):
    rows = []
    for line in open(path):
        p = [x.strip() for x in line.split(",")]
        try:
            rows.append((float(p[0]), int(p[1]), float(p[2].split()[0]), float(p[3].split()[0])))
        except (ValueError, IndexError):
            continue
    return rows


def main():
    rows = samples(sys.argv[1])
    label = ""
    print("| run | shape | way | s | SM MHz | W | GPUs |")
    print("|---|---|---|---:|---:|---:|---:|")
    for line in open(sys.argv[2]):
        if line.startswith("=="):
            label = line[2:].strip()
            continue
        shape, _, way, a, b = line.split()
        a, b = float(a), float(b)
        sel = [r for r in rows if a + 0.2 * (b - a) <= r[0] <= b]
        if not sel:
            continue
        clk = sum(r[2] for r in sel) / len(sel)
        pw = sum(r[3] for r in sel) / len(sel)
        print(f"| {label} | {shape} | {way} | {b - a:.2f} | {clk:.0f} | {pw:.0f} | {len({r[1] for r in sel})} |")


if __name__ == "__main__":
    main()
