"""The tiny DeepSeek-V4 configs of the golden fixtures (tests/data/golden/v4/<name>) and their
config.json in the release's format. Numbers only: no numpy, no torch."""
from __future__ import annotations


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
