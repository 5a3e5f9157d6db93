"""A tiny DeepSeek-V4 checkpoint drawn at random (numpy, fixed seed) and stored in the official
layout (MODEL-SPEC 4.2-4.5, the walk of src/plumb/model/layout_v4.h): FP8 / FP4 / bf16 / f32 /
i64 tensors with their dequantized values, written by release_format's safetensors writer."""
from __future__ import annotations

import json
import os

import numpy as np

from release_format import (bf16_bits, bf16_value, dequant_fp4_row32, dequant_fp8_block, quant_fp4_row32, quant_fp8_block,
                            read_safetensors, write_safetensors)
from v4_configs import HEAD_GAIN, native_config_json


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
