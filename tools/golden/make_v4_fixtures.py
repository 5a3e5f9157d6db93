#!/usr/bin/env python3
"""Golden fixtures for plumb's DeepSeek-V4 `reference` profile, computed by HF transformers.

For each tiny config below this script
  1. draws every parameter of a tiny DeepSeek-V4 model at random (numpy, fixed seed),
  2. stores it in the official checkpoint layout (MODEL-SPEC 4.2-4.5: native names, FP8 e4m3 +
     ue8m0 128x128 block scales, FP4 e2m1 packed I8 + ue8m0 1x32 scales, bf16 / f32 / i64),
     written by the small safetensors writer below, plus a config.json in the release's format,
  3. dequantizes exactly the stored values (MODEL-SPEC 4.4, our own code) and loads them into
     `transformers.DeepseekV4ForCausalLM` in fp32 (TF32 off, eager attention, eager experts)
     through our own native -> HF name map (strict: every HF tensor must be set, 1:1),
  4. saves the HF logits of every position of several prompts (one forward, no cache) and a
     greedy continuation computed by repeated full forwards (no cache), and checks that HF's own
     cached `generate` agrees (reported only: HF's cache path is not the golden).

The numpy part (weights, quantization, writer) also runs without torch: `--no-hf` writes the
checkpoints only, `--selftest` checks the codecs and the writer on hand-computed cases.
See tools/golden/README.md for how to regenerate on the GPU machine.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import struct
import sys
import time

import numpy as np

from release_format import (  # codecs, quantizers, safetensors I/O
    AMAX_FLOOR, E2M1_TABLE, E4M3_TABLE, ST_DTYPES, bf16_bits, bf16_value, dequant_fp4_row32, dequant_fp8_block,
    e2m1_encode, e4m3_encode, e8m0_from_exponent, e8m0_value, pow2_ceil_exponent, quant_fp4_row32, quant_fp8_block,
    read_safetensors, write_safetensors)

# ----------------------------------------------------------------------------------------------
# Configs
# ----------------------------------------------------------------------------------------------

PROMPT_LENGTHS = [1, 2, 3, 4, 5, 7, 8, 17, 64, 131, 259]
GREEDY_PROMPTS = [17, 131]  # greedy continuation for these prompt lengths
GREEDY_NEW = 32
MAX_ATTEMPTS = 100  # prompt redraws allowed when a draw has a near-tie (see run_hf)

# Everything the native config.json holds (same key set as the release, MODEL-SPEC 1), plus the
# per-config seed / init gains (not written to config.json).
CONFIGS = {
    # SWA, CSA (hash-routed), HCA ratio 8, CSA; window 8; rope 64 with the release's YaRN numbers.
    "tiny-a": dict(
        seed=1001,
        vocab_size=448,
        hidden_size=160,
        num_hidden_layers=4,
        compress_ratios=[0, 4, 8, 4, 0],  # last entry: MTP layer
        num_hash_layers=2,
        num_attention_heads=4,
        head_dim=128,
        qk_rope_head_dim=64,
        q_lora_rank=96,
        o_groups=2,
        o_lora_rank=64,
        sliding_window=8,
        n_routed_experts=8,
        num_experts_per_tok=3,
        n_shared_experts=1,
        moe_intermediate_size=96,
        index_n_heads=6,
        index_head_dim=128,
        index_topk=4,
        routed_scaling_factor=1.5,
        swiglu_limit=10.0,
        hc_sinkhorn_iters=20,
        rope_scaling_original=65536,
        max_position_embeddings=1048576,
        expert_gain=1.0,
    ),
    # SWA, SWA, CSA (hash-routed), HCA ratio 128, CSA; window 16; rope 32 (head_dim 96) with
    # YaRN original 4096; small swiglu_limit (3) and larger expert inputs so the clamp is active;
    # 7 Sinkhorn iterations and route scale 2.5 so nothing can hide behind the release's constants.
    "tiny-b": dict(
        seed=2002,
        vocab_size=400,
        hidden_size=96,
        num_hidden_layers=5,
        compress_ratios=[0, 0, 4, 128, 4, 0],
        num_hash_layers=3,
        num_attention_heads=4,
        head_dim=96,
        qk_rope_head_dim=32,
        q_lora_rank=64,
        o_groups=4,
        o_lora_rank=48,
        sliding_window=16,
        n_routed_experts=12,
        num_experts_per_tok=2,
        n_shared_experts=1,
        moe_intermediate_size=64,
        index_n_heads=8,
        index_head_dim=64,
        index_topk=8,
        routed_scaling_factor=2.5,
        swiglu_limit=3.0,
        hc_sinkhorn_iters=7,
        rope_scaling_original=4096,
        max_position_embeddings=65536,
        expert_gain=2.0,
    ),
}

COMMON = dict(
    num_key_value_heads=1,
    hc_mult=4,
    hc_eps=1e-6,
    rms_norm_eps=1e-6,
    rope_theta=10000.0,
    compress_rope_theta=160000.0,
    yarn_factor=16.0,
    beta_fast=32.0,
    beta_slow=1.0,
    num_nextn_predict_layers=1,
)

HEAD_GAIN = 4.0  # head ~ N(0, (4/sqrt(D))^2): logits std ~ 4 for unit-RMS final hidden states


def full_cfg(name):
    c = dict(COMMON)
    c.update(CONFIGS[name])
    c["name"] = name
    return c


def native_config_json(c):
    """config.json with exactly the release's key set (tests/data/configs/deepseek-v4-flash.json)."""
    assert len(c["compress_ratios"]) == c["num_hidden_layers"] + c["num_nextn_predict_layers"]
    return {
        "architectures": ["DeepseekV4ForCausalLM"],
        "attention_bias": False,
        "bos_token_id": 0,
        "compress_ratios": list(c["compress_ratios"]),
        "compress_rope_theta": int(c["compress_rope_theta"]),
        "eos_token_id": 1,
        "expert_dtype": "fp4",
        "hc_eps": c["hc_eps"],
        "hc_mult": c["hc_mult"],
        "hc_sinkhorn_iters": c["hc_sinkhorn_iters"],
        "head_dim": c["head_dim"],
        "hidden_act": "silu",
        "hidden_size": c["hidden_size"],
        "index_head_dim": c["index_head_dim"],
        "index_n_heads": c["index_n_heads"],
        "index_topk": c["index_topk"],
        "max_position_embeddings": c["max_position_embeddings"],
        "model_type": "deepseek_v4",
        "moe_intermediate_size": c["moe_intermediate_size"],
        "n_routed_experts": c["n_routed_experts"],
        "n_shared_experts": c["n_shared_experts"],
        "norm_topk_prob": True,
        "num_attention_heads": c["num_attention_heads"],
        "num_experts_per_tok": c["num_experts_per_tok"],
        "num_hash_layers": c["num_hash_layers"],
        "num_hidden_layers": c["num_hidden_layers"],
        "num_key_value_heads": 1,
        "num_nextn_predict_layers": c["num_nextn_predict_layers"],
        "o_groups": c["o_groups"],
        "o_lora_rank": c["o_lora_rank"],
        "q_lora_rank": c["q_lora_rank"],
        "qk_rope_head_dim": c["qk_rope_head_dim"],
        "quantization_config": {
            "activation_scheme": "dynamic",
            "fmt": "e4m3",
            "quant_method": "fp8",
            "scale_fmt": "ue8m0",
            "weight_block_size": [128, 128],
        },
        "rms_norm_eps": c["rms_norm_eps"],
        "rope_scaling": {
            "beta_fast": int(c["beta_fast"]),
            "beta_slow": int(c["beta_slow"]),
            "factor": int(c["yarn_factor"]),
            "original_max_position_embeddings": c["rope_scaling_original"],
            "type": "yarn",
        },
        "rope_theta": int(c["rope_theta"]),
        "routed_scaling_factor": c["routed_scaling_factor"],
        "scoring_func": "sqrtsoftplus",
        "sliding_window": c["sliding_window"],
        "swiglu_limit": c["swiglu_limit"],
        "tie_word_embeddings": False,
        "topk_method": "noaux_tc",
        "torch_dtype": "bfloat16",
        "transformers_version": "4.57.1",
        "vocab_size": c["vocab_size"],
    }


