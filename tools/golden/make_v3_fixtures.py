#!/usr/bin/env python3
"""Golden fixtures for plumb's DeepSeek-V3 architecture (issue 7), computed by HF transformers.

For each tiny config below this script
  1. draws every parameter of a tiny DeepSeek-V3 model at random (numpy, fixed seed), including
     the router's e_score_correction_bias,
  2. stores it in the HF V3 checkpoint layout (MODEL-SPEC 7: `model.` names, FP8 e4m3 with **F32**
     `weight_scale_inv` 128x128 block scales for the linears the release stores as FP8, bf16 for
     embed / norms / router / lm_head, F32 e_score_correction_bias) plus a config.json in the
     release's format,
  3. dequantizes exactly the stored values and loads them into `transformers.DeepseekV3ForCausalLM`
     (fp32, TF32 off, eager attention and experts, load_state_dict(strict=True)),
  4. saves HF's logits for every position of prompts of several lengths (one no-cache forward) and
     a greedy continuation (repeated full forwards), and cross-checks HF against the float64 numpy
     forward below (`np_forward`, written from MODEL-SPEC 7; reported in meta.json).

The FP8 codecs and the safetensors writer come from make_v4_fixtures.py. `--no-hf` writes the
checkpoints and runs the numpy forward only (no torch needed).
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_v4_fixtures import (  # noqa: E402  (shared codecs / writer)
    AMAX_FLOOR, E4M3_TABLE, bf16_bits, bf16_value, e4m3_encode, json_clean, logit_stats, read_safetensors,
    write_safetensors)

PROMPT_LENGTHS = [1, 3, 7, 64, 211]
GREEDY_PROMPTS = [7]
GREEDY_NEW = 32
MAX_ATTEMPTS = 40
PRODUCER = "plumb tools/golden/make_v3_fixtures.py"

# Both configs: dims not multiples of 128 (partial FP8 blocks), group-limited routing active,
# YaRN with factor > 1 and max_position = factor * original (HF derives the factor from that ratio
# when original_max_position_embeddings is present; equal here so the two readings agree).
CONFIGS = {
    # the release's mscale == mscale_all_dim: RoPE cos/sin factor 1, softmax scale x mscale^2
    "tiny-a": dict(seed=3001, vocab_size=320, hidden_size=144, num_hidden_layers=3, first_k_dense_replace=1,
                   num_attention_heads=4, q_lora_rank=96, kv_lora_rank=80, qk_nope_head_dim=48, qk_rope_head_dim=32,
                   v_head_dim=40, intermediate_size=136, moe_intermediate_size=64, n_routed_experts=16,
                   n_shared_experts=1, num_experts_per_tok=4, n_group=4, topk_group=2, routed_scaling_factor=2.5,
                   rope_theta=10000.0, factor=8.0, original_max_position_embeddings=128, mscale=1.0,
                   mscale_all_dim=1.0),
    # mscale != mscale_all_dim: HF also scales RoPE cos/sin by mscale(m)/mscale(m_all); 2 shared experts
    "tiny-b": dict(seed=3002, vocab_size=256, hidden_size=96, num_hidden_layers=2, first_k_dense_replace=1,
                   num_attention_heads=3, q_lora_rank=72, kv_lora_rank=56, qk_nope_head_dim=24, qk_rope_head_dim=16,
                   v_head_dim=20, intermediate_size=88, moe_intermediate_size=40, n_routed_experts=8,
                   n_shared_experts=2, num_experts_per_tok=3, n_group=4, topk_group=2, routed_scaling_factor=1.5,
                   rope_theta=50000.0, factor=40.0, original_max_position_embeddings=32, mscale=0.9,
                   mscale_all_dim=0.7),
    # the dims of the independent probe that saw cpu-order results move between runs (issue 13
    # item 3): not a committed fixture; `--configs probe --no-hf --out DIR` writes it for a device run
    "probe": dict(seed=3003, vocab_size=320, hidden_size=320, num_hidden_layers=2, first_k_dense_replace=1,
                  num_attention_heads=4, q_lora_rank=160, kv_lora_rank=96, qk_nope_head_dim=32, qk_rope_head_dim=16,
                  v_head_dim=48, intermediate_size=256, moe_intermediate_size=96, n_routed_experts=16,
                  n_shared_experts=1, num_experts_per_tok=4, n_group=4, topk_group=2, routed_scaling_factor=2.5,
                  rope_theta=10000.0, factor=8.0, original_max_position_embeddings=128, mscale=1.0,
                  mscale_all_dim=1.0),
}
RMS_EPS = 1e-6  # HF's q_a/kv_a layernorms use the class default 1e-6, not config.rms_norm_eps: keep them equal
HEAD_GAIN = 4.0


def full_cfg(name):
    c = dict(CONFIGS[name])
    c["name"] = name
    c["max_position_embeddings"] = int(c["factor"] * c["original_max_position_embeddings"])
    return c


# ----------------------------------------------------------------------------------------------
# FP8 with F32 block scales (the V3 release's format)
# ----------------------------------------------------------------------------------------------

def quant_fp8_f32scale(w, block=128):
    """[R, C] float32 -> (e4m3 bytes, F32 scales [ceil(R/128), ceil(C/128)]); scale = amax / 448
    in float32 (amax floored), like the release's block quantizer; W = e4m3 * scale."""
    R, C = w.shape
    nr, nc = -(-R // block), -(-C // block)
    pad = np.zeros((nr * block, nc * block), dtype=np.float64)
    pad[:R, :C] = w
    blocks = pad.reshape(nr, block, nc, block)
    scale = (np.maximum(np.abs(blocks).max(axis=(1, 3)), AMAX_FLOOR) / 448.0).astype(np.float32)
    q = np.clip(blocks / scale.astype(np.float64)[:, None, :, None], -448.0, 448.0)
    codes = e4m3_encode(q).reshape(nr * block, nc * block)[:R, :C]
    return np.ascontiguousarray(codes), scale


def dequant_fp8_f32scale(codes, scale, block=128):
    R, C = codes.shape
    s_full = np.repeat(np.repeat(scale, block, axis=0), block, axis=1)[:R, :C]
    return (E4M3_TABLE[codes] * s_full).astype(np.float32)


class Ckpt:
    """Stored tensors (name, dtype, array) and the fp32 values they dequantize to."""

    def __init__(self, rng):
        self.rng = rng
        self.stored = []
        self.values = {}

    def normal(self, shape, std):
        return (self.rng.standard_normal(shape, dtype=np.float32) * np.float32(std)).astype(np.float32)

    def bf16(self, name, w):
        bits = bf16_bits(w)
        self.stored.append((name, "BF16", bits))
        self.values[name] = bf16_value(bits)

    def f32(self, name, w):
        w = np.ascontiguousarray(w, dtype=np.float32)
        self.stored.append((name, "F32", w))
        self.values[name] = w

    def fp8(self, name, w):
        codes, sc = quant_fp8_f32scale(w)
        self.stored.append((name, "F8_E4M3", codes))
        self.stored.append((name + "_scale_inv", "F32", sc))
        self.values[name] = dequant_fp8_f32scale(codes, sc)

    def norm(self, name, n):
        self.bf16(name, self.rng.uniform(0.8, 1.2, size=(n,)).astype(np.float32))

    def linear(self, name, out, inp, gain=1.0):
        self.fp8(name, self.normal((out, inp), gain / np.sqrt(inp)))

    def mlp(self, p, inter, D):
        self.linear(p + "gate_proj.weight", inter, D, 1.5)
        self.linear(p + "up_proj.weight", inter, D, 1.5)
        self.linear(p + "down_proj.weight", D, inter, 1.0)


def build_ckpt(c):
    """Layout walk (the order plumb's layout_v3 walks): embed, layers, norm, lm_head."""
    ck = Ckpt(np.random.default_rng(c["seed"]))
    D, V, H = c["hidden_size"], c["vocab_size"], c["num_attention_heads"]
    dn, dr, dv, r = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"], c["kv_lora_rank"]
    ck.bf16("model.embed_tokens.weight", ck.normal((V, D), 1.0))
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        ck.norm(p + "input_layernorm.weight", D)
        ck.norm(p + "post_attention_layernorm.weight", D)
        a = p + "self_attn."
        ck.linear(a + "q_a_proj.weight", c["q_lora_rank"], D)
        ck.norm(a + "q_a_layernorm.weight", c["q_lora_rank"])
        ck.linear(a + "q_b_proj.weight", H * (dn + dr), c["q_lora_rank"])
        ck.linear(a + "kv_a_proj_with_mqa.weight", r + dr, D)
        ck.norm(a + "kv_a_layernorm.weight", r)
        ck.linear(a + "kv_b_proj.weight", H * (dn + dv), r)
        ck.linear(a + "o_proj.weight", D, H * dv, 1.0)
        m = p + "mlp."
        if i < c["first_k_dense_replace"]:
            ck.mlp(m, c["intermediate_size"], D)
            continue
        E, I = c["n_routed_experts"], c["moe_intermediate_size"]
        ck.bf16(m + "gate.weight", ck.normal((E, D), 2.0 / np.sqrt(D)))
        # bias >= 0 keeps every biased score > 0: HF before 5.x masked dropped groups with 0.0,
        # HF 5.17 and the DeepSeek reference with -inf; both agree when no kept score is negative
        ck.f32(m + "gate.e_score_correction_bias", ck.rng.uniform(0.0, 0.3, size=(E,)).astype(np.float32))
        ck.mlp(m + "shared_experts.", I * c["n_shared_experts"], D)
        for e in range(E):
            ck.mlp(f"{m}experts.{e}.", I, D)
    ck.norm("model.norm.weight", D)
    ck.bf16("lm_head.weight", ck.normal((V, D), HEAD_GAIN / np.sqrt(D)))
    return ck


def native_config_json(c):
    """config.json with the release's key set (tests/data/configs/deepseek-v3.json), tiny dims."""
    return {
        "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "aux_loss_alpha": 0.001, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1,
        "first_k_dense_replace": c["first_k_dense_replace"], "hidden_act": "silu", "hidden_size": c["hidden_size"],
        "initializer_range": 0.02, "intermediate_size": c["intermediate_size"], "kv_lora_rank": c["kv_lora_rank"],
        "max_position_embeddings": c["max_position_embeddings"], "model_type": "deepseek_v3",
        "moe_intermediate_size": c["moe_intermediate_size"], "moe_layer_freq": 1, "n_group": c["n_group"],
        "n_routed_experts": c["n_routed_experts"], "n_shared_experts": c["n_shared_experts"], "norm_topk_prob": True,
        "num_attention_heads": c["num_attention_heads"], "num_experts_per_tok": c["num_experts_per_tok"],
        "num_hidden_layers": c["num_hidden_layers"], "num_key_value_heads": c["num_attention_heads"],
        "num_nextn_predict_layers": 0, "pretraining_tp": 1, "q_lora_rank": c["q_lora_rank"],
        "qk_nope_head_dim": c["qk_nope_head_dim"], "qk_rope_head_dim": c["qk_rope_head_dim"],
        "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                "weight_block_size": [128, 128]},
        "rms_norm_eps": RMS_EPS,
        "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": c["factor"], "mscale": c["mscale"],
                         "mscale_all_dim": c["mscale_all_dim"],
                         "original_max_position_embeddings": c["original_max_position_embeddings"], "type": "yarn"},
        "rope_theta": c["rope_theta"], "routed_scaling_factor": c["routed_scaling_factor"], "scoring_func": "sigmoid",
        "seq_aux": True, "tie_word_embeddings": False, "topk_group": c["topk_group"], "topk_method": "noaux_tc",
        "torch_dtype": "bfloat16", "use_cache": True, "v_head_dim": c["v_head_dim"], "vocab_size": c["vocab_size"],
    }


