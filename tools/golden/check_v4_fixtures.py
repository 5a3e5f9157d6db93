#!/usr/bin/env python3
"""Independent check of the HF golden fixtures: a float64 numpy forward of DeepSeek-V4 written
from MODEL-SPEC section 3 (reference numerics: no activation quantization), reading the committed
model.safetensors with its own decoder (MODEL-SPEC 4.4). It shares no code with
make_v4_fixtures.py or with transformers.

    python3 tools/golden/check_v4_fixtures.py [tests/data/golden/v4/tiny-a ...]

For every prompt it prints max|ours - HF| / max|HF| and whether the argmax agrees at every
position, and it replays the greedy continuations. Needs numpy only (2 cores: a few seconds).
It is also a readable oracle for debugging: `forward(..., taps=dict)` fills named intermediates.
"""
import json
import os
import struct
import sys

import numpy as np

# ---------------------------------------------------------------------------------------------
# checkpoint decoding (MODEL-SPEC 4.4)
# ---------------------------------------------------------------------------------------------


def e4m3_value(b):
    b = b.astype(np.int64)
    s = np.where(b & 0x80, -1.0, 1.0)
    e = (b >> 3) & 0xF
    m = b & 7
    v = np.where(e == 0, m * 2.0**-9, (1 + m / 8.0) * np.exp2(e - 7.0))
    v = np.where((b & 0x7F) == 0x7F, np.nan, v)
    return s * v


FP4 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float64)


