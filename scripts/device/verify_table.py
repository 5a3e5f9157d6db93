#!/usr/bin/env python3
"""Markdown table of plumb verify reports (for docs/CORRECTNESS.md).

Usage: scripts/device/verify_table.py DIR   where DIR holds verify-<fixture>-<mode>/verify.json
folders, as scripts/device/check.sh writes them. One row per report: worst tap cosine, taps at or
above the threshold, taps bitwise equal, logits max|diff|/max|ref|, argmax agreement, greedy
agreement and the share of selected ids (top-k, experts) that agree.
"""
import json
import pathlib
import sys


def row(path: pathlib.Path) -> str:
    j = json.loads((path / "verify.json").read_text())
    taps = [t for t in j["taps"] if not t.get("informational")]
    sel = [t for t in j["taps"] if t.get("informational")]
    worst = min((t["cosine"] for t in taps), default=1.0)
    passing = sum(1 for t in taps if t["pass"])
    bitwise = sum(1 for t in taps if t["max_abs_diff"] == 0)
    lg = j["logits"]
    g = j["greedy"]
    greedy = "identical" if g.get("agree") else f"diverge at {g.get('first_divergence')}"
    ids = ""
    if sel:  # informational selection taps: their note says what share agrees
        agree = [float(t["note"].split("%")[0].split()[-1]) for t in sel if "%" in t.get("note", "")]
        ids = f"{min(agree):.1f}%" if agree else ""
    name = path.name.removeprefix("verify-")
    return (f"| {name} | {worst:.6f} | {passing}/{len(taps)} | {bitwise}/{len(taps)} | {lg['rel_max_diff']:.1e} | "
            f"{lg['argmax_agree']}/{lg['positions']} | {greedy} | {ids} |")


def main() -> None:
    root = pathlib.Path(sys.argv[1])
    print("| fixture-mode | worst tap cosine | taps >= threshold | taps bitwise | logits max\\|diff\\|/max\\|ref\\| "
          "| argmax | greedy | selected ids agreeing (worst tap) |")
    print("|---|---|---|---|---|---|---|---|")
    for p in sorted(root.glob("verify-*/verify.json")):
        print(row(p.parent))


if __name__ == "__main__":
    main()
