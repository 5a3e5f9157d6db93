#!/usr/bin/env python3
"""plumb against the release at one decode step of the aligned fixture's greedy run (issue 13).

Reads what tools/golden/release_step17.py recorded on the GPU machine (the release's taps at the
last position, its routed experts and indexer picks; committed in
tests/data/golden/v4-release/aligned/step17/), runs `plumb logits --dump-taps` on the CPU over the
same tokens (the prompt and the release's greedy tokens before the step, as one prefill), and
prints, per layer, the cosine and max difference of each tap at the last position, the routed
experts of both and the indexer picks of both (the release's picks carry the window offset: its
compressed entry i is index window + i). numpy only.

With --attn0 step<N>_attn0.npz (release_step17.py's record of layer 0's attention, every stage at
every position: the prefill's, then the decode steps') it compares only that attention, stage by
stage in forward order (q_a .. out against plumb's taps layer.0.attn.q_a .. attn.out): per stage the
first position where the two differ, how many prefill and decode positions differ, how many values
and by how many ulps (bf16 ulps when both hold bf16 values, else f32). Then it splits the sparse
attention itself: plumb's formula (cpu_attention.cpp attend() and dot(), evaluated here in numpy f32
op by op; checked against plumb's own attn.o.raw) on the release's q and kv, first with plumb's
scores and exponentials, then with the release's scores, then with its scores and exponentials too,
so the step where the release's stand-in kernel and plumb part is named (scores, exp, sums / P.V).
--plumb-taps DIR reads a `plumb logits --dump-taps` directory instead of running plumb.

Usage: tools/golden/compare_step17.py [--plumb build/plumb] [--step 17] [--prefill step17_prefill.npz]
       tools/golden/compare_step17.py --attn0 step17_attn0.npz [--plumb build/plumb | --plumb-taps DIR]
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


# Layer 0's attention stages in forward order: release_step17.py's "attn0.<stage>" -> plumb's tap
ATTN0_STAGES = [("attn_in", "attn_in"), ("q_a", "attn.q_a"), ("qr", "attn.qr"), ("q_b", "attn.q_b"),
                ("q_normed", "attn.q.normed"), ("q", "attn.q"), ("kv_a", "attn.kv_a"), ("kv_normed", "attn.kv.normed"),
                ("kv_roped", "attn.kv.roped"), ("kv", "attn.kv"), ("o_raw", "attn.o.raw"), ("o", "attn.o"),
                ("wo_a", "attn.wo_a"), ("out", "attn.out")]


def ordered(x):
    """f32 values as integers in the same order (adjacent floats differ by 1)."""
    i = np.ascontiguousarray(x, np.float32).view(np.int32).astype(np.int64)
    return np.where(i < 0, -(i & 0x7FFFFFFF), i)


def ulps(a, b):
    """|a - b| in ulps: of bf16 when both hold only bf16 values, else of f32; and which."""
    d = np.abs(ordered(a) - ordered(b))
    bits = lambda x: np.ascontiguousarray(x, np.float32).view(np.uint32)
    if not ((bits(a) & 0xFFFF).any() or (bits(b) & 0xFFFF).any()):
        return d >> 16, "bf16"
    return d, "f32"


def differ(r, p, prompt_len, what, width=12):
    """One line: where r and p (position first) differ, in the prefill's rows and the decode rows.
    Returns the first differing position or None."""
    r, p = r.reshape(r.shape[0], -1), p.reshape(p.shape[0], -1)
    diff = ~((r == p) | (np.isnan(r) & np.isnan(p)))
    rows = np.nonzero(diff.any(axis=1))[0]
    pre, dec = rows[rows < prompt_len], rows[rows >= prompt_len]
    u, kind = ulps(np.where(diff, r, 0), np.where(diff, p, 0))
    dec_n = r.shape[0] - prompt_len
    print(f"  {what:{width}s} prefill {len(pre):3d} of {prompt_len} positions differ (first {pre[:4].tolist()}), "
          f"decode {len(dec)} of {dec_n} {dec[:4].tolist()}; {int(diff.sum())} of {diff.size} values, "
          f"max {int(u.max()) if diff.any() else 0} {kind} ulp")
    return int(rows[0]) if len(rows) else None


def exp_cr(x):
    """plumb's exp_cr (backend/cr_math.h): exp in double, rounded to f32."""
    with np.errstate(over="ignore"):
        return np.exp(np.asarray(x, np.float32).astype(np.float64)).astype(np.float32)


