"""The native -> HF transformers tensor names of DeepSeek-V4 (MODEL-SPEC 4.6), checked 1:1
against the live model's state_dict by native_to_hf_state."""
from __future__ import annotations

import numpy as np


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
