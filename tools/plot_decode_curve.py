#!/usr/bin/env python3
"""Plots plumb_bench's decode batch curve (issue 17 item 2) from one or more --json records.

Left: tokens/s of the decode step against the batch, each record beside the tokens/s its bytes
floor allows (the bytes a step must read at the copy bandwidth measured in the same lease).
Right: the fraction of that floor each batch reaches. Records from different leases compare only
where their devices are the same (the copy bandwidth goes into each label).

Usage: tools/plot_decode_curve.py [LABEL=]bench.json ... --out FILE.png [--title TEXT]
Needs python3-matplotlib (scripts/install-deps.sh --plots).
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def load(spec):
    label, _, path = spec.rpartition("=")
    with open(path) as f:
        record = json.load(f)
    points = sorted((d["batch"], d["step_ms"], d["floor_ms"]) for d in record.get("decode", []) if d.get("step_ms"))
    if not points:
        sys.exit(f"plot_decode_curve: {path} has no decode steps (expected plumb_bench --json output)")
    device = record.get("facts", {}).get("device", "?")
    return (label or path), device, record.get("copy_gbs", 0.0), points


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("records", nargs="+", help="[LABEL=]plumb_bench --json output")
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default="plumb decode step against its bytes floor")
    args = ap.parse_args()
    fig, (tps, frac) = plt.subplots(1, 2, figsize=(12, 4.8))
    for spec in args.records:
        label, device, copy_gbs, points = load(spec)
        batches = [b for b, _, _ in points]
        name = f"{label} ({device}, copy {copy_gbs:,.0f} GB/s)"
        line = tps.plot(batches, [1e3 * b / ms for b, ms, _ in points], "o-", label=name)[0]
        tps.plot(batches, [1e3 * b / floor for b, _, floor in points], "--", color=line.get_color(),
                 label=f"{label}: bytes floor")
        frac.plot(batches, [floor / ms for _, ms, floor in points], "o-", color=line.get_color(), label=name)
    for ax in (tps, frac):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch (sequences decoding)")
        ax.grid(True, which="both", alpha=0.3)
    tps.set_yscale("log")
    tps.set_ylabel("tokens/s (step of the bench's layers + head)")
    frac.set_ylabel("fraction of the bytes floor")
    frac.set_ylim(0, 1)
    tps.legend(fontsize=7)
    frac.legend(fontsize=7)
    fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)


if __name__ == "__main__":
    main()