def plumb_dot(a, b):
    """plumb's dot() (cpu/weight_decode.cpp) over the last axis, broadcasting: f32 products, two
    4-lane accumulators over chunks of 8, lanes summed as (0 + 1) + (2 + 3), then the tail."""
    p = (np.asarray(a, np.float32) * np.asarray(b, np.float32)).astype(np.float32)
    n = p.shape[-1]
    acc0 = np.zeros(p.shape[:-1] + (4,), np.float32)
    acc1 = np.zeros_like(acc0)
    for c in range(0, n - n % 8, 8):
        acc0 = acc0 + p[..., c:c + 4]
        acc1 = acc1 + p[..., c + 4:c + 8]
    acc = acc0 + acc1
    s = (acc[..., 0] + acc[..., 1]) + (acc[..., 2] + acc[..., 3])
    for i in range(n - n % 8, n):
        s = s + p[..., i]
    return s


def plumb_attend(q, kv, sink, scale, window, block=64, scores=None, probs=None):
    """plumb's faithful sparse attention of an SWA layer (cpu_attention.cpp: a query at t reads the
    window's positions max(0, t - window + 1)..t, oldest first, in softmax blocks of `block` slots),
    in numpy f32 op by op. q [T, H, Dh], kv [T, Dh] (bf16 values), sink [H]. scores / probs [T, H,
    slots] (the release's q.k * scale and exp(s - m_b), slot i = the i-th oldest position): use them
    in place of plumb's own. Returns o [T, H, Dh] (bf16 values), scores, probs (plumb's or the given), l [T, H] (with the sink)."""
    T, H, Dh = q.shape
    f32 = np.float32
    scale, sink = f32(scale), np.asarray(sink, f32)
    o = np.zeros((T, H, Dh), f32)
    sc_all = np.full((T, H, window), -np.inf, f32)
    e_all = np.zeros((T, H, window), f32)
    l_all = np.zeros((T, H), f32)
    for t in range(T):
        p0 = max(0, t - window + 1)
        v = kv[p0:t + 1].astype(f32)
        n = v.shape[0]
        sc = scores[t, :, :n].astype(f32) if scores is not None else (plumb_dot(q[t][:, None, :], v[None]) * scale).astype(f32)
        sc_all[t, :, :n] = sc
        m = np.full(H, -np.inf, f32)
        l = np.zeros(H, f32)
        acc = np.zeros((H, Dh), f32)
        for j0 in range(0, n, block):
            j1 = min(n, j0 + block)
            bm = np.maximum(m, sc[:, j0:j1].max(axis=1))
            with np.errstate(invalid="ignore"):
                alpha = exp_cr(m - bm)  # 0 for the first block
            bs = np.zeros(H, f32)
            part = np.zeros((H, Dh), f32)
            for j in range(j0, j1):
                e = probs[t, :, j].astype(f32) if probs is not None else exp_cr(sc[:, j] - bm)
                e_all[t, :, j] = e
                bs = bs + e
                part = part + bf16(e)[:, None] * v[j][None, :]
            l = l * alpha + bs
            acc = acc * alpha[:, None] + part
            m = bm
        l = l + exp_cr(sink - m)
        l_all[t] = l
        o[t] = bf16(acc / l[:, None])
    return o, sc_all, e_all, l_all