# ----------------------------------------------------------------------------------------------
# Random native checkpoint (layout: MODEL-SPEC 4.2-4.5, same walk as src/plumb/model/layout_v4.h)
# ----------------------------------------------------------------------------------------------

class Native:
    """Collects stored tensors and their dequantized fp32 (or int64) values."""

    def __init__(self, rng):
        self.rng = rng
        self.stored = []  # (name, dtype, array)
        self.values = {}  # name -> dequantized np array (float32 / int64), keyed by weight name
        self.kinds = {}   # name -> "fp8" | "fp4" | "bf16" | "f32" | "i64"

    def normal(self, shape, std):
        return (self.rng.standard_normal(shape, dtype=np.float32) * np.float32(std)).astype(np.float32)

    def uniform(self, shape, lo, hi):
        return self.rng.uniform(lo, hi, size=shape).astype(np.float32)

    def bf16(self, name, w):
        bits = bf16_bits(w)
        self.stored.append((name, "BF16", bits))
        self.values[name] = bf16_value(bits)
        self.kinds[name] = "bf16"

    def f32(self, name, w):
        w = np.ascontiguousarray(w, dtype=np.float32)
        self.stored.append((name, "F32", w))
        self.values[name] = w
        self.kinds[name] = "f32"

    def i64(self, name, w):
        w = np.ascontiguousarray(w, dtype=np.int64)
        self.stored.append((name, "I64", w))
        self.values[name] = w
        self.kinds[name] = "i64"

    def fp8(self, name, w):
        assert name.endswith(".weight")
        codes, sc = quant_fp8_block(w)
        self.stored.append((name, "F8_E4M3", codes))
        self.stored.append((name[: -len("weight")] + "scale", "F8_E8M0", sc))
        self.values[name] = dequant_fp8_block(codes, sc)
        self.kinds[name] = "fp8"

    def fp4(self, name, w):
        assert name.endswith(".weight")
        packed, sc = quant_fp4_row32(w)
        self.stored.append((name, "I8", packed))
        self.stored.append((name[: -len("weight")] + "scale", "F8_E8M0", sc))
        self.values[name] = dequant_fp4_row32(packed, sc)
        self.kinds[name] = "fp4"

    # -- pieces -----------------------------------------------------------------------------
    def norm(self, name, n):
        self.bf16(name, self.uniform((n,), 0.9, 1.1))

    def hc(self, prefix, n_out, n_scale, width):
        self.f32(prefix + "_fn", self.normal((n_out, width), 1.0 / np.sqrt(width)))
        self.f32(prefix + "_base", self.normal((n_out,), 0.5))
        self.f32(prefix + "_scale", self.uniform((n_scale,), 0.5, 1.5))

    def compressor(self, p, ratio, d, D):
        c = 2 if ratio == 4 else 1
        self.bf16(p + "wkv.weight", self.normal((c * d, D), 1.0 / np.sqrt(D)))
        self.bf16(p + "wgate.weight", self.normal((c * d, D), 1.5 / np.sqrt(D)))
        self.f32(p + "ape", self.normal((ratio, c * d), 1.0))
        self.norm(p + "norm.weight", d)

    def expert(self, p, inter, D, routed, gain):
        put = self.fp4 if routed else self.fp8
        put(p + "w1.weight", self.normal((inter, D), gain / np.sqrt(D)))
        put(p + "w2.weight", self.normal((D, inter), 1.0 / (gain * np.sqrt(inter))))
        put(p + "w3.weight", self.normal((inter, D), gain / np.sqrt(D)))

    def block(self, c, p, index, hash_layer):
        D, H, Dh, hc = c["hidden_size"], c["num_attention_heads"], c["head_dim"], c["hc_mult"]
        ql, g, ol = c["q_lora_rank"], c["o_groups"], c["o_lora_rank"]
        ratio = c["compress_ratios"][index]
        self.norm(p + "attn_norm.weight", D)
        self.norm(p + "ffn_norm.weight", D)
        self.hc(p + "hc_attn", (2 + hc) * hc, 3, hc * D)
        self.hc(p + "hc_ffn", (2 + hc) * hc, 3, hc * D)
        a = p + "attn."
        self.f32(a + "attn_sink", self.normal((H,), 1.0))
        self.norm(a + "q_norm.weight", ql)
        self.norm(a + "kv_norm.weight", Dh)
        self.fp8(a + "wq_a.weight", self.normal((ql, D), 1.0 / np.sqrt(D)))
        self.fp8(a + "wq_b.weight", self.normal((H * Dh, ql), 1.0 / np.sqrt(ql)))
        self.fp8(a + "wkv.weight", self.normal((Dh, D), 1.0 / np.sqrt(D)))
        self.fp8(a + "wo_a.weight", self.normal((g * ol, H * Dh // g), 1.0 / np.sqrt(H * Dh // g)))
        self.fp8(a + "wo_b.weight", self.normal((D, g * ol), 2.0 / np.sqrt(g * ol)))
        if ratio != 0:
            self.compressor(a + "compressor.", ratio, Dh, D)
        if ratio == 4:
            i = a + "indexer."
            self.fp8(i + "wq_b.weight", self.normal((c["index_n_heads"] * c["index_head_dim"], ql), 1.0 / np.sqrt(ql)))
            self.bf16(i + "weights_proj.weight", self.normal((c["index_n_heads"], D), 1.0 / np.sqrt(D)))
            self.compressor(i + "compressor.", ratio, c["index_head_dim"], D)
        f = p + "ffn."
        E, k, I = c["n_routed_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"]
        self.bf16(f + "gate.weight", self.normal((E, D), 1.0 / np.sqrt(D)))
        if hash_layer:
            t = np.stack([self.rng.permutation(E)[:k] for _ in range(c["vocab_size"])]).astype(np.int64)
            self.i64(f + "gate.tid2eid", t)
        else:
            self.f32(f + "gate.bias", self.normal((E,), 0.3))
        self.expert(f + "shared_experts.", I * c["n_shared_experts"], D, False, c["expert_gain"])
        for e in range(E):
            self.expert(f"{f}experts.{e}.", I, D, True, c["expert_gain"])


def build_native(c):
    rng = np.random.default_rng(c["seed"])
    n = Native(rng)
    D, V, hc = c["hidden_size"], c["vocab_size"], c["hc_mult"]
    n.bf16("embed.weight", n.normal((V, D), 1.0))
    for i in range(c["num_hidden_layers"]):
        n.block(c, f"layers.{i}.", i, i < c["num_hash_layers"])
    n.norm("norm.weight", D)
    n.hc("hc_head", hc, 1, hc * D)
    n.bf16("head.weight", n.normal((V, D), HEAD_GAIN / np.sqrt(D)))
    for m in range(c["num_nextn_predict_layers"]):  # MTP: written, not used by HF (no golden)
        p = f"mtp.{m}."
        n.block(c, p, c["num_hidden_layers"] + m, False)
        n.fp8(p + "e_proj.weight", n.normal((D, D), 1.0 / np.sqrt(D)))
        n.fp8(p + "h_proj.weight", n.normal((D, D), 1.0 / np.sqrt(D)))
        n.norm(p + "enorm.weight", D)
        n.norm(p + "hnorm.weight", D)
        n.norm(p + "norm.weight", D)
        n.hc(p + "hc_head", hc, 1, hc * D)
    return n


# ----------------------------------------------------------------------------------------------
# native -> HF names (MODEL-SPEC 4.6; checked 1:1 against the live model's state_dict)
# ----------------------------------------------------------------------------------------------

LAYER_RENAMES = [  # (native suffix after "layers.i.", HF suffix after "model.layers.i.")
    ("attn_norm.weight", "input_layernorm.weight"),
    ("ffn_norm.weight", "post_attention_layernorm.weight"),
    ("hc_attn_fn", "attn_hc.fn"),
    ("hc_attn_base", "attn_hc.base"),
    ("hc_attn_scale", "attn_hc.scale"),
    ("hc_ffn_fn", "ffn_hc.fn"),
    ("hc_ffn_base", "ffn_hc.base"),
    ("hc_ffn_scale", "ffn_hc.scale"),
    ("attn.attn_sink", "self_attn.sinks"),
    ("attn.q_norm.weight", "self_attn.q_a_norm.weight"),
    ("attn.kv_norm.weight", "self_attn.kv_norm.weight"),
    ("attn.wq_a.weight", "self_attn.q_a_proj.weight"),
    ("attn.wq_b.weight", "self_attn.q_b_proj.weight"),
    ("attn.wkv.weight", "self_attn.kv_proj.weight"),
    ("attn.wo_a.weight", "self_attn.o_a_proj.weight"),
    ("attn.wo_b.weight", "self_attn.o_b_proj.weight"),
    ("attn.compressor.wkv.weight", "self_attn.compressor.kv_proj.weight"),
    ("attn.compressor.wgate.weight", "self_attn.compressor.gate_proj.weight"),
    ("attn.compressor.ape", "self_attn.compressor.position_bias"),
    ("attn.compressor.norm.weight", "self_attn.compressor.kv_norm.weight"),
    ("attn.indexer.wq_b.weight", "self_attn.compressor.indexer.q_b_proj.weight"),
    ("attn.indexer.weights_proj.weight", "self_attn.compressor.indexer.{WP}weights_proj.weight"),
    ("attn.indexer.compressor.wkv.weight", "self_attn.compressor.indexer.kv_proj.weight"),
    ("attn.indexer.compressor.wgate.weight", "self_attn.compressor.indexer.gate_proj.weight"),
    ("attn.indexer.compressor.ape", "self_attn.compressor.indexer.position_bias"),
    ("attn.indexer.compressor.norm.weight", "self_attn.compressor.indexer.kv_norm.weight"),
    ("ffn.gate.weight", "mlp.gate.weight"),
    ("ffn.gate.bias", "mlp.gate.e_score_correction_bias"),
    ("ffn.gate.tid2eid", "mlp.gate.tid2eid"),
    ("ffn.shared_experts.w1.weight", "mlp.shared_experts.gate_proj.weight"),
    ("ffn.shared_experts.w2.weight", "mlp.shared_experts.down_proj.weight"),
    ("ffn.shared_experts.w3.weight", "mlp.shared_experts.up_proj.weight"),
    # ffn.experts.{e}.w1/w3 -> mlp.experts.gate_up_proj[e] = cat(w1, w3) rows; w2 -> down_proj[e]
]
GLOBAL_RENAMES = [
    ("embed.weight", "model.embed_tokens.weight"),
    ("head.weight", "lm_head.weight"),
    ("norm.weight", "model.norm.weight"),
    ("hc_head_fn", "model.hc_head.hc_fn"),
    ("hc_head_base", "model.hc_head.hc_base"),
    ("hc_head_scale", "model.hc_head.hc_scale"),
]


def native_to_hf_state(c, native, hf_keys):
    """Returns (hf_state: name -> np array, mapping rows [(native, hf, note)]). Every native weight
    outside mtp.* must be used exactly once and every HF key produced exactly once."""
    wp_prefix = "scorer." if any(k.endswith("indexer.scorer.weights_proj.weight") for k in hf_keys) else ""
    state, rows, used = {}, [], set()
    for nat, hf in GLOBAL_RENAMES:
        state[hf] = native.values[nat]
        rows.append((nat, hf, ""))
        used.add(nat)
    E, I, D = c["n_routed_experts"], c["moe_intermediate_size"], c["hidden_size"]
    for i in range(c["num_hidden_layers"]):
        for nsuf, hsuf in LAYER_RENAMES:
            nat = f"layers.{i}.{nsuf}"
            if nat not in native.values:
                continue
            hf = f"model.layers.{i}." + hsuf.replace("{WP}", wp_prefix)
            state[hf] = native.values[nat]
            rows.append((nat, hf, ""))
            used.add(nat)
        gu = np.zeros((E, 2 * I, D), dtype=np.float32)
        dn = np.zeros((E, D, I), dtype=np.float32)
        for e in range(E):
            p = f"layers.{i}.ffn.experts.{e}."
            gu[e, :I] = native.values[p + "w1.weight"]
            gu[e, I:] = native.values[p + "w3.weight"]
            dn[e] = native.values[p + "w2.weight"]
            used.update({p + "w1.weight", p + "w2.weight", p + "w3.weight"})
        state[f"model.layers.{i}.mlp.experts.gate_up_proj"] = gu
        state[f"model.layers.{i}.mlp.experts.down_proj"] = dn
        rows.append((f"layers.{i}.ffn.experts.{{e}}.w1.weight", f"model.layers.{i}.mlp.experts.gate_up_proj[e, :I]", "rows 0..I-1"))
        rows.append((f"layers.{i}.ffn.experts.{{e}}.w3.weight", f"model.layers.{i}.mlp.experts.gate_up_proj[e, I:]", "rows I..2I-1"))
        rows.append((f"layers.{i}.ffn.experts.{{e}}.w2.weight", f"model.layers.{i}.mlp.experts.down_proj[e]", ""))
    unused = sorted(k for k in native.values if k not in used and not k.startswith("mtp."))
    assert not unused, f"native tensors with no HF home: {unused}"
    return state, rows


# ----------------------------------------------------------------------------------------------
# Self test (numpy only)
# ----------------------------------------------------------------------------------------------

def selftest():
    # e4m3: hand values
    cases = {0.0: 0x00, 1.0: 0x38, -1.0: 0xB8, 448.0: 0x7E, -448.0: 0xFE, 2.0**-9: 0x01, 2.0**-6: 0x08,
             1.0625: 0x38, 1.1875: 0x3A, 1.125: 0x39, 0.1: 0x1D, 3.0 * 2.0**-10: 0x02, 2.0**-10: 0x00,
             240.0: 0x77, 232.0: 0x76}
    for v, b in cases.items():
        got = int(e4m3_encode(np.array([v]))[0])
        assert got == b, f"e4m3({v}) = {got:#x}, want {b:#x}"
        if not np.isnan(E4M3_TABLE[b]):
            assert abs(E4M3_TABLE[b] - np.float32(v)) <= abs(v) * 0.0625 + 2.0**-10
    # every finite code round-trips
    for b in range(256):
        v = E4M3_TABLE[b]
        if np.isnan(v):
            continue
        got = int(e4m3_encode(np.array([v]))[0])
        assert got == b or (v == 0 and (got & 0x7F) == 0), (b, got)
    # e2m1: grid, ties to even
    cases = {0.0: 0, 0.25: 0, 0.26: 1, 0.75: 2, 1.25: 2, 1.75: 4, 2.5: 4, 3.5: 6, 5.0: 6, 5.5: 7, 6.0: 7,
             -0.5: 9, -6.0: 15, -3.0: 13}
    for v, code in cases.items():
        got = int(e2m1_encode(np.array([v]))[0])
        assert got == code, f"e2m1({v}) = {got}, want {code}"
    # ue8m0 exponents
    assert list(pow2_ceil_exponent(np.array([1.0, 1.5, 0.5, 0.75, 448.0 / 448.0, 3.0]))) == [0, 1, -1, 0, 0, 2]
    # FP8 block quantization of a block whose amax is 448*2^-3 -> scale byte 124, exact values
    w = np.zeros((130, 200), dtype=np.float32)
    w[0, 0] = 56.0
    w[5, 7] = -1.75
    w[129, 199] = 3.0  # a partial block of its own (row block 1, col block 1)
    codes, sc = quant_fp8_block(w)
    assert sc.shape == (2, 2) and sc[0, 0] == 127 - 3 and sc[1, 1] == 127 - 7, sc
    assert sc[0, 1] == e8m0_from_exponent(pow2_ceil_exponent(np.array([AMAX_FLOOR / 448])))[0]
    back = dequant_fp8_block(codes, sc)
    assert np.array_equal(back, w), "exactly representable values must round-trip"
    # random: relative error bounded by half an ulp of e4m3 (2^-4) plus subnormal floor
    rng = np.random.default_rng(0)
    w = rng.standard_normal((300, 260)).astype(np.float32)
    codes, sc = quant_fp8_block(w)
    back = dequant_fp8_block(codes, sc)
    s_full = np.repeat(np.repeat(e8m0_value(sc), 128, 0), 128, 1)[:300, :260]
    assert np.all(np.abs(back - w) <= np.abs(w) * 2.0**-4 + s_full * 2.0**-10)
    # FP4: packing order and scales
    w = np.zeros((2, 64), dtype=np.float32)
    w[0, 0], w[0, 1] = 1.0, -6.0  # scale 2^0; codes 2 and 15 -> byte 0xF2
    w[1, 32:] = 0.5 * 12  # amax 6 in the second block of row 1: scale 2^0 -> code 7 everywhere
    w[1, 33] = -3.0
    packed, sc = quant_fp4_row32(w)
    assert packed.shape == (2, 32) and sc.shape == (2, 2)
    assert packed.view(np.uint8)[0, 0] == 0xF2 and sc[0, 0] == 127, (packed[0, 0], sc[0, 0])
    assert packed.view(np.uint8)[1, 16] == (7 | (13 << 4)) and sc[1, 1] == 127
    assert np.array_equal(dequant_fp4_row32(packed, sc), w)
    w = rng.standard_normal((64, 96)).astype(np.float32)
    packed, sc = quant_fp4_row32(w)
    back = dequant_fp4_row32(packed, sc)
    s_full = np.repeat(e8m0_value(sc), 32, 1)
    assert np.all(np.abs(back - w) <= s_full * 1.0 + 1e-7)  # half of the widest step (2) times scale
    # bf16
    x = np.array([1.0, 1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, -2.5, 3.0e-39], dtype=np.float32)
    assert list(bf16_value(bf16_bits(x))) == [1.0, 1.0, np.float32(1.0 + 4 * 2.0**-8), -2.5, bf16_value(bf16_bits(x))[4]]
    # writer / reader round trip with every dtype
    import tempfile
    tensors = [("a.weight", "F8_E4M3", np.arange(6, dtype=np.uint8).reshape(2, 3)),
               ("a.scale", "F8_E8M0", np.array([[127]], dtype=np.uint8)),
               ("b", "F32", np.array([1.5, -2.0], dtype=np.float32)),
               ("c", "I64", np.array([[1, 2]], dtype=np.int64)),
               ("d", "BF16", bf16_bits(np.array([1.0, 2.0], dtype=np.float32))),
               ("e", "I8", np.array([-1, 2, 3], dtype=np.int8))]
    with tempfile.TemporaryDirectory() as td:
        p = os.path.join(td, "t.safetensors")
        write_safetensors(p, tensors)
        back = read_safetensors(p)
        for name, dt, arr in tensors:
            assert back[name][0] == dt and np.array_equal(back[name][1], arr), name
        with open(p, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
        assert n % 8 == 0
        hdr = json.loads(open(p, "rb").read()[8 : 8 + n])
        for name, h in hdr.items():
            if name != "__metadata__":
                assert h["data_offsets"][0] % ST_DTYPES[h["dtype"]][1] == 0, "misaligned"
    print("selftest: codecs and safetensors writer OK")


# ----------------------------------------------------------------------------------------------
# Writing one config's checkpoint
# ----------------------------------------------------------------------------------------------

def write_checkpoint(c, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    native = build_native(c)
    st_path = os.path.join(out_dir, "model.safetensors")
    write_safetensors(st_path, native.stored)
    back = read_safetensors(st_path)  # re-read and compare every byte
    assert set(back) == {t[0] for t in native.stored}
    for name, dt, arr in native.stored:
        assert back[name][0] == dt and np.array_equal(back[name][1], arr), name
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(native_config_json(c), f, indent=2, sort_keys=True)
        f.write("\n")
    return native, st_path


# ----------------------------------------------------------------------------------------------
# HF part (GPU machine)
# ----------------------------------------------------------------------------------------------

def spec_inv_freq(c, compress):
    """MODEL-SPEC 2.4, float64: the per-pair frequencies plumb must use."""
    d = c["qk_rope_head_dim"]
    theta = c["compress_rope_theta"] if compress else c["rope_theta"]
    f = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    if not compress:
        return f
    L0, bf, bs, fac = c["rope_scaling_original"], c["beta_fast"], c["beta_slow"], c["yarn_factor"]
    low = np.floor(d * np.log(L0 / (bf * 2 * np.pi)) / (2 * np.log(theta)))
    high = np.ceil(d * np.log(L0 / (bs * 2 * np.pi)) / (2 * np.log(theta)))
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(d // 2) - low) / (high - low), 0, 1)
    return f * (1 - ramp) + (f / fac) * ramp


def hf_layer_types(c):
    names = {0: "sliding_attention", 4: "compressed_sparse_attention"}
    return [names.get(r, "heavily_compressed_attention") for r in c["compress_ratios"][: c["num_hidden_layers"]]]


def hca_ratio(c):
    r = {x for x in c["compress_ratios"][: c["num_hidden_layers"]] if x not in (0, 4)}
    assert len(r) <= 1, "HF supports one HCA ratio per model"
    return r.pop() if r else 128


def make_hf_config(c, log):
    from transformers import DeepseekV4Config

    n = c["num_hidden_layers"]
    prf = c["qk_rope_head_dim"] / c["head_dim"]
    yarn = {"rope_type": "yarn", "rope_theta": c["compress_rope_theta"], "factor": c["yarn_factor"],
            "original_max_position_embeddings": c["rope_scaling_original"], "beta_fast": c["beta_fast"],
            "beta_slow": c["beta_slow"], "attention_factor": 1.0, "partial_rotary_factor": prf}
    common = dict(
        vocab_size=c["vocab_size"], hidden_size=c["hidden_size"], moe_intermediate_size=c["moe_intermediate_size"],
        num_hidden_layers=n, num_attention_heads=c["num_attention_heads"], num_key_value_heads=1,
        head_dim=c["head_dim"], q_lora_rank=c["q_lora_rank"], num_experts_per_tok=c["num_experts_per_tok"],
        n_routed_experts=c["n_routed_experts"], n_shared_experts=c["n_shared_experts"], scoring_func="sqrtsoftplus",
        norm_topk_prob=True, routed_scaling_factor=c["routed_scaling_factor"],
        max_position_embeddings=c["max_position_embeddings"], rope_theta=c["rope_theta"],
        compress_rope_theta=c["compress_rope_theta"], hc_mult=c["hc_mult"], hc_sinkhorn_iters=c["hc_sinkhorn_iters"],
        hc_eps=c["hc_eps"], swiglu_limit=c["swiglu_limit"], sliding_window=c["sliding_window"],
        o_groups=c["o_groups"], o_lora_rank=c["o_lora_rank"], index_n_heads=c["index_n_heads"],
        index_head_dim=c["index_head_dim"], index_topk=c["index_topk"],
        num_nextn_predict_layers=c["num_nextn_predict_layers"], hidden_act="silu", rms_norm_eps=c["rms_norm_eps"],
        bos_token_id=0, eos_token_id=1, tie_word_embeddings=False, attention_bias=False,
    )
    modern = dict(
        common, layer_types=hf_layer_types(c),
        compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": hca_ratio(c)},
        mlp_layer_types=["hash_moe" if i < c["num_hash_layers"] else "moe" for i in range(n)],
        partial_rotary_factor=prf,
        rope_parameters={"main": {"rope_type": "default", "rope_theta": c["rope_theta"], "partial_rotary_factor": prf},
                         "compress": yarn},
    )
    try:
        cfg = DeepseekV4Config(**modern)
        log("hf config: built with layer_types / compress_rates / mlp_layer_types / rope_parameters")
    except Exception as ex:  # older or newer field names: try the legacy spelling
        log(f"hf config: modern kwargs failed ({type(ex).__name__}: {ex}); trying legacy kwargs")
        legacy = dict(common, layer_types=hf_layer_types(c), compress_rate_csa=4, compress_rate_hca=hca_ratio(c),
                      num_hash_layers=c["num_hash_layers"], qk_rope_head_dim=c["qk_rope_head_dim"],
                      rope_scaling={k: v for k, v in yarn.items() if k not in ("rope_theta", "partial_rotary_factor")})
        cfg = DeepseekV4Config(**legacy)
    # verify what HF derived
    assert list(cfg.layer_types) == hf_layer_types(c), cfg.layer_types
    assert cfg.compress_rates["compressed_sparse_attention"] == 4
    assert cfg.compress_rates["heavily_compressed_attention"] == hca_ratio(c), cfg.compress_rates
    assert list(cfg.mlp_layer_types) == ["hash_moe" if i < c["num_hash_layers"] else "moe" for i in range(n)]
    assert int(round(cfg.head_dim * cfg.partial_rotary_factor)) == c["qk_rope_head_dim"]
    assert cfg.tie_word_embeddings is False
    return cfg


def build_hf_model(cfg, log):
    import torch
    from transformers import DeepseekV4ForCausalLM

    model = None
    for kwargs in (dict(attn_implementation="eager", experts_implementation="eager", dtype=torch.float32),
                   dict(attn_implementation="eager", dtype=torch.float32),
                   dict(attn_implementation="eager", torch_dtype=torch.float32)):
        try:
            model = DeepseekV4ForCausalLM._from_config(cfg, **kwargs)
            log(f"hf model: _from_config({', '.join(kwargs)})")
            break
        except Exception as ex:
            log(f"hf model: _from_config({', '.join(kwargs)}) failed: {type(ex).__name__}: {ex}")
    assert model is not None
    for attr in ("_attn_implementation", "_experts_implementation"):
        if hasattr(model.config, attr):
            log(f"hf model: config.{attr} = {getattr(model.config, attr)!r}")
    if getattr(model.config, "_experts_implementation", "eager") not in (None, "eager"):
        try:
            model.set_experts_implementation("eager")
        except Exception:
            model.config._experts_implementation = "eager"
        log(f"hf model: experts implementation forced to {model.config._experts_implementation!r}")
    return model.float().cuda().eval()


class Probe:
    """Forward hooks: indexer top-k margins, router top-k margins, SwiGLU clamp activity, per-layer RMS."""

    def __init__(self, model, c):
        import torch

        self.c = c
        self.reset()
        self.in_indexer = 0
        probe = self
        orig_tensor_topk, orig_topk = torch.Tensor.topk, torch.topk

        def record(x, k):
            if probe.in_indexer and x.numel() > 0:
                probe.indexer_rows.append((x.detach().float().cpu().numpy().reshape(-1, x.shape[-1]), int(k)))

        def tensor_topk(self_, k, *a, **kw):
            record(self_, k)
            return orig_tensor_topk(self_, k, *a, **kw)

        def fn_topk(x, k, *a, **kw):
            record(x, k)
            return orig_topk(x, k, *a, **kw)

        torch.Tensor.topk = tensor_topk
        torch.topk = fn_topk
        self.n_indexers = self.n_routers = self.n_shared = 0
        for name, mod in model.named_modules():
            cls = type(mod).__name__
            if cls.endswith("Indexer"):
                self.n_indexers += 1
                mod.register_forward_pre_hook(lambda m, a: setattr(probe, "in_indexer", probe.in_indexer + 1))
                mod.register_forward_hook(lambda m, a, o: setattr(probe, "in_indexer", probe.in_indexer - 1))
            if hasattr(mod, "e_score_correction_bias") and hasattr(mod, "weight"):
                self.n_routers += 1
                mod.register_forward_hook(self._router_hook)
            if name.endswith("mlp.shared_experts"):
                self.n_shared += 1
                mod.register_forward_hook(self._shared_hook)
            if cls.endswith("DecoderLayer"):
                li = int(name.split(".")[-1])
                mod.register_forward_hook(lambda m, a, o, li=li: probe.layer_rms.__setitem__(
                    li, float(o.float().pow(2).mean().sqrt()) if hasattr(o, "float") else float("nan")))

    def reset(self):
        self.indexer_rows, self.router_gaps, self.clamp_frac, self.layer_rms = [], [], [], {}

    def _router_hook(self, mod, args, out):
        import torch
        import torch.nn.functional as F

        x = args[0].reshape(-1, mod.weight.shape[1]).float()
        s = torch.sqrt(F.softplus(x @ mod.weight.float().t())) + mod.e_score_correction_bias.float()
        v = s.sort(dim=-1, descending=True).values
        k = self.c["num_experts_per_tok"]
        self.router_gaps.append(float((v[:, k - 1] - v[:, k]).min()))

    def _shared_hook(self, mod, args, out):
        x = args[0]
        lim = self.c["swiglu_limit"]
        g, u = mod.gate_proj(x), mod.up_proj(x)
        self.clamp_frac.append(float(((g > lim).float().mean() + (u.abs() > lim).float().mean()) / 2))

    def indexer_min_rel_gap(self):
        """Smallest (k-th - (k+1)-th) / max|score| over all query rows with more valid entries than k."""
        best, rows_cut = float("inf"), 0
        for x, k in self.indexer_rows:
            for r in x:
                valid = np.sort(r[np.isfinite(r)])[::-1]
                if len(valid) > k:
                    rows_cut += 1
                    scale = max(np.abs(valid).max(), 1e-30)
                    best = min(best, float(valid[k - 1] - valid[k]) / scale)
        return best, rows_cut


def logit_stats(lg):
    s = np.sort(lg, axis=-1)
    gap = s[:, -1] - s[:, -2]
    std = lg.std(axis=-1)
    return gap, std


def run_hf(c, native, out_dir, args, log, diag):
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.manual_seed(c["seed"])

    cfg = make_hf_config(c, log)
    model = build_hf_model(cfg, log)
    sd = model.state_dict()
    diag.append(f"== {c['name']}: HF state_dict ({len(sd)} entries)")
    diag.extend(f"{k} {tuple(v.shape)} {str(v.dtype).replace('torch.', '')}" for k, v in sd.items())
    diag.append(f"== {c['name']}: HF config\n{json.dumps(cfg.to_dict(), indent=1, default=str)}")
    if args.diag:
        with open(os.path.join(args.diag, "hf_state_dict.txt"), "w") as f:
            f.write("\n".join(diag) + "\n")
    state, rows = native_to_hf_state(c, native, list(sd.keys()))
    missing = sorted(set(sd) - set(state))
    extra = sorted(set(state) - set(sd))
    assert not missing and not extra, f"name map not 1:1: HF keys without a value {missing}; values without an HF key {extra}"
    tens = {}
    for k, v in state.items():
        t = torch.from_numpy(np.ascontiguousarray(v))
        assert tuple(t.shape) == tuple(sd[k].shape), f"{k}: shape {tuple(t.shape)} vs HF {tuple(sd[k].shape)}"
        tens[k] = t.to(sd[k].dtype)
    res = model.load_state_dict(tens, strict=True)
    log(f"hf model: load_state_dict strict ok ({len(tens)} tensors) {res}")
    for k, v in model.state_dict().items():  # what HF holds now is exactly what we stored
        assert torch.equal(v.cpu(), tens[k]), k

    # RoPE frequencies vs MODEL-SPEC 2.4
    rope_check = {}
    try:
        rot = model.model.rotary_emb
        for lt, compress in (("main", False), ("compress", True)):
            hf_f = getattr(rot, f"{lt}_inv_freq").double().cpu().numpy()
            sp = spec_inv_freq(c, compress)
            assert hf_f.shape == sp.shape, (lt, hf_f.shape, sp.shape)
            rope_check[lt] = {"max_rel_diff_vs_spec": float(np.max(np.abs(hf_f - sp) / sp)),
                              "attention_scaling": float(getattr(rot, f"{lt}_attention_scaling"))}
    except Exception as ex:
        rope_check["error"] = f"{type(ex).__name__}: {ex}"
    log(f"rope check: {rope_check}")

    # experts path sanity: HF experts module == plain per-expert loop in fp32
    experts_err = None
    try:
      with torch.no_grad():
        exp = model.model.layers[0].mlp.experts
        x = torch.randn(37, c["hidden_size"], device="cuda")
        idx = torch.stack([torch.randperm(c["n_routed_experts"], device="cuda")[: c["num_experts_per_tok"]] for _ in range(37)])
        w = torch.rand(37, c["num_experts_per_tok"], device="cuda")
        got = exp(x, idx, w)
        ref = torch.zeros_like(x)
        I = c["moe_intermediate_size"]
        for t in range(37):
            for j in range(c["num_experts_per_tok"]):
                e = int(idx[t, j])
                gu = exp.gate_up_proj[e] @ x[t]
                g, u = gu[:I].clamp(max=c["swiglu_limit"]), gu[I:].clamp(-c["swiglu_limit"], c["swiglu_limit"])
                ref[t] += w[t, j] * (exp.down_proj[e] @ (torch.nn.functional.silu(g) * u))
        experts_err = float((got - ref).abs().max() / ref.abs().max())
    except Exception as ex:
        log(f"experts check could not run: {type(ex).__name__}: {ex}")
    log(f"experts check: max rel err {experts_err}")
    assert experts_err is None or experts_err < 1e-5, "HF experts path is not plain fp32"

    probe = Probe(model, c)
    log(f"probe: {probe.n_indexers} indexers, {probe.n_routers} learned routers, {probe.n_shared} shared experts")

    def forward(ids):
        with torch.no_grad():
            out = model(input_ids=torch.as_tensor(ids, device="cuda")[None], use_cache=False)
        lg = out.logits[0].float().cpu().numpy()
        assert np.all(np.isfinite(lg)), "non-finite logits"
        return lg

    def greedy(ids):
        seq, gaps = list(ids), []
        for _ in range(GREEDY_NEW):
            lg = forward(np.array(seq, dtype=np.int64))[-1]
            s = np.sort(lg)
            gaps.append(float(s[-1] - s[-2]))
            seq.append(int(np.argmax(lg)))
        return np.array(seq[len(ids):], dtype=np.int64), min(gaps)

    V = c["vocab_size"]
    prompts_meta = {}
    stats_all = {"gap": [], "std": []}
    for L in PROMPT_LENGTHS:
        for attempt in range(MAX_ATTEMPTS):
            rng = np.random.default_rng([c["seed"], L, attempt])
            ids = rng.integers(2, V, size=L, dtype=np.int64)
            probe.reset()
            lg = forward(ids)
            gap, std = logit_stats(lg)
            idx_gap, idx_rows = probe.indexer_min_rel_gap()
            rt_gap = min(probe.router_gaps) if probe.router_gaps else float("inf")
            layer_rms = dict(probe.layer_rms)
            clamp = float(np.mean(probe.clamp_frac)) if probe.clamp_frac else 0.0
            g_ids, g_gap = (None, float("inf"))
            ok = gap.min() >= args.min_logit_gap and idx_gap >= args.min_indexer_gap and rt_gap >= args.min_router_gap
            if ok and L in GREEDY_PROMPTS:
                probe.reset()
                g_ids, g_gap = greedy(ids)
                g_idx_gap, _ = probe.indexer_min_rel_gap()
                g_rt_gap = min(probe.router_gaps) if probe.router_gaps else float("inf")
                ok = g_gap >= args.min_logit_gap and g_idx_gap >= args.min_indexer_gap and g_rt_gap >= args.min_router_gap
                idx_gap, rt_gap = min(idx_gap, g_idx_gap), min(rt_gap, g_rt_gap)
            if ok:
                break
            log(f"  {c['name']} L={L} attempt {attempt}: near-tie (logit gap {gap.min():.2e}, greedy gap {g_gap:.2e}, "
                f"indexer rel gap {idx_gap:.2e}, router gap {rt_gap:.2e}); redrawing the prompt")
        else:
            raise SystemExit(f"{c['name']} L={L}: no prompt without near-ties in {MAX_ATTEMPTS} attempts")
        np.save(os.path.join(out_dir, f"prompt_{L}.ids.npy"), ids)
        np.save(os.path.join(out_dir, f"prompt_{L}.logits.npy"), lg.astype(np.float32))
        stats_all["gap"].append(gap)
        stats_all["std"].append(std)
        pm = {"attempt": attempt, "logit_std_mean": float(std.mean()), "logit_std_min": float(std.min()),
              "top1_top2_gap_min": float(gap.min()), "top1_top2_gap_median": float(np.median(gap)),
              "logit_absmax": float(np.abs(lg).max()), "indexer_rows_with_cut": idx_rows,
              "indexer_min_rel_gap": idx_gap if np.isfinite(idx_gap) else None,
              "router_min_gap": rt_gap if np.isfinite(rt_gap) else None,
              "layer_out_rms": [layer_rms[i] for i in sorted(layer_rms)], "shared_swiglu_clamp_frac": clamp}
        if g_ids is not None:
            np.save(os.path.join(out_dir, f"greedy_{L}.ids.npy"), g_ids)
            pm["greedy_new_ids"] = g_ids.tolist()
            pm["greedy_min_top1_top2_gap"] = g_gap
        prompts_meta[str(L)] = pm
        log(f"  {c['name']} L={L}: std {pm['logit_std_mean']:.2f}, gap min {pm['top1_top2_gap_min']:.3f} "
            f"median {pm['top1_top2_gap_median']:.3f}, indexer rows cut {idx_rows} min rel gap {idx_gap:.2e}, "
            f"router gap {rt_gap:.2e}, clamp {clamp:.3f}, layer rms {[round(x, 2) for x in pm['layer_out_rms']]}")

    # HF's own cached generate (not the golden): same greedy ids? same logits?
    gen_check = {}
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    for L in GREEDY_PROMPTS:
        ids = np.load(os.path.join(out_dir, f"prompt_{L}.ids.npy"))
        want = np.load(os.path.join(out_dir, f"greedy_{L}.ids.npy"))
        try:
            with torch.no_grad():
                g = model.generate(torch.as_tensor(ids, device="cuda")[None], max_new_tokens=GREEDY_NEW,
                                   do_sample=False, eos_token_id=None, pad_token_id=0, use_cache=True,
                                   output_logits=True, return_dict_in_generate=True)
            got = g.sequences[0, L:].cpu().numpy()
            n = min(len(got), len(want))
            first_diff = next((i for i in range(n) if got[i] != want[i]), None)
            # compare the cached step logits with a full forward over the same tokens
            full = forward(np.concatenate([ids, got[:-1]]))[L - 1 :]
            step = torch.stack(g.logits, 0)[:, 0].float().cpu().numpy()
            m = min(len(step), len(full))
            rel = float(np.abs(step[:m] - full[:m]).max() / np.abs(full[:m]).max())
            gen_check[str(L)] = {"same_ids": bool(first_diff is None and len(got) == len(want)),
                                 "first_diff": first_diff, "n_generated": int(len(got)),
                                 "cached_vs_full_logits_max_rel_diff": rel}
        except Exception as ex:
            gen_check[str(L)] = {"error": f"{type(ex).__name__}: {ex}"}
        log(f"  generate check L={L}: {gen_check[str(L)]}")

    # noise floor: the same HF model on the CPU (fp32) vs the GPU golden, longest prompt
    import copy
    Lmax = max(PROMPT_LENGTHS)
    ids = np.load(os.path.join(out_dir, f"prompt_{Lmax}.ids.npy"))
    ref = np.load(os.path.join(out_dir, f"prompt_{Lmax}.logits.npy"))
    cpu_model = copy.deepcopy(model).cpu()
    with torch.no_grad():
        cl = cpu_model(input_ids=torch.as_tensor(ids)[None], use_cache=False).logits[0].float().numpy()
    cpu_gpu = {"max_rel_diff": float(np.abs(cl - ref).max() / np.abs(ref).max()),
               "argmax_equal": bool(np.array_equal(cl.argmax(-1), ref.argmax(-1)))}
    log(f"  cpu vs gpu (L={Lmax}): {cpu_gpu}")
    del cpu_model

    gap = np.concatenate(stats_all["gap"])
    std = np.concatenate(stats_all["std"])
    summary = {"positions": int(len(gap)), "logit_std_mean": float(std.mean()), "logit_std_min": float(std.min()),
               "top1_top2_gap_min": float(gap.min()), "top1_top2_gap_median": float(np.median(gap)),
               "top1_top2_gap_p01": float(np.percentile(gap, 1))}
    return {"prompts": prompts_meta, "logit_summary": summary, "rope_check": rope_check,
            "experts_check_max_rel_err": experts_err, "hf_config": json.loads(json.dumps(cfg.to_dict(), default=str)), "hf_generate_check": gen_check, "cpu_vs_gpu": cpu_gpu,
            "hf_state_dict_entries": len(sd), "name_map": rows}


# ----------------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------------

def json_clean(x):
    """NaN / inf -> None so that meta.json is strict JSON."""
    if isinstance(x, dict):
        return {k: json_clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_clean(v) for v in x]
    if isinstance(x, (np.integer, np.bool_)):
        return x.item()
    if isinstance(x, (float, np.floating)):
        return float(x) if np.isfinite(x) else None
    return x


def config_summary(c):
    n = c["num_hidden_layers"]
    kinds = {0: "SWA", 4: "CSA"}
    return {
        "layers": [{"layer": i, "attn": kinds.get(r, f"HCA{r}"), "ratio": r,
                    "routing": "hash" if i < c["num_hash_layers"] else "learned"}
                   for i, r in enumerate(c["compress_ratios"][:n])],
        "mtp": "mtp.0.* written (ratio-0 layer, learned routing); no golden (HF drops MTP)",
        "dims": {k: c[k] for k in ("vocab_size", "hidden_size", "num_attention_heads", "head_dim", "qk_rope_head_dim",
                                   "q_lora_rank", "o_groups", "o_lora_rank", "sliding_window", "n_routed_experts",
                                   "num_experts_per_tok", "moe_intermediate_size", "index_n_heads", "index_head_dim",
                                   "index_topk", "swiglu_limit", "routed_scaling_factor", "hc_sinkhorn_iters")},
        "init": "numpy PCG64 seed; see build_native() for every tensor's distribution",
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/data/golden/v4", help="fixture root (one folder per config)")
    ap.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated config names")
    ap.add_argument("--no-hf", action="store_true", help="write the checkpoints only (no torch needed)")
    ap.add_argument("--selftest", action="store_true", help="codec / writer self test only")
    ap.add_argument("--diag", default=None, help="folder for diagnostics (HF source, state_dict listing)")
    ap.add_argument("--min-logit-gap", type=float, default=1e-3, help="top-1 minus top-2 logit, absolute")
    ap.add_argument("--min-indexer-gap", type=float, default=1e-5, help="k-th minus (k+1)-th indexer score, "
                    "relative to the row's max |score|")
    ap.add_argument("--min-router-gap", type=float, default=1e-5, help="k-th minus (k+1)-th biased router score")
    args = ap.parse_args()

    selftest()
    if args.selftest:
        return
    t0 = time.time()
    diag = []

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
            os.makedirs(args.diag, exist_ok=True)
            import inspect
            import shutil

            from transformers.models.deepseek_v4 import configuration_deepseek_v4, modeling_deepseek_v4

            for mod in (modeling_deepseek_v4, configuration_deepseek_v4):
                shutil.copy(inspect.getsourcefile(mod), args.diag)
            extra = []
            try:
                import transformers.masking_utils as mu

                for fn in ("sliding_window_overlay", "sliding_window_causal_mask_function", "create_sliding_window_causal_mask"):
                    if hasattr(mu, fn):
                        extra.append(inspect.getsource(getattr(mu, fn)))
                import transformers.modeling_rope_utils as ru

                extra.append(inspect.getsource(ru._compute_yarn_parameters))
                from transformers.activations import ACT2FN

                extra.append(inspect.getsource(type(ACT2FN["sqrtsoftplus"])))
            except Exception as ex:
                extra.append(f"source dump failed: {ex}")
            with open(os.path.join(args.diag, "hf_helpers_source.txt"), "w") as f:
                f.write("\n\n".join(extra))

    for name in args.configs.split(","):
        c = full_cfg(name)
        out_dir = os.path.join(args.out, name)
        native, st_path = write_checkpoint(c, out_dir)
        log(f"{name}: wrote {st_path} ({os.path.getsize(st_path)} bytes, {len(native.stored)} tensors)")
        meta = {
            "config": name, "seed": c["seed"], "generated_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "command": " ".join([os.path.basename(sys.executable)] + sys.argv), "env": env,
            "summary": config_summary(c),
            "prompt_lengths": PROMPT_LENGTHS, "greedy": {"prompts": GREEDY_PROMPTS, "new_tokens": GREEDY_NEW,
                                                          "method": "argmax of the last position of a full no-cache forward, "
                                                                    "repeated; no EOS stop"},
            "numerics": "HF transformers fp32 on GPU, TF32 off, eager attention and experts, no activation quantization "
                        "(= plumb's reference profile); weights are the dequantized stored FP8/FP4/bf16 values",
            "prompt_ids": "uniform in [2, vocab) from numpy default_rng([seed, L, attempt]); attempt > 0 means an "
                          "earlier draw had a near-tie (logit top-2, indexer top-k cut or router top-k cut)",
            "checkpoint_sha256": hashlib.sha256(open(st_path, "rb").read()).hexdigest(),
        }
        if not args.no_hf:
            meta.update(run_hf(c, native, out_dir, args, log, diag))
        with open(os.path.join(out_dir, "meta.json"), "w") as f:
            json.dump(json_clean(meta), f, indent=1, allow_nan=False)
            f.write("\n")
    log("done")


if __name__ == "__main__":
    main()