def write_checkpoint(c, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    ck = build_ckpt(c)
    st_path = os.path.join(out_dir, "model.safetensors")
    write_safetensors(st_path, ck.stored, producer=PRODUCER)
    back = read_safetensors(st_path)
    assert set(back) == {t[0] for t in ck.stored}
    for name, dt, arr in ck.stored:
        assert back[name][0] == dt and np.array_equal(back[name][1], arr), name
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(native_config_json(c), f, indent=2, sort_keys=True)
        f.write("\n")
    return ck, st_path


# ----------------------------------------------------------------------------------------------
# float64 numpy forward (MODEL-SPEC 7, HF's rules where HF decides: see the comments)
# ----------------------------------------------------------------------------------------------

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


# ----------------------------------------------------------------------------------------------
# HF part (GPU machine)
# ----------------------------------------------------------------------------------------------

def make_hf_config(c, log):
    from transformers import DeepseekV3Config

    nc = native_config_json(c)
    keep = ("attention_bias", "attention_dropout", "bos_token_id", "eos_token_id", "first_k_dense_replace",
            "hidden_act", "hidden_size", "intermediate_size", "kv_lora_rank", "max_position_embeddings",
            "moe_intermediate_size", "n_group", "n_routed_experts", "n_shared_experts", "norm_topk_prob",
            "num_attention_heads", "num_experts_per_tok", "num_hidden_layers", "num_key_value_heads", "q_lora_rank",
            "qk_nope_head_dim", "qk_rope_head_dim", "rms_norm_eps", "routed_scaling_factor", "tie_word_embeddings",
            "topk_group", "v_head_dim", "vocab_size")
    common = {k: nc[k] for k in keep}
    common["rope_interleave"] = True  # the release's config has no such key; HF's default is True
    rs = dict(nc["rope_scaling"])
    rs.pop("type")
    modern = dict(common, rope_parameters=dict(rs, rope_type="yarn", rope_theta=c["rope_theta"]))
    legacy = dict(common, rope_theta=c["rope_theta"], rope_scaling=dict(rs, rope_type="yarn"))
    cfgs = []
    for label, kw in (("rope_parameters", modern), ("rope_scaling", legacy)):
        try:
            cfg = DeepseekV3Config(**kw)
        except Exception as ex:
            log(f"hf config: {label} spelling failed ({type(ex).__name__}: {ex})")
            continue
        assert cfg.tie_word_embeddings is False and cfg.first_k_dense_replace == c["first_k_dense_replace"]
        log(f"hf config ({label}): rope {getattr(cfg, 'rope_parameters', None) or getattr(cfg, 'rope_scaling', None)}, "
            f"rope_interleave {getattr(cfg, 'rope_interleave', None)}")
        cfgs.append(cfg)
    assert cfgs, "no config spelling accepted"
    return cfgs


def hf_scales(c, model):
    """What the built model will compute with, vs expected_scales / yarn_inv_freq."""
    rope_af, scale = expected_scales(c)
    r = {"expected": {"softmax_scale": scale, "rope_attention_scaling": rope_af}, "match": False}
    try:
        r["hf"] = {"softmax_scale": float(model.model.layers[0].self_attn.scaling),
                   "rope_attention_scaling": float(model.model.rotary_emb.attention_scaling)}
        hf_f = model.model.rotary_emb.inv_freq.double().cpu().numpy()
        sp = yarn_inv_freq(c)
        d = float(np.max(np.abs(hf_f - sp) / sp)) if hf_f.shape == sp.shape else float("inf")
        r["inv_freq_max_rel_diff_vs_numpy"] = d
        r["match"] = bool(d < 1e-6 and abs(r["hf"]["softmax_scale"] / scale - 1) < 1e-9
                          and abs(r["hf"]["rope_attention_scaling"] / rope_af - 1) < 1e-9)
    except Exception as ex:
        r["error"] = f"{type(ex).__name__}: {ex}"
    return r


def build_hf_model(cfg, log):
    import torch
    from transformers import DeepseekV3ForCausalLM

    model = None
    for kwargs in (dict(attn_implementation="eager", experts_implementation="eager", dtype=torch.float32),
                   dict(attn_implementation="eager", dtype=torch.float32),
                   dict(attn_implementation="eager", torch_dtype=torch.float32)):
        try:
            model = DeepseekV3ForCausalLM._from_config(cfg, **kwargs)
            log(f"hf model: _from_config({', '.join(kwargs)})")
            break
        except Exception as ex:
            log(f"hf model: _from_config({', '.join(kwargs)}) failed: {type(ex).__name__}: {ex}")
    assert model is not None
    if getattr(model.config, "_experts_implementation", "eager") not in (None, "eager"):
        try:
            model.set_experts_implementation("eager")
        except Exception:
            model.config._experts_implementation = "eager"
        log(f"hf model: experts implementation forced to {model.config._experts_implementation!r}")
    return model.float().cuda().eval()


def hf_state(c, W, sd):
    """HF state_dict values from our checkpoint names. HF may hold the routed experts per expert
    (experts.{e}.gate_proj.weight, same names as the checkpoint) or fused (experts.gate_up_proj
    [E, 2I, D] = gate rows then up rows, experts.down_proj [E, D, I]); a transposed fused layout
    is recognised by its shape (D != 2I and D != I in every config)."""
    out, rows = {}, []
    for k, ref in sd.items():
        shape = tuple(ref.shape)
        if k in W:
            v = W[k]
        elif k.endswith("mlp.experts.gate_up_proj") or k.endswith("mlp.experts.down_proj"):
            p = k[: -len("gate_up_proj" if k.endswith("gate_up_proj") else "down_proj")]
            E = c["n_routed_experts"]
            if k.endswith("gate_up_proj"):
                v = np.stack([np.concatenate([W[f"{p}{e}.gate_proj.weight"], W[f"{p}{e}.up_proj.weight"]], 0)
                              for e in range(E)])
            else:
                v = np.stack([W[f"{p}{e}.down_proj.weight"] for e in range(E)])
            if v.shape != shape and v.transpose(0, 2, 1).shape == shape:
                v = v.transpose(0, 2, 1)
        else:
            raise SystemExit(f"HF key without a checkpoint value: {k} {shape}")
        assert tuple(v.shape) == shape, f"{k}: ours {v.shape} vs HF {shape}"
        out[k] = np.ascontiguousarray(v)
        rows.append(k)
    used = {n for n in W if n in out} | {n for n in W if ".mlp.experts." in n}
    unused = sorted(set(W) - used)
    assert not unused, f"checkpoint tensors HF has no place for: {unused}"
    return out, rows


def run_hf(c, ck, out_dir, args, log):
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.manual_seed(c["seed"])
    W = ck.values

    for cfg in make_hf_config(c, log):  # the first spelling HF reads the YaRN fields from
        model = build_hf_model(cfg, log)
        scales = hf_scales(c, model)
        log(f"scales: {scales}")
        if scales["match"]:
            break
    else:
        log("WARNING: no config spelling gives the expected YaRN scales; keeping the last (see meta.json)")
    sd = model.state_dict()
    print(f"== {c['name']}: HF state_dict ({len(sd)} entries)")
    for k, v in sd.items():
        print(f"   {k} {tuple(v.shape)}")
    state, rows = hf_state(c, W, sd)
    tens = {k: torch.from_numpy(v).to(sd[k].dtype) for k, v in state.items()}
    res = model.load_state_dict(tens, strict=True)
    log(f"hf model: load_state_dict strict ok ({len(tens)} tensors) {res}")
    for k, v in model.state_dict().items():
        assert torch.equal(v.cpu(), tens[k]), k

    moe_x = {}
    def grab(i):
        def hook(mod, a, kw):
            x = a[0] if a else kw["hidden_states"]
            moe_x[i] = x.reshape(-1, x.shape[-1]).double().cpu().numpy()
        return hook

    hooks = [model.model.layers[i].mlp.register_forward_pre_hook(grab(i), with_kwargs=True)
             for i in range(c["first_k_dense_replace"], c["num_hidden_layers"])]

    def forward(ids):
        with torch.no_grad():
            out = model(input_ids=torch.as_tensor(ids, device="cuda")[None], use_cache=False)
        lg = out.logits[0].float().cpu().numpy()
        assert np.all(np.isfinite(lg)), "non-finite logits"
        return lg

    def greedy(ids):
        seq, gaps, rgap = list(ids), [], float("inf")
        for _ in range(GREEDY_NEW):
            lg = forward(np.array(seq, dtype=np.int64))[-1]
            rgap = min(rgap, router_margins(c, W, moe_x))
            s = np.sort(lg)
            gaps.append(float(s[-1] - s[-2]))
            seq.append(int(np.argmax(lg)))
        return np.array(seq[len(ids):], dtype=np.int64), min(gaps), rgap

    V = c["vocab_size"]
    prompts_meta, numpy_check = {}, {}
    for L in PROMPT_LENGTHS:
        for attempt in range(MAX_ATTEMPTS):
            ids = np.random.default_rng([c["seed"], L, attempt]).integers(2, V, size=L, dtype=np.int64)
            lg = forward(ids)
            gap, std = logit_stats(lg)
            rt_gap = router_margins(c, W, moe_x)
            g_ids, g_gap, g_rt = None, float("inf"), float("inf")
            ok = gap.min() >= args.min_logit_gap and rt_gap >= args.min_router_gap
            if ok and L in GREEDY_PROMPTS:
                g_ids, g_gap, g_rt = greedy(ids)
                ok = g_gap >= args.min_logit_gap and g_rt >= args.min_router_gap
            if ok:
                break
            log(f"  L={L} attempt {attempt}: near-tie (logit gap {gap.min():.2e}, router gap {rt_gap:.2e}, "
                f"greedy gaps {g_gap:.2e}/{g_rt:.2e}); redrawing")
        else:
            raise SystemExit(f"{c['name']} L={L}: no prompt without near-ties in {MAX_ATTEMPTS} attempts")
        np.save(os.path.join(out_dir, f"prompt_{L}.ids.npy"), ids)
        np.save(os.path.join(out_dir, f"prompt_{L}.logits.npy"), lg.astype(np.float32))
        pm = {"attempt": attempt, "logit_std_mean": float(std.mean()), "top1_top2_gap_min": float(gap.min()),
              "logit_absmax": float(np.abs(lg).max()), "router_min_gap": rt_gap}
        if g_ids is not None:
            np.save(os.path.join(out_dir, f"greedy_{L}.ids.npy"), g_ids)
            pm.update(greedy_new_ids=g_ids.tolist(), greedy_min_top1_top2_gap=g_gap, greedy_router_min_gap=g_rt)
        if L <= 64:  # the float64 numpy forward: an independent reading of the same checkpoint
            ref = np_forward(c, W, ids)
            numpy_check[str(L)] = {"max_rel_diff": float(np.abs(ref - lg).max() / np.abs(ref).max()),
                                   "argmax_equal": bool(np.array_equal(ref.argmax(-1), lg.argmax(-1)))}
        prompts_meta[str(L)] = pm
        log(f"  L={L}: {pm} numpy {numpy_check.get(str(L))}")
    for h in hooks:
        h.remove()

    gen_check = {}
    for L in GREEDY_PROMPTS:  # HF's own cached generate (reported only; the golden is no-cache)
        ids = np.load(os.path.join(out_dir, f"prompt_{L}.ids.npy"))
        want = np.load(os.path.join(out_dir, f"greedy_{L}.ids.npy"))
        try:
            with torch.no_grad():
                g = model.generate(torch.as_tensor(ids, device="cuda")[None], max_new_tokens=GREEDY_NEW,
                                   do_sample=False, eos_token_id=None, pad_token_id=0, use_cache=True)
            gen_check[str(L)] = {"same_ids": bool(np.array_equal(g[0, L:].cpu().numpy(), want))}
        except Exception as ex:
            gen_check[str(L)] = {"error": f"{type(ex).__name__}: {ex}"}
    log(f"  generate check: {gen_check}")
    return {"prompts": prompts_meta, "scales": scales, "numpy_float64_check": numpy_check,
            "hf_generate_check": gen_check, "hf_config": json.loads(json.dumps(cfg.to_dict(), default=str)),
            "hf_state_dict_keys": rows}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/data/golden/v3", help="fixture root (one folder per config)")
    ap.add_argument("--configs", default="tiny-a,tiny-b")
    ap.add_argument("--no-hf", action="store_true", help="checkpoints + numpy forward only (no torch)")
    ap.add_argument("--diag", default=None, help="folder for HF's source files")
    ap.add_argument("--min-logit-gap", type=float, default=1e-3)
    ap.add_argument("--min-router-gap", type=float, default=1e-5)
    args = ap.parse_args()
    t0 = time.time()

    def log(msg):
        print(f"[{time.time() - t0:7.1f}s] {msg}", flush=True)

    env = {}
    if not args.no_hf:
        import torch
        import transformers

        assert torch.cuda.is_available(), "needs the GPU machine (or use --no-hf)"
        env = {"transformers": transformers.__version__, "torch": torch.__version__, "numpy": np.__version__,
               "device": torch.cuda.get_device_name(0), "cuda": torch.version.cuda}
        log(f"env: {env}")
        if args.diag:
            import inspect
            import shutil

            import transformers.modeling_rope_utils as ru
            from transformers.models.deepseek_v3 import configuration_deepseek_v3, modeling_deepseek_v3

            os.makedirs(args.diag, exist_ok=True)
            for mod in (modeling_deepseek_v3, configuration_deepseek_v3, ru):
                shutil.copy(inspect.getsourcefile(mod), args.diag)

    for name in args.configs.split(","):
        c = full_cfg(name)
        out_dir = os.path.join(args.out, name)
        ck, st_path = write_checkpoint(c, out_dir)
        log(f"{name}: wrote {st_path} ({os.path.getsize(st_path)} bytes, {len(ck.stored)} tensors)")
        rope_af, scale = expected_scales(c)
        meta = {
            "config": name, "seed": c["seed"], "generated_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "command": " ".join([os.path.basename(sys.executable)] + sys.argv), "env": env,
            "prompt_lengths": PROMPT_LENGTHS,
            "greedy": {"prompts": GREEDY_PROMPTS, "new_tokens": GREEDY_NEW,
                       "method": "argmax of the last position of a full no-cache forward, repeated; no EOS stop"},
            "numerics": "HF transformers fp32 on GPU, TF32 off, eager attention and experts; weights are the "
                        "dequantized stored FP8 (F32 block scales) / bf16 / f32 values",
            "expected_scales": {"softmax_scale": scale, "rope_attention_scaling": rope_af},
            "checkpoint_sha256": hashlib.sha256(open(st_path, "rb").read()).hexdigest(),
        }
        if args.no_hf:
            ids = np.random.default_rng([c["seed"], 7, 0]).integers(2, c["vocab_size"], size=7, dtype=np.int64)
            lg = np_forward(c, ck.values, ids)
            log(f"{name}: numpy forward L=7 ok, logit std {lg.std():.2f}, argmax {lg.argmax(-1).tolist()}")
        else:
            meta.update(run_hf(c, ck, out_dir, args, log))
        with open(os.path.join(out_dir, "meta.json"), "w") as f:
            json.dump(json_clean(meta), f, indent=1, allow_nan=False)
            f.write("\n")
    log("done")


if __name__ == "__main__":
    main()
