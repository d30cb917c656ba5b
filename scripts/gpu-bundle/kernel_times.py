#!/usr/bin/env python3
"""Sums an Nsight Compute CSV (ncu --csv --page raw with the metric
gpu__time_duration.sum; its second row gives the column's unit) by kernel: calls, total and mean time,
share of all kernels' time, largest first. run-gpu-profile.sh pipes one
profiled training step through it.

    python3 kernel_times.py report.csv [--top N]
"""
import argparse
import csv
import re
import sys
from collections import defaultdict

METRIC = "gpu__time_duration.sum"
NANOSECONDS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6,
               "second": 1e9, "s": 1e9}


def short_name(name):
    """The kernel's name without its argument list (templates kept)."""
    depth = 0
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            name = name[:i]
            break
    name = re.sub(r"\s+", " ", name).strip()
    return name if len(name) <= 110 else name[:107] + "..."


def read_rows(path):
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]  # ncu's own lines are not quoted
    rows = list(csv.reader(lines))
    if not rows:
        sys.exit(f"kernel_times: no CSV rows in {path}")
    header = rows[0]
    names = [c for c in ("Kernel Name", "Function Name", "Demangled Name") if c in header]
    if not names or METRIC not in header:
        sys.exit(f"kernel_times: {path} has no kernel name or {METRIC} column: {header}")
    name_at, time_at = header.index(names[0]), header.index(METRIC)
    scale = 1.0  # to nanoseconds
    out = []
    for row in rows[1:]:
        if len(row) <= max(name_at, time_at):
            continue
        value = row[time_at].replace(",", "")
        if value in NANOSECONDS:  # the units row
            scale = NANOSECONDS[value]
            continue
        try:
            out.append((row[name_at], float(value) * scale))
        except ValueError:
            continue
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("csv")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    kernels = read_rows(args.csv)
    if not kernels:
        sys.exit(f"kernel_times: no kernels in {args.csv}")
    calls, total = defaultdict(int), defaultdict(float)
    for name, ns in kernels:
        key = short_name(name)
        calls[key] += 1
        total[key] += ns
    all_ns = sum(total.values())
    print(f"{len(kernels)} kernels, {all_ns / 1e6:.2f} ms of kernel time (one after another, "
          f"as ncu runs them)")
    print(f"{'ms':>9} {'share':>6} {'calls':>6} {'mean us':>9}  kernel")
    for key in sorted(total, key=total.get, reverse=True)[: args.top]:
        print(f"{total[key] / 1e6:9.3f} {100 * total[key] / all_ns:5.1f}% {calls[key]:6d} "
              f"{total[key] / calls[key] / 1e3:9.1f}  {key}")


if __name__ == "__main__":
    main()
