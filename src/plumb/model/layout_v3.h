#pragma once
// The DeepSeek-V3 checkpoint layout (MODEL-SPEC 7), written once as a walk over every tensor name
// and shape the config implies; the visitor is a Binder (binder.h) or anything with the same
// dense(name, shape) / linear(name, rows, cols, allow_fp4) calls. Linears may be FP8 or dense.
#include <string>

#include <fmt/format.h>

#include "plumb/format/config.h"
#include "plumb/model/weights_v3.h"

namespace plumb::v3 {

template <class V>
MlpWeights walk_mlp(V& v, const std::string& p, int64_t inter, int64_t hidden) {
  return {v.linear(p + "gate_proj.weight", inter, hidden, false), v.linear(p + "up_proj.weight", inter, hidden, false),
          v.linear(p + "down_proj.weight", hidden, inter, false)};
}

template <class V>
LayerWeights walk_layer(V& v, const ModelConfig& c, int64_t i) {
  const int64_t D = c.hidden_size, H = c.num_attention_heads;
  const int64_t nope = c.qk_nope_head_dim, rope = c.qk_rope_head_dim, r = c.kv_lora_rank;
  const std::string p = fmt::format("model.layers.{}.", i);
  LayerWeights L;
  L.index = i;
  L.dense = c.is_dense_layer(i);
  L.input_layernorm = v.dense(p + "input_layernorm.weight", {D});
  L.post_attention_layernorm = v.dense(p + "post_attention_layernorm.weight", {D});
  MlaWeights& a = L.attn;
  const std::string ap = p + "self_attn.";
  a.q_a_proj = v.linear(ap + "q_a_proj.weight", c.q_lora_rank, D, false);
  a.q_a_layernorm = v.dense(ap + "q_a_layernorm.weight", {c.q_lora_rank});
  a.q_b_proj = v.linear(ap + "q_b_proj.weight", H * (nope + rope), c.q_lora_rank, false);
  a.kv_a_proj_with_mqa = v.linear(ap + "kv_a_proj_with_mqa.weight", r + rope, D, false);
  a.kv_a_layernorm = v.dense(ap + "kv_a_layernorm.weight", {r});
  a.kv_b_proj = v.linear(ap + "kv_b_proj.weight", H * (nope + c.v_head_dim), r, false);
  a.o_proj = v.linear(ap + "o_proj.weight", D, H * c.v_head_dim, false);
  const std::string mp = p + "mlp.";
  if (L.dense) {
    L.mlp = walk_mlp(v, mp, c.intermediate_size, D);
    return L;
  }
  MoeWeights& m = L.moe;
  m.gate = v.dense(mp + "gate.weight", {c.n_routed_experts, D});
  m.bias = v.dense(mp + "gate.e_score_correction_bias", {c.n_routed_experts});
  m.shared = walk_mlp(v, mp + "shared_experts.", c.moe_intermediate_size * c.n_shared_experts, D);
  for (int64_t e = 0; e < c.n_routed_experts; ++e)
    m.experts.push_back(walk_mlp(v, fmt::format("{}experts.{}.", mp, e), c.moe_intermediate_size, D));
  return L;
}

template <class V>
ModelWeights walk_model(V& v, const ModelConfig& c) {
  ModelWeights mw;
  mw.embed = v.dense("model.embed_tokens.weight", {c.vocab_size, c.hidden_size});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) mw.layers.push_back(walk_layer(v, c, i));
  mw.norm = v.dense("model.norm.weight", {c.hidden_size});
  mw.lm_head = v.dense("lm_head.weight", {c.vocab_size, c.hidden_size});
  return mw;
}

}  // namespace plumb::v3