def load(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    hdr = json.loads(raw[8 : 8 + n])
    hdr.pop("__metadata__", None)
    np_dt = {"BF16": "<u2", "F32": "<f4", "I64": "<i8", "I8": "i1", "F8_E4M3": "u1", "F8_E8M0": "u1"}
    t = {}
    for k, h in hdr.items():
        b, e = h["data_offsets"]
        t[k] = (h["dtype"], np.frombuffer(raw[8 + n + b : 8 + n + e], dtype=np_dt[h["dtype"]]).reshape(h["shape"]))
    W = {}
    for k, (dt, a) in t.items():
        if k.endswith(".scale"):
            continue
        if dt == "BF16":
            W[k] = (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        elif dt in ("F32", "I64"):
            W[k] = a.astype(np.float64 if dt == "F32" else np.int64)
        elif dt == "F8_E4M3":  # 128x128 block scales
            s = np.exp2(t[k[:-6] + "scale"][1].astype(np.float64) - 127)
            s = np.repeat(np.repeat(s, 128, 0), 128, 1)[: a.shape[0], : a.shape[1]]
            W[k] = e4m3_value(a) * s
        elif dt == "I8":  # FP4 e2m1, low nibble = even element, 1x32 scales
            u = a.view(np.uint8).astype(np.int64)
            codes = np.stack([u & 0xF, u >> 4], axis=-1).reshape(a.shape[0], -1)
            v = FP4[codes & 7] * np.where(codes & 8, -1.0, 1.0)
            s = np.exp2(t[k[:-6] + "scale"][1].astype(np.float64) - 127)
            W[k] = v * np.repeat(s, 32, 1)
        else:
            raise ValueError(f"{k}: unexpected dtype {dt}")
    return W


# ---------------------------------------------------------------------------------------------
# forward (MODEL-SPEC 3), float64
# ---------------------------------------------------------------------------------------------


def rms(x, w=None, eps=1e-6):
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y if w is None else y * w


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def inv_freq(cfg, compress):
    d = cfg["qk_rope_head_dim"]
    theta = cfg["compress_rope_theta"] if compress else cfg["rope_theta"]
    f = theta ** (-np.arange(0, d, 2) / d)
    if not compress:
        return f
    rs = cfg["rope_scaling"]
    L0, fac = rs["original_max_position_embeddings"], rs["factor"]
    low = max(np.floor(d * np.log(L0 / (rs["beta_fast"] * 2 * np.pi)) / (2 * np.log(theta))), 0)
    high = min(np.ceil(d * np.log(L0 / (rs["beta_slow"] * 2 * np.pi)) / (2 * np.log(theta))), d - 1)
    ramp = np.clip((np.arange(d // 2) - low) / max(high - low, 1e-3), 0, 1)
    return f * (1 - ramp) + f / fac * ramp


def rope(x, pos, f, inverse=False):
    """Interleaved pairs on the last 2*len(f) dims; pos broadcasts over x's leading dims."""
    R = 2 * len(f)
    ang = np.asarray(pos, dtype=np.float64)[..., None] * f
    if inverse:
        ang = -ang
    c, s = np.cos(ang), np.sin(ang)
    y = x.copy()
    a, b = x[..., -R::2], x[..., -R + 1 :: 2]
    y[..., -R::2] = a * c - b * s
    y[..., -R + 1 :: 2] = a * s + b * c
    return y


def hc_pre(X, fn, base, scale, iters, eps):
    T, n, D = X.shape
    xf = X.reshape(T, n * D)
    m = (xf @ fn.T) / np.sqrt(np.mean(xf * xf, -1, keepdims=True) + 1e-6)
    pre = sigmoid(m[:, :n] * scale[0] + base[:n]) + eps
    post = 2 * sigmoid(m[:, n : 2 * n] * scale[1] + base[n : 2 * n])
    C = (m[:, 2 * n :] * scale[2] + base[2 * n :]).reshape(T, n, n)
    C = np.exp(C - C.max(-1, keepdims=True))
    C = C / C.sum(-1, keepdims=True) + eps
    C = C / (C.sum(-2, keepdims=True) + eps)
    for _ in range(iters - 1):
        C = C / (C.sum(-1, keepdims=True) + eps)
        C = C / (C.sum(-2, keepdims=True) + eps)
    y = np.einsum("ti,tid->td", pre, X)
    return y, post, C


def hc_post(out, X, post, C):
    return post[:, :, None] * out[:, None, :] + np.einsum("tij,tid->tjd", C, X)


def compress(x, W, p, ratio, d, f, eps):
    """All complete-window entries of a compressor (MODEL-SPEC 3.4), normed and roped."""
    T = x.shape[0]
    a = x @ W[p + "wkv.weight"].T
    z = x @ W[p + "wgate.weight"].T + W[p + "ape"][np.arange(T) % ratio]
    out = []
    for w in range(T // ratio):
        cur = slice(w * ratio, (w + 1) * ratio)
        if ratio == 4:  # overlap: A-half of window w-1 and B-half of window w
            A, Z = a[cur, d:], z[cur, d:]
            if w > 0:
                prev = slice((w - 1) * ratio, w * ratio)
                A, Z = np.concatenate([a[prev, :d], A]), np.concatenate([z[prev, :d], Z])
        else:
            A, Z = a[cur], z[cur]
        P = np.exp(Z - Z.max(0))
        P /= P.sum(0)
        out.append((P * A).sum(0))
    if not out:
        return np.zeros((0, d))
    c = rms(np.array(out), W[p + "norm.weight"], eps)
    return rope(c, np.arange(len(out)) * ratio, f)


def attention(x, W, p, cfg, layer, pos, taps):
    H, Dh, eps = cfg["num_attention_heads"], cfg["head_dim"], cfg["rms_norm_eps"]
    ratio = cfg["compress_ratios"][layer]
    f = inv_freq(cfg, ratio != 0)
    T = x.shape[0]
    qr = rms(x @ W[p + "wq_a.weight"].T, W[p + "q_norm.weight"], eps)
    q = rope(rms((qr @ W[p + "wq_b.weight"].T).reshape(T, H, Dh), None, eps), pos[:, None], f)
    kv = rope(rms(x @ W[p + "wkv.weight"].T, W[p + "kv_norm.weight"], eps), pos, f)
    ckv = compress(x, W, p + "compressor.", ratio, Dh, f, eps) if ratio else np.zeros((0, Dh))
    if ratio == 4:  # Lightning indexer (MODEL-SPEC 3.5), no Hadamard / FP4 in reference numerics
        HI, dI = cfg["index_n_heads"], cfg["index_head_dim"]
        K = compress(x, W, p + "indexer.compressor.", 4, dI, f, eps)
        qI = rope((qr @ W[p + "indexer.wq_b.weight"].T).reshape(T, HI, dI), pos[:, None], f)
        wI = (x @ W[p + "indexer.weights_proj.weight"].T) * (dI**-0.5 * HI**-0.5)
        score = np.einsum("th,ths->ts", wI, np.maximum(np.einsum("thd,sd->ths", qI, K), 0))
    sink = W[p + "attn_sink"]
    o = np.zeros((T, H, Dh))
    for t in range(T):
        cand = [kv[max(0, t - cfg["sliding_window"] + 1) : t + 1]]
        n_valid = (int(pos[t]) + 1) // ratio if ratio else 0
        if ratio == 4 and n_valid:
            sel = np.argsort(-score[t, :n_valid], kind="stable")[: cfg["index_topk"]]
            cand.append(ckv[np.sort(sel)])
            if taps is not None:
                taps.setdefault(f"L{layer}.indexer_topk", []).append(np.sort(sel))
                k = cfg["index_topk"]
                if n_valid > k:  # k-th minus (k+1)-th score, relative to the row's largest |score|
                    srt = np.sort(score[t, :n_valid])[::-1]
                    taps.setdefault(f"L{layer}.indexer_gap", {})[t] = (srt[k - 1] - srt[k]) / np.abs(srt).max()
        elif ratio and n_valid:
            cand.append(ckv[:n_valid])
        Kc = np.concatenate(cand)
        s = (q[t] @ Kc.T) / np.sqrt(Dh)  # [H, n]
        M = np.maximum(s.max(-1), sink)  # the sink is one more logit; any M >= max works
        e = np.exp(s - M[:, None])
        o[t] = (e @ Kc) / (e.sum(-1) + np.exp(sink - M))[:, None]
    o = rope(o, pos[:, None], f, inverse=True)
    g, ol = cfg["o_groups"], cfg["o_lora_rank"]
    og = o.reshape(T, g, H * Dh // g)
    wo_a = W[p + "wo_a.weight"].reshape(g, ol, H * Dh // g)
    u = np.einsum("tgi,goi->tgo", og, wo_a).reshape(T, g * ol)
    return u @ W[p + "wo_b.weight"].T


def moe(x, W, p, cfg, ids, hash_layer, taps=None):
    lim, k = cfg["swiglu_limit"], cfg["num_experts_per_tok"]
    score = np.sqrt(np.logaddexp(0, x @ W[p + "gate.weight"].T))
    if hash_layer:
        idx = W[p + "gate.tid2eid"][ids]
    else:
        idx = np.argsort(-(score + W[p + "gate.bias"]), axis=-1, kind="stable")[:, :k]
        if taps is not None:  # k-th minus (k+1)-th biased score per token
            srt = -np.sort(-(score + W[p + "gate.bias"]), axis=-1)
            taps[p + "router_gap"] = srt[:, k - 1] - srt[:, k]
    wt = np.take_along_axis(score, idx, -1)
    wt = wt / wt.sum(-1, keepdims=True) * cfg["routed_scaling_factor"]

    def swiglu(xx, q, rw=1.0):
        gt = np.minimum(xx @ W[q + "w1.weight"].T, lim)
        up = np.clip(xx @ W[q + "w3.weight"].T, -lim, lim)
        h = gt / (1 + np.exp(-gt)) * up * rw
        return h @ W[q + "w2.weight"].T

    y = swiglu(x, p + "shared_experts.")
    for t in range(x.shape[0]):
        for j in range(k):
            y[t] += swiglu(x[t : t + 1], f"{p}experts.{int(idx[t, j])}.", wt[t, j])[0]
    return y


def forward(W, cfg, ids, taps=None):
    ids = np.asarray(ids, dtype=np.int64)
    T, n, eps = len(ids), cfg["hc_mult"], cfg["rms_norm_eps"]
    pos = np.arange(T)
    X = np.repeat(W["embed.weight"][ids][:, None, :], n, axis=1)
    it, hce = cfg["hc_sinkhorn_iters"], cfg["hc_eps"]
    for i in range(cfg["num_hidden_layers"]):
        p = f"layers.{i}."
        y, post, C = hc_pre(X, W[p + "hc_attn_fn"], W[p + "hc_attn_base"], W[p + "hc_attn_scale"], it, hce)
        a = attention(rms(y, W[p + "attn_norm.weight"], eps), W, p + "attn.", cfg, i, pos, taps)
        X = hc_post(a, X, post, C)
        y, post, C = hc_pre(X, W[p + "hc_ffn_fn"], W[p + "hc_ffn_base"], W[p + "hc_ffn_scale"], it, hce)
        m = moe(rms(y, W[p + "ffn_norm.weight"], eps), W, p + "ffn.", cfg, ids, i < cfg["num_hash_layers"], taps)
        X = hc_post(m, X, post, C)
        if taps is not None:
            taps[f"L{i}.X"] = X
    xf = X.reshape(T, -1)
    mm = (xf @ W["hc_head_fn"].T) / np.sqrt(np.mean(xf * xf, -1, keepdims=True) + 1e-6)
    pre = sigmoid(mm * W["hc_head_scale"][0] + W["hc_head_base"]) + hce
    h = rms(np.einsum("ti,tid->td", pre, X), W["norm.weight"], eps)
    return h @ W["head.weight"].T


def check(fixture_dir):
    cfg = json.load(open(os.path.join(fixture_dir, "config.json")))
    W = load(os.path.join(fixture_dir, "model.safetensors"))
    worst, ok = 0.0, True
    for fn in sorted(os.listdir(fixture_dir)):
        if not (fn.startswith("prompt_") and fn.endswith(".ids.npy")):
            continue
        L = fn[len("prompt_") : -len(".ids.npy")]
        ids = np.load(os.path.join(fixture_dir, fn))
        ref = np.load(os.path.join(fixture_dir, f"prompt_{L}.logits.npy")).astype(np.float64)
        got = forward(W, cfg, ids)
        rel = np.abs(got - ref).max() / np.abs(ref).max()
        same = bool(np.array_equal(got.argmax(-1), ref.argmax(-1)))
        worst = max(worst, rel)
        ok &= same and rel <= 1e-4
        line = f"{os.path.basename(fixture_dir)} prompt {L:>3}: max rel diff {rel:.2e}, argmax {'same' if same else 'DIFFERENT'}"
        gpath = os.path.join(fixture_dir, f"greedy_{L}.ids.npy")
        if os.path.exists(gpath):
            want = np.load(gpath)
            seq = list(ids)
            for _ in range(len(want)):
                seq.append(int(forward(W, cfg, seq)[-1].argmax()))
            gsame = bool(np.array_equal(np.array(seq[len(ids) :]), want))
            ok &= gsame
            line += f"; greedy {len(want)} tokens {'same' if gsame else 'DIFFERENT'}"
        print(line, flush=True)
    return ok, worst


if __name__ == "__main__":
    dirs = sys.argv[1:] or [os.path.join("tests/data/golden/v4", d) for d in ("tiny-a", "tiny-b")]
    all_ok = True
    for d in dirs:
        ok, worst = check(d)
        print(f"{d}: {'OK' if ok else 'MISMATCH'} (worst max rel diff {worst:.2e})")
        all_ok &= ok
    sys.exit(0 if all_ok else 1)
