#!/usr/bin/env python3
"""plumb against the release at one decode step of the aligned fixture's greedy run (issue 13).

Reads what tools/golden/release_step17.py recorded on the GPU machine (the release's taps at the
last position, its routed experts and indexer picks; committed in
tests/data/golden/v4-release/aligned/step17/), runs `plumb logits --dump-taps` on the CPU over the
same tokens (the prompt and the release's greedy tokens before the step, as one prefill), and
prints, per layer, the cosine and max difference of each tap at the last position, the routed
experts of both and the indexer picks of both (the release's picks carry the window offset: its
compressed entry i is index window + i). numpy only.

Usage: tools/golden/compare_step17.py [--plumb build/plumb] [--step 17] [--prefill step17_prefill.npz]
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


def bf16(x):
    """Round-to-nearest-even to bf16, kept in f32."""
    a = np.atleast_1d(np.asarray(x, np.float32))
    u = a.view(np.uint32).astype(np.uint64)
    u = (u + np.uint64(0x7FFF) + ((u >> np.uint64(16)) & np.uint64(1))) & np.uint64(0xFFFF0000)
    r = u.astype(np.uint32).view(np.float32)
    return r if np.ndim(x) else r[0]


def plumb_score(q, w, k):
    """plumb's faithful index score of one entry (cpu_compress.cpp): per head bf16(q.k), ReLU,
    bf16(relu * w), summed over the heads in f32, then bf16. q [H, d], w [H], k [d]."""
    acc = np.float32(0)
    for h in range(q.shape[0]):
        qk = bf16(np.float32(np.dot(q[h].astype(np.float64), k.astype(np.float64))))
        acc = np.float32(acc + bf16(np.float32(max(qk, 0)) * np.float32(w[h])))
    return float(bf16(acc))


def compare_indexer(layer, tap, z, only_plumb, only_release):
    """The indexer's inputs at the step, plumb's against the release's (release_step17.py records
    them), and the scores of the entries only one side picked, from each side's inputs."""
    r = f"layers.{layer}.attn.indexer"
    if f"{r}.index_q" not in z:
        print(f"layer {layer} indexer inputs: not in this record (rerun release_step17.py)")
        return
    rq, rw = z[f"{r}.index_q"].reshape(-1, *z[f"{r}.index_q"].shape[-2:])[-1], z[f"{r}.index_w"].reshape(-1, z[f"{r}.index_w"].shape[-1])[-1]
    rk = z[f"{r}.index_keys_all"].reshape(-1, z[f"{r}.index_keys_all"].shape[-1])
    pq = tap(f"layer.{layer}.attn.index_q")
    pq = pq.reshape(pq.shape[0], *rq.shape)[-1]
    pw = tap(f"layer.{layer}.attn.index_w").reshape(-1, rw.shape[0])[-1]
    pk = tap(f"layer.{layer}.attn.index_keys").reshape(-1, rk.shape[1])[: rk.shape[0]]
    for what, mine, theirs in (("q", pq, rq), ("weights", pw, rw), ("keys", pk, rk)):
        print(f"layer {layer} indexer {what:7s} cosine {cos(mine, theirs):.6f} max diff {np.abs(mine - theirs).max():.3g}"
              f" ({int((mine != theirs).sum())} of {mine.size} values differ)")
    score = z[f"{r}.index_score"].reshape(-1, rk.shape[0])[-1]
    for e in sorted(only_plumb) + sorted(only_release):
        print(f"layer {layer} entry {e}: release score {score[e]:.5f}; plumb's formula on plumb's inputs "
              f"{plumb_score(pq, pw, pk[e]):.5f}, on the release's {plumb_score(rq, rw, rk[e]):.5f}; "
              f"key differs in {int((pk[e] != rk[e]).sum())} of {rk.shape[1]} values")


def compare_stages(layer, tap, z):
    """Each compressed entry's stages (pooled, normed, roped, stored), plumb's against the
    release's (release_step17.py records them for the whole run): where the two first part."""
    for mine, theirs in (("attn.compressed", "attn.compressor"), ("attn.index_keys", "attn.indexer.compressor")):
        for stage in ("pooled", "normed", "roped", None):
            key = f"layers.{layer}.{theirs}.stage.{stage}" if stage else None
            if stage and key not in z:
                continue
            try:
                p = tap(f"layer.{layer}.{mine}" + (f".{stage}" if stage else ""))
            except FileNotFoundError:
                continue
            if stage:
                r = z[key]
            elif mine == "attn.index_keys" and f"layers.{layer}.attn.indexer.index_keys_all" in z:
                r = z[f"layers.{layer}.attn.indexer.index_keys_all"]
            else:
                continue
            r = r.reshape(-1, r.shape[-1])
            p = p.reshape(-1, r.shape[1])[: r.shape[0]]
            bad = np.nonzero((p != r).any(axis=1))[0]
            print(f"layer {layer} {mine:15s} {stage or 'stored':6s} {int((p != r).sum())} of {r.size} values differ in "
                  f"{len(bad)} of {r.shape[0]} entries (first {bad[:6].tolist()}), max diff {np.abs(p - r).max():.3g}")


def compare_prefill(tap, path, prompt_len):
    """The release's prefill taps (release_step17.py's step<N>_prefill.npz) against plumb's at the
    same positions: the first position where each tap differs."""
    pre = np.load(path)
    for key in sorted(pre.files):
        name = key[len("prefill."):]
        parts = name.split(".")
        mine = {module: ours for ours, module in TAPS}.get(".".join(parts[2:]) or None)
        if mine is None:
            continue
        r = pre[key].reshape(prompt_len, -1)
        p = tap(f"layer.{parts[1]}.{mine}").reshape(-1, r.shape[1])[:prompt_len]
        bad = np.nonzero((p != r).any(axis=1))[0]
        print(f"prefill layer {parts[1]} {mine:9s} {len(bad)} of {prompt_len} positions differ (first {bad[:5].tolist()}), "
              f"max diff {np.abs(p - r).max():.3g}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plumb", default="build/plumb")
    ap.add_argument("--step", type=int, default=17)
    ap.add_argument("--prefill", help="release_step17.py's step<N>_prefill.npz (not committed)")
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
                compare_indexer(layer, tap, z, mine - theirs, theirs - mine)
            compare_stages(layer, tap, z)
        if a.prefill:
            compare_prefill(tap, a.prefill, len(prompt))


if __name__ == "__main__":
    main()