def compare_attn0(tap, path):
    """Layer 0's attention, the release's stages (release_step17.py --> step<N>_attn0.npz) against
    plumb's taps, then the sparse attention split into its steps."""
    z = np.load(path)
    L = int(z["attn0.prompt_len"])
    P = z["attn0.q"].shape[0]
    print(f"layer 0 attention, positions 0..{P - 1} (prefill 0..{L - 1}, decode {L}..{P - 1}); release vs plumb per stage:")
    firsts = []  # (stage, first differing position or None), forward order
    for stage, mine in ATTN0_STAGES:
        try:
            p = tap(f"layer.0.{mine}")
        except FileNotFoundError:
            print(f"  {stage:12s} plumb has no tap layer.0.{mine} (rebuild plumb)")
            continue
        r = z[f"attn0.{stage}"]
        firsts.append((stage, differ(r, p.reshape(p.shape[0], -1)[:P], L, stage)))
    if "attn0.kv_fed" in z.files:
        fed = z["attn0.kv_fed"]
        print(f"  (check: the kv rows sparse_attn read in the prefill are the kv stage's: {np.array_equal(fed, z['attn0.kv'][:len(fed)])})")
    # A stage's row t depends only on the earlier stages' rows <= t: at the earliest position where
    # anything differs, the first stage (forward order) that differs there has bitwise inputs.
    bad = [(s_, at) for s_, at in firsts if at is not None]
    if bad:
        t = min(at for _, at in bad)
        culprit = next(s_ for s_, at in bad if at == t)
        print(f"first differing stage: {culprit} at position {t} ({'prefill' if t < L else 'decode'}; every stage before it"
              f" is bitwise at positions <= {t}); first stage to differ anywhere: {bad[0][0]} at {bad[0][1]}")
    else:
        print("first differing stage: none (bitwise at every stage and position)")

    # The sparse attention split: plumb's formula on the release's q / kv, with more and more of the
    # release's own intermediate values substituted.
    cfg = json.load(open(os.path.join(FIXTURE, "config.json")))
    window, Dh = cfg["sliding_window"], cfg["head_dim"]
    scale = np.float32(Dh ** -0.5)
    sink = z["attn0.sink"]
    q, kv, idx = z["attn0.q"], z["attn0.kv"], z["attn0.idx"]
    W = idx.shape[1]
    for t in range(P):  # slot i of position t holds position max(0, t - W + 1) + i (a decode step: its ring slot)
        want = np.arange(max(0, t - W + 1), t + 1)
        got = idx[t, :len(want)]
        assert np.array_equal(got, want if t < L else want % W) and (idx[t, len(want):] == -1).all(), \
            f"position {t}: the index row is not the window oldest first"
    rel_sc, rel_e, rel_mb, rel_l = z["attn0.scores"], z["attn0.probs"], z["attn0.m_blocks"], z["attn0.l_sink"]
    print("sparse attention split (plumb's formula in numpy; the release's stand-in kernel recorded):")
    try:
        pq, pkv, po = (tap(f"layer.0.attn.{n}") for n in ("q", "kv", "o.raw"))
        own = plumb_attend(pq.reshape(q.shape), pkv.reshape(kv.shape), sink, scale, window)[0]
        ok = np.array_equal(own, po.reshape(own.shape))
        print(f"  check: the numpy formula on plumb's q / kv reproduces plumb's attn.o.raw: {ok}"
              + ("" if ok else f" ({int((own != po.reshape(own.shape)).sum())} values differ: the split below is not plumb's)"))
    except FileNotFoundError:
        print("  check skipped: plumb has no attn.o.raw tap (rebuild plumb)")
    o_a, sc_a, _, _ = plumb_attend(q, kv, sink, scale, window)
    valid = np.isfinite(rel_sc)
    sd = (rel_sc != sc_a) & valid
    u, _ = ulps(np.where(sd, rel_sc, 0), np.where(sd, sc_a, 0))
    print(f"  scores q.k * scale, plumb's dot order vs the release's: {int(sd.sum())} of {int(valid.sum())} differ "
          f"(max {int(u.max()) if sd.any() else 0} f32 ulp, max |diff| {np.abs(rel_sc[sd] - sc_a[sd]).max() if sd.any() else 0:.3g}) "
          f"in {int(sd.any(axis=(1, 2)).sum())} of {P} positions")
    mb = np.repeat(rel_mb, 64, axis=-1)[..., :W]
    with np.errstate(invalid="ignore"):
        e_cr = np.where(valid, exp_cr(rel_sc - mb), 0).astype(np.float32)
    ed = (e_cr != rel_e) & valid
    u, _ = ulps(np.where(ed, rel_e, 0), np.where(ed, e_cr, 0))
    print(f"  exp(s - m_b) on the release's scores and block maxima, correctly rounded (plumb) vs the release's: "
          f"{int(ed.sum())} of {int(valid.sum())} differ (max {int(u.max()) if ed.any() else 0} f32 ulp), "
          f"{int((bf16(e_cr) != bf16(rel_e))[valid].sum())} after the bf16 rounding of P")
    runs = (("plumb's scores and exp", (o_a, None)),
            ("the release's scores, plumb's exp", plumb_attend(q, kv, sink, scale, window, scores=rel_sc)[::3]),
            ("the release's scores and exp", plumb_attend(q, kv, sink, scale, window, scores=rel_sc, probs=rel_e)[::3]))
    for what, (o_x, _) in runs:
        differ(z["attn0.o_raw"], o_x, L, f"o_raw, plumb's formula with {what}:", 0)
    l_x = runs[-1][1][1]
    ld = l_x != rel_l
    u, _ = ulps(np.where(ld, rel_l, 0), np.where(ld, l_x, 0))
    print(f"  l (sum of exp with the sink), plumb's sums of the release's exp vs the release's: {int(ld.sum())} of "
          f"{ld.size} (position, head) differ (max {int(u.max()) if ld.any() else 0} f32 ulp); what the last o_raw line "
          f"still counts comes from these sums and P.V's")
    return firsts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plumb", default="build/plumb")
    ap.add_argument("--plumb-taps", help="a `plumb logits --dump-taps` directory of the same tokens (instead of running plumb)")
    ap.add_argument("--step", type=int, default=17)
    ap.add_argument("--prefill", help="release_step17.py's step<N>_prefill.npz (not committed)")
    ap.add_argument("--attn0", help="release_step17.py's step<N>_attn0.npz (not committed): compare only layer 0's attention")
    a = ap.parse_args()
    rec = os.path.join(FIXTURE, "step17")
    cfg = json.load(open(os.path.join(FIXTURE, "config.json")))
    window = cfg["sliding_window"]
    prompt = np.load(os.path.join(FIXTURE, "prompt_300.ids.npy"))
    greedy = np.load(os.path.join(FIXTURE, "greedy_300.ids.npy"))
    ids = np.concatenate([prompt, greedy[: a.step]]).astype(np.int32)
    with tempfile.TemporaryDirectory() as d:
        taps_dir = a.plumb_taps or os.path.join(d, "taps")
        if not a.plumb_taps:
            np.save(os.path.join(d, "ids.npy"), ids)
            subprocess.run([a.plumb, "logits", "--model", FIXTURE, "--ids", os.path.join(d, "ids.npy"), "--numerics",
                            "faithful", "--backend", "cpu", "--out", os.path.join(d, "logits.npy"), "--dump-taps",
                            taps_dir], check=True, capture_output=True)
        tap = lambda name: np.load(os.path.join(taps_dir, name + ".npy"))
        if a.attn0:
            compare_attn0(tap, a.attn0)
            return
        z = np.load(os.path.join(rec, f"step{a.step}.npz"))
        meta = json.load(open(os.path.join(rec, f"step{a.step}.json")))
        logits = (tap("logits") if a.plumb_taps else np.load(os.path.join(d, "logits.npy")))[-1]
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
