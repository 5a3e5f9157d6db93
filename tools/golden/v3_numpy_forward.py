"""A float64 numpy forward of the tiny DeepSeek-V3 models (MODEL-SPEC 7, HF's rules where HF
decides), the cross-check of HF's logits and the source of the router's near-tie margins."""
from __future__ import annotations

import math

import numpy as np

from v3_checkpoint import RMS_EPS


def yarn_mscale(factor, m):
    return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0


def yarn_inv_freq(c):
    dim, base, f, orig = c["qk_rope_head_dim"], c["rope_theta"], c["factor"], c["original_max_position_embeddings"]

    def corr(rot):
        return dim * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))

    lo, hi = max(math.floor(corr(32)), 0), min(math.ceil(corr(1)), dim - 1)
    if lo == hi:
        hi += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - lo) / (hi - lo), 0, 1)
    pos = base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    extra = 1.0 - ramp
    return (1.0 / (f * pos)) * (1 - extra) + (1.0 / pos) * extra


def expected_scales(c):
    """(RoPE cos/sin factor, softmax scale) as HF computes them: the rope init's attention factor
    is mscale(f, mscale) / mscale(f, mscale_all_dim); the attention multiplies qk_head_dim^-0.5 by
    mscale(f, mscale_all_dim)^2."""
    f = c["factor"]
    rope_af = yarn_mscale(f, c["mscale"]) / yarn_mscale(f, c["mscale_all_dim"])
    s = (c["qk_nope_head_dim"] + c["qk_rope_head_dim"]) ** -0.5 * yarn_mscale(f, c["mscale_all_dim"]) ** 2
    return rope_af, s


def np_forward(c, W, ids):
    """Logits [T, V] in float64 for one sequence (positions 0..T-1), naive MLA."""
    w = {k: v.astype(np.float64) for k, v in W.items()}
    H = c["num_attention_heads"]
    dn, dr, dv, r = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"], c["kv_lora_rank"]
    T = len(ids)
    rope_af, scale = expected_scales(c)
    ang = np.arange(T, dtype=np.float64)[:, None] * yarn_inv_freq(c)[None, :]
    cos, sin = np.cos(ang) * rope_af, np.sin(ang) * rope_af

    def rms(x, g):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + RMS_EPS) * g

    def rope(x):  # interleaved pairs (2i, 2i+1); x [..., T, dr] with positions on axis -2
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = a * sin + b * cos
        return out

    def mlp(x, p):
        g, u = x @ w[p + "gate_proj.weight"].T, x @ w[p + "up_proj.weight"].T
        return (g / (1 + np.exp(-g)) * u) @ w[p + "down_proj.weight"].T

    h = w["model.embed_tokens.weight"][np.asarray(ids)]
    causal = np.triu(np.full((T, T), -np.inf), 1)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        a = p + "self_attn."
        x = rms(h, w[p + "input_layernorm.weight"])
        q = rms(x @ w[a + "q_a_proj.weight"].T, w[a + "q_a_layernorm.weight"]) @ w[a + "q_b_proj.weight"].T
        q = q.reshape(T, H, dn + dr).transpose(1, 0, 2)
        kv = x @ w[a + "kv_a_proj_with_mqa.weight"].T
        lat, kpe = rms(kv[:, :r], w[a + "kv_a_layernorm.weight"]), rope(kv[:, r:])
        kvb = (lat @ w[a + "kv_b_proj.weight"].T).reshape(T, H, dn + dv).transpose(1, 0, 2)
        s = (q[..., :dn] @ kvb[..., :dn].transpose(0, 2, 1) + rope(q[..., dn:]) @ kpe.T) * scale + causal
        pr = np.exp(s - s.max(-1, keepdims=True))
        pr /= pr.sum(-1, keepdims=True)
        o = (pr @ kvb[..., dn:]).transpose(1, 0, 2).reshape(T, H * dv)
        h = h + o @ w[a + "o_proj.weight"].T
        x = rms(h, w[p + "post_attention_layernorm.weight"])
        m = p + "mlp."
        if i < c["first_k_dense_replace"]:
            h = h + mlp(x, m)
            continue
        E, G, k = c["n_routed_experts"], c["n_group"], c["num_experts_per_tok"]
        sc = 1.0 / (1.0 + np.exp(-(x @ w[m + "gate.weight"].T)))
        biased = sc + w[m + "gate.e_score_correction_bias"]
        grp = np.sort(biased.reshape(T, G, E // G), -1)[..., -2:].sum(-1)
        keep = np.argsort(-grp, -1, kind="stable")[:, : c["topk_group"]]
        mask = np.zeros((T, G), dtype=bool)
        np.put_along_axis(mask, keep, True, -1)
        choice = np.where(np.repeat(mask, E // G, -1), biased, -np.inf)
        top = np.argsort(-choice, -1, kind="stable")[:, :k]
        wt = np.take_along_axis(sc, top, -1)
        wt = wt / (wt.sum(-1, keepdims=True) + 1e-20) * c["routed_scaling_factor"]
        y = mlp(x, m + "shared_experts.")
        for t in range(T):
            for j in range(k):
                y[t] += wt[t, j] * mlp(x[t : t + 1], f"{m}experts.{top[t, j]}.")[0]
        h = h + y
    return rms(h, w["model.norm.weight"]) @ w["lm_head.weight"].T


def router_margins(c, W, x_by_layer):
    """Smallest gaps at the two top-k cuts (groups, experts) over all tokens: near-ties there
    make the golden depend on rounding, so the prompt is redrawn."""
    gaps = []
    E, G, k, tg = c["n_routed_experts"], c["n_group"], c["num_experts_per_tok"], c["topk_group"]
    for i, x in x_by_layer.items():
        m = f"model.layers.{i}.mlp."
        biased = 1.0 / (1.0 + np.exp(-(x @ W[m + "gate.weight"].astype(np.float64).T)))
        biased = biased + W[m + "gate.e_score_correction_bias"]
        grp = np.sort(np.sort(biased.reshape(-1, G, E // G), -1)[..., -2:].sum(-1), -1)
        gaps.append(float((grp[:, -tg] - grp[:, -tg - 1]).min()))
        keepg = np.argsort(-np.sort(biased.reshape(-1, G, E // G), -1)[..., -2:].sum(-1), -1, kind="stable")[:, :tg]
        mask = np.zeros((len(x), G), dtype=bool)
        np.put_along_axis(mask, keepg, True, -1)
        choice = np.sort(np.where(np.repeat(mask, E // G, -1), biased, -np.inf), -1)
        gaps.append(float((choice[:, -k] - choice[:, -k - 1]).min()))
    return min(gaps) if gaps else float("inf")
