"""The tiny DeepSeek-V3 configs of the golden fixtures (tests/data/golden/v3/<name>) and their
checkpoint drawn at random (numpy, fixed seed) in the HF V3 layout (MODEL-SPEC 7): FP8 e4m3 with
F32 128x128 block scales (the V3 release's format), bf16, F32, plus the release's config.json."""
from __future__ import annotations

import json
import os

import numpy as np

from release_format import AMAX_FLOOR, E4M3_TABLE, bf16_bits, bf16_value, e4m3_encode, read_safetensors, write_safetensors


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
