#!/usr/bin/python3
"""Measures plumb's own summation-order noise floor on the faithful goldens (issue 13).

The faithful tests compare plumb with the release's own code. Two implementations of the same
rounding rules still sum their f32 reductions in different orders, and the faithful profile's
re-quantization (bf16 everywhere, FP8 before every projection, FP4 in the V4 indexer) turns some
of those one-ulp differences into whole quantization steps. How far that alone moves the logits is
the floor a test threshold has to sit at. The release's side of it is in the goldens' meta.json
(the same release code run by torch on the CPU instead of the GPU); this script measures plumb's
side: `plumb logits --numerics faithful` with PLUMB_CPU_ORDER set to other summation orders
(backend/cpu/cpu_backend.h: the listed sites sum reversed or in blocks of 32), each compared with
plumb's canonical order by the test's own metric (the cosine over every position's logits, or the
last position's on the aligned fixture, and argmax agreement).

Greedy goldens of the release's incremental decoding (greedy_<L>.ids.npy, V3) are rerun in each
order too: where each other order's continuation first leaves the canonical one (-1: never).

Writes order_floor.json into each golden folder (with --write; otherwise prints the table):
  tests/data/golden/v4-faithful/<cfg>/   checkpoints in tests/data/golden/v4/<cfg>/
  tests/data/golden/v3-faithful/<cfg>/   checkpoints in tests/data/golden/v3/<cfg>/
  tests/data/golden/v4-release/aligned/  its own checkpoint, last-position goldens

Usage: tools/golden/order_floor.py [--plumb build/plumb] [--threads 2] [--only v4-faithful/tiny-a] [--write]
"""
import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
GOLDEN = os.path.join(ROOT, "tests", "data", "golden")

# The other orders measured, per architecture: every site at once in both other orders, then each
# site alone (the sites an architecture does not have would change nothing).
SITES = {"v4": ["linear", "gate", "norm", "hc", "attn"], "v3": ["linear", "gate", "norm", "mla"]}


def orders(arch):
    out = ["reversed:all", "blocked:all"]
    for site in SITES[arch]:
        out += ["reversed:" + site, "blocked:" + site]
    return out


def fixtures():
    """(name, model dir, golden dir, arch, [(length, golden file)], last position only)."""
    out = []
    for arch in ("v4", "v3"):
        base = os.path.join(GOLDEN, arch + "-faithful")
        for cfg in sorted(os.listdir(base)):
            prompts = []
            for f in os.listdir(os.path.join(base, cfg)):
                m = re.fullmatch(r"prompt_([0-9]+)\.logits\.npy", f)
                if m:
                    prompts.append((int(m.group(1)), os.path.join(base, cfg, f)))
            out.append((arch + "-faithful/" + cfg, os.path.join(GOLDEN, arch, cfg), os.path.join(base, cfg), arch,
                        sorted(prompts), False))
    aligned = os.path.join(GOLDEN, "v4-release", "aligned")
    prompts = []
    for f in os.listdir(aligned):
        m = re.fullmatch(r"golden_([0-9]+)\.logits\.npy", f)
        if m:
            prompts.append((int(m.group(1)), os.path.join(aligned, f)))
    out.append(("v4-release/aligned", aligned, aligned, "v4", sorted(prompts), True))
    return out


