#!/usr/bin/env python3
"""The hottest SASS lines of an Nsight Compute source page (ncu -i R --page source --csv
--print-source sass, on stdin): per kernel table, the --top lines by warp-stall samples, with
each line's share of the kernel's samples. Prints the first lines of the input unparsed when it
finds no stall-sampling column (a different ncu version's layout), so the run still says what
it saw."""
import argparse
import csv
import sys


def num(s):
    try:
        return float(s.replace(",", ""))
    except ValueError:
        return 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--top", type=int, default=40)
    a = ap.parse_args()
    lines = sys.stdin.read().splitlines()
    tables, cur = [], None
    for row in csv.reader(lines):
        if any("Warp Stall Sampling (All" in c for c in row):
            cur = {"hdr": row, "rows": []}
            tables.append(cur)
        elif cur is not None and len(row) == len(cur["hdr"]):
            cur["rows"].append(row)
        elif row and cur is not None:
            cur = None  # a kernel's title line between tables
    if not tables:
        print("no stall-sampling column; the page began:")
        print("\n".join(lines[:60]))
        return
    for k, t in enumerate(tables):
        hdr = t["hdr"]
        i_s = next(i for i, c in enumerate(hdr) if "Warp Stall Sampling (All" in c)
        i_src = next((i for i, c in enumerate(hdr) if c.strip() == "Source"), 1)
        total = sum(num(r[i_s]) for r in t["rows"]) or 1.0
        print(f"--- table {k}: {len(t['rows'])} lines, {total:.0f} stall samples")
        for r in sorted(t["rows"], key=lambda r: -num(r[i_s]))[: a.top]:
            print(f"{100 * num(r[i_s]) / total:5.1f}%  {r[0]:>8}  {r[i_src][:110]}")


if __name__ == "__main__":
    main()
