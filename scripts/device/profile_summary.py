#!/usr/bin/env python3
"""Summarises an Nsight Compute CSV of plumb_bench decode steps (scripts/device/profile.sh).

ncu runs each kernel alone, so the sums are upper bounds of the kernel time of a step. The trace
(profile.sh and quick_round.sh capture only the bench's last decode step: --profile-last-step) is
split into forwards at each embed_kernel (every forward starts with the embedding); the last one
is that step. Prints the
kernels per step, their summed time, and per kernel name the launches and time, largest first;
with --list also every kernel of the step in order with its grid.
"""
import argparse
import collections
import csv
import gzip
import io


def short(name):
    n = name.replace("void ", "").replace("plumb::gpu::k::", "").replace("unnamed>::", "")
    return n.split("(")[0][:70]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv", help="ncu --csv output (optionally .gz)")
    ap.add_argument("--list", action="store_true", help="also list the step's kernels in order")
    a = ap.parse_args()
    raw = (gzip.open if a.csv.endswith(".gz") else open)(a.csv, "rt").read()
    body = raw[raw.index('"ID"'):]  # ncu prints its own lines before the table
    rows = list(csv.reader(io.StringIO(body)))
    hdr = rows[0]
    i_name, i_val, i_grid = hdr.index("Kernel Name"), hdr.index("Metric Value"), hdr.index("Grid Size")
    ks = [(short(r[i_name]), float(r[i_val].replace(",", "")) / 1e3, r[i_grid]) for r in rows[1:] if len(r) == len(hdr)]
    starts = [i for i, k in enumerate(ks) if k[0] == "embed_kernel"]
    if not starts:
        print("no embed_kernel in the trace: not a plumb forward")
        return
    step = ks[starts[-1]:]
    print(f"last forward: {len(step)} kernels, {sum(k[1] for k in step):.1f} us of kernel time")
    agg = collections.defaultdict(lambda: [0, 0.0])
    for name, us, _ in step:
        agg[name][0] += 1
        agg[name][1] += us
    print("us/step | launches | us/launch | kernel")
    for name, (n, us) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        print(f"{us:8.1f} | {n:4d} | {us / n:7.1f} | {name}")
    if a.list:
        for name, us, grid in step:
            print(f"{name:30s} {us:8.1f} {grid}")


if __name__ == "__main__":
    main()