def run_logits(plumb, model, ids, order, threads, tmp):
    out = os.path.join(tmp, "logits.npy")
    env = dict(os.environ)
    env.pop("PLUMB_CPU_ORDER", None)
    if order:
        env["PLUMB_CPU_ORDER"] = order
    r = subprocess.run([plumb, "logits", "--model", model, "--ids", ids, "--out", out, "--numerics", "faithful",
                        "--threads", str(threads)], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("plumb logits failed (PLUMB_CPU_ORDER=%s, %s):\n%s" % (order, ids, r.stderr))
    return np.load(out).astype(np.float64)


def run_greedy(plumb, model, ids, new, order, threads, tmp):
    out = os.path.join(tmp, "greedy.npy")
    env = dict(os.environ)
    env.pop("PLUMB_CPU_ORDER", None)
    if order:
        env["PLUMB_CPU_ORDER"] = order
    r = subprocess.run([plumb, "generate", "--model", model, "--ids", ids, "--max-new-tokens", str(new), "--greedy",
                        "--ignore-eos", "--numerics", "faithful", "--out-ids", out, "--threads", str(threads)], env=env,
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("plumb generate failed (PLUMB_CPU_ORDER=%s, %s):\n%s" % (order, ids, r.stderr))
    return [int(t) for t in np.load(out).ravel()]


def first_difference(a, b):
    """Index of the first differing token; -1 when equal."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), -1 if len(a) == len(b) else min(len(a), len(b)))


def measure_greedy(fx, plumb, threads, tmp):
    """The release's incremental greedy runs (greedy_<L>.ids.npy in the golden folder, V3): where
    each other order's greedy run first leaves the canonical one."""
    name, model, gold_dir, arch, _, _ = fx
    out = {}
    for f in sorted(os.listdir(gold_dir)):
        m = re.fullmatch(r"greedy_([0-9]+)\.ids\.npy", f)
        if not m or fx[5]:
            continue
        length = int(m.group(1))
        want = [int(t) for t in np.load(os.path.join(gold_dir, f)).ravel()]
        ids = os.path.join(model, "prompt_%d.ids.npy" % length)
        canon = run_greedy(plumb, model, ids, len(want), "", threads, tmp)
        entry = {"new": len(want), "canonical_vs_golden": first_difference(canon, want), "orders": {}}
        for order in orders(arch):
            entry["orders"][order] = first_difference(run_greedy(plumb, model, ids, len(want), order, threads, tmp), canon)
        out[str(length)] = entry
        print("%-22s greedy_%-4d plumb vs golden first difference %d | other orders: %s" % (
            name, length, entry["canonical_vs_golden"], sorted(set(entry["orders"].values()))), flush=True)
    return out


def agreement(a, b):
    """The tests' metric: cosine over all values, argmax agreement per row, bitwise equality."""
    a2, b2 = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
    cos = float(np.dot(a.ravel(), b.ravel()) / np.sqrt(np.dot(a.ravel(), a.ravel()) * np.dot(b.ravel(), b.ravel())))
    return {"cosine": cos, "argmax_agreement": int((a2.argmax(-1) == b2.argmax(-1)).sum()),
            "bitwise": bool(np.array_equal(a, b)), "max_abs_diff": float(np.abs(a - b).max())}


def git_revision():
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], check=True, capture_output=True,
                              text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def measure(fx, plumb, threads, tmp):
    name, model, gold_dir, arch, prompts, last_only = fx
    result = {"prompts": {}}
    for length, gold_file in prompts:
        ids = os.path.join(model, "prompt_%d.ids.npy" % length)
        canon = run_logits(plumb, model, ids, "", threads, tmp)
        if last_only:
            canon = canon[-1]
        gold = np.load(gold_file).astype(np.float64)
        entry = {"canonical_vs_golden": agreement(canon, gold), "orders": {}}
        for order in orders(arch):
            got = run_logits(plumb, model, ids, order, threads, tmp)
            if last_only:
                got = got[-1]
            entry["orders"][order] = {"vs_canonical": agreement(got, canon), "vs_golden": agreement(got, gold)}
        floor = min(entry["orders"].values(), key=lambda o: o["vs_canonical"]["cosine"])["vs_canonical"]
        entry["floor"] = {"cosine": floor["cosine"],
                          "argmax_agreement": min(o["vs_canonical"]["argmax_agreement"] for o in entry["orders"].values()),
                          "bitwise": all(o["vs_canonical"]["bitwise"] for o in entry["orders"].values())}
        result["prompts"][str(length)] = entry
        c = entry["canonical_vs_golden"]
        print("%-22s prompt_%-4d plumb vs golden %.6f%s | order floor %.6f%s (argmax >= %d)" % (
            name, length, c["cosine"], " bitwise" if c["bitwise"] else "", entry["floor"]["cosine"],
            " bitwise" if entry["floor"]["bitwise"] else "", entry["floor"]["argmax_agreement"]), flush=True)
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plumb", default=os.path.join(ROOT, "build", "plumb"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", action="append", help="a fixture name as printed (repeatable)")
    ap.add_argument("--write", action="store_true", help="write order_floor.json into each golden folder")
    a = ap.parse_args()
    todo = [f for f in fixtures() if not a.only or f[0] in a.only]
    if not todo:
        sys.exit("no fixture matches --only %s" % a.only)
    with tempfile.TemporaryDirectory() as tmp:
        for fx in todo:
            r = measure(fx, a.plumb, a.threads, tmp)
            greedy = measure_greedy(fx, a.plumb, a.threads, tmp)
            if greedy:
                r["greedy"] = greedy
            r.update({
                "what": "plumb's own summation-order noise floor: plumb logits --numerics faithful with "
                        "PLUMB_CPU_ORDER=<order> against the canonical order (floor: the worst over the orders), "
                        "and each against this folder's golden",
                "metric": "last position's logits" if fx[5] else "logits of every position, flattened",
                "command": "tools/golden/order_floor.py --write" + (" --only " + fx[0] if a.only else ""),
                "generated_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                "plumb_revision": git_revision(),
            })
            if a.write:
                with open(os.path.join(fx[2], "order_floor.json"), "w") as f:
                    json.dump(r, f, indent=1)
                    f.write("\n")


if __name__ == "__main__":
    main()
