#!/usr/bin/env python3
"""plumb against the release at one decode step of the aligned fixture's greedy run (issue 13).

Reads what tools/golden/release_step17.py recorded on the GPU machine (the release's taps at the
last position, its routed experts and indexer picks; committed in
tests/data/golden/v4-release/aligned/step17/), runs `plumb logits --dump-taps` on the CPU over the
same tokens (the prompt and the release's greedy tokens before the step, as one prefill), and
prints, per layer, the cosine and max difference of each tap at the last position, the routed
experts of both and the indexer picks of both (the release's picks carry the window offset: its
compressed entry i is index window + i). numpy only.

Usage: tools/golden/compare_step17.py [--plumb build/plumb] [--step 17]
"""
import argparse
import json
import os
import subprocess
import tempfile

import numpy as np

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../tests/data/golden/v4-release/aligned")
# plumb tap -> the release module hooked at the same point
TAPS = [("attn_in", "attn_norm"), ("attn.out", "attn"), ("ffn_in", "ffn_norm"), ("ffn.out", "ffn"), ("hc", None)]


def cos(a, b):
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plumb", default="build/plumb")
    ap.add_argument("--step", type=int, default=17)
    a = ap.parse_args()
    rec = os.path.join(FIXTURE, "step17")
    z = np.load(os.path.join(rec, f"step{a.step}.npz"))
    meta = json.load(open(os.path.join(rec, f"step{a.step}.json")))
    cfg = json.load(open(os.path.join(FIXTURE, "config.json")))
    window = cfg["sliding_window"]
    prompt = np.load(os.path.join(FIXTURE, "prompt_300.ids.npy"))
    greedy = np.load(os.path.join(FIXTURE, "greedy_300.ids.npy"))
    ids = np.concatenate([prompt, greedy[: a.step]]).astype(np.int32)
    with tempfile.TemporaryDirectory() as d:
        np.save(os.path.join(d, "ids.npy"), ids)
        subprocess.run([a.plumb, "logits", "--model", FIXTURE, "--ids", os.path.join(d, "ids.npy"), "--numerics",
                        "faithful", "--backend", "cpu", "--out", os.path.join(d, "logits.npy"), "--dump-taps",
                        os.path.join(d, "taps")], check=True, capture_output=True)
        tap = lambda name: np.load(os.path.join(d, "taps", name + ".npy"))
        logits = np.load(os.path.join(d, "logits.npy"))[-1]
        print(f"step {a.step} (position {len(ids) - 1}): plumb argmax {int(logits.argmax())}, release {meta['argmax']}; "
              f"logits cosine {cos(logits, z['head']):.6f}")
        for layer in range(cfg["num_hidden_layers"]):
            for mine, theirs in TAPS:
                t = tap(f"layer.{layer}.{mine}")
                last = t.reshape(t.shape[0], -1)[-1]
                r = z[f"layers.{layer}.{theirs}" if theirs else f"layers.{layer}"].ravel()
                print(f"layer {layer} {mine:9s} cosine {cos(last, r):.6f} max diff {np.abs(last - r).max():.3g}")
            ex = sorted(int(e) for e in tap(f"layer.{layer}.ffn.experts")[-1])
            print(f"layer {layer} experts plumb {ex} release {sorted(meta['gates'][f'layers.{layer}.ffn.gate']['experts'])}")
            name = f"layers.{layer}.attn.indexer"
            if name in meta["indexer"]:
                mine = set(int(i) for i in tap(f"layer.{layer}.attn.index_topk")[-1] if i >= 0)
                theirs = set(int(i) - window for i in meta["indexer"][name])
                print(f"layer {layer} indexer: {len(mine & theirs)} common picks; only plumb {sorted(mine - theirs)}, "
                      f"only the release {sorted(theirs - mine)}")


if __name__ == "__main__":
    main()
