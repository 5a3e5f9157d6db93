#pragma once
// The DeepSeek-V4 checkpoint layout (MODEL-SPEC 4.2-4.5), written once as a walk over every
// tensor name and shape the config implies. A visitor decides what to do with each tensor:
// the Binder looks it up and checks it, the synthesizer writes a random one. The visitor offers:
//   WeightView dense(name, shape)                      bf16/f16/f32 values
//   WeightView ints(name, shape)                       I64 table (tid2eid)
//   WeightView linear(name, rows, cols, allow_fp4)     FP8 (+ .scale), FP4 (+ .scale) or dense
#include <string>

#include <fmt/format.h>

#include "plumb/format/config.h"
#include "plumb/model/weights_v4.h"

namespace plumb::v4 {

template <class V>
HcWeights walk_hc(V& v, const std::string& prefix, int64_t n_out, int64_t n_scale, int64_t width) {
  return {v.dense(prefix + "_fn", {n_out, width}), v.dense(prefix + "_base", {n_out}),
          v.dense(prefix + "_scale", {n_scale})};
}

template <class V>
CompressorWeights walk_compressor(V& v, const std::string& p, int64_t ratio, int64_t d, int64_t hidden) {
  const int64_t c = ratio == 4 ? 2 : 1;  // CSA keeps two overlapping series
  return {v.dense(p + "wkv.weight", {c * d, hidden}), v.dense(p + "wgate.weight", {c * d, hidden}),
          v.dense(p + "ape", {ratio, c * d}), v.dense(p + "norm.weight", {d})};
}

template <class V>
ExpertWeights walk_expert(V& v, const std::string& p, int64_t inter, int64_t hidden, bool routed) {
  return {v.linear(p + "w1.weight", inter, hidden, routed), v.linear(p + "w2.weight", hidden, inter, routed),
          v.linear(p + "w3.weight", inter, hidden, routed)};
}

// The attention + FFN block shared by main layers and MTP layers.
template <class V>
LayerWeights walk_block(V& v, const ModelConfig& c, const std::string& p, int64_t index, bool hash) {
  const int64_t D = c.hidden_size, H = c.num_attention_heads, Dh = c.head_dim, hc = c.hc_mult;
  LayerWeights L;
  L.index = index;
  L.type = c.attn_type(index);
  L.attn_norm = v.dense(p + "attn_norm.weight", {D});
  L.ffn_norm = v.dense(p + "ffn_norm.weight", {D});
  L.hc_attn = walk_hc(v, p + "hc_attn", (2 + hc) * hc, 3, hc * D);
  L.hc_ffn = walk_hc(v, p + "hc_ffn", (2 + hc) * hc, 3, hc * D);

  AttentionWeights& a = L.attn;
  const std::string ap = p + "attn.";
  a.attn_sink = v.dense(ap + "attn_sink", {H});
  a.q_norm = v.dense(ap + "q_norm.weight", {c.q_lora_rank});
  a.kv_norm = v.dense(ap + "kv_norm.weight", {Dh});
  a.wq_a = v.linear(ap + "wq_a.weight", c.q_lora_rank, D, false);
  a.wq_b = v.linear(ap + "wq_b.weight", H * Dh, c.q_lora_rank, false);
  a.wkv = v.linear(ap + "wkv.weight", Dh, D, false);
  a.wo_a = v.linear(ap + "wo_a.weight", c.o_groups * c.o_lora_rank, H * Dh / c.o_groups, false);
  a.wo_b = v.linear(ap + "wo_b.weight", D, c.o_groups * c.o_lora_rank, false);
  const int64_t ratio = c.compress_ratio(index);
  if (ratio != 0) a.compressor = walk_compressor(v, ap + "compressor.", ratio, Dh, D);
  if (L.type == AttnType::CSA) {
    IndexerWeights ix;
    const std::string ip = ap + "indexer.";
    ix.wq_b = v.linear(ip + "wq_b.weight", c.index_n_heads * c.index_head_dim, c.q_lora_rank, false);
    ix.weights_proj = v.dense(ip + "weights_proj.weight", {c.index_n_heads, D});
    ix.compressor = walk_compressor(v, ip + "compressor.", ratio, c.index_head_dim, D);
    a.indexer = ix;
  }

  MoeWeights& m = L.ffn;
  const std::string fp = p + "ffn.";
  m.gate = v.dense(fp + "gate.weight", {c.n_routed_experts, D});
  if (hash)
    m.tid2eid = v.ints(fp + "gate.tid2eid", {c.vocab_size, c.num_experts_per_tok});
  else
    m.gate_bias = v.dense(fp + "gate.bias", {c.n_routed_experts});
  m.shared = walk_expert(v, fp + "shared_experts.", c.moe_intermediate_size * c.n_shared_experts, D, false);
  for (int64_t e = 0; e < c.n_routed_experts; ++e)
    m.experts.push_back(walk_expert(v, fmt::format("{}experts.{}.", fp, e), c.moe_intermediate_size, D, true));
  return L;
}

template <class V>
MtpWeights walk_mtp(V& v, const ModelConfig& c, int64_t i) {
  const int64_t D = c.hidden_size;
  const std::string p = fmt::format("mtp.{}.", i);
  MtpWeights m;
  m.layer = walk_block(v, c, p, c.num_hidden_layers + i, false);
  m.e_proj = v.linear(p + "e_proj.weight", D, D, false);
  m.h_proj = v.linear(p + "h_proj.weight", D, D, false);
  m.enorm = v.dense(p + "enorm.weight", {D});
  m.hnorm = v.dense(p + "hnorm.weight", {D});
  m.norm = v.dense(p + "norm.weight", {D});
  m.hc_head = walk_hc(v, p + "hc_head", c.hc_mult, 1, c.hc_mult * D);
  return m;
}

// Globals and main layers; MTP layers only when with_mtp.
template <class V>
ModelWeights walk_model(V& v, const ModelConfig& c, bool with_mtp) {
  const int64_t D = c.hidden_size, hc = c.hc_mult;
  ModelWeights mw;
  mw.embed = v.dense("embed.weight", {c.vocab_size, D});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    mw.layers.push_back(walk_block(v, c, fmt::format("layers.{}.", i), i, c.is_hash_layer(i)));
  mw.norm = v.dense("norm.weight", {D});
  mw.hc_head = walk_hc(v, "hc_head", hc, 1, hc * D);
  mw.head = v.dense("head.weight", {c.vocab_size, D});
  for (int64_t i = 0; with_mtp && i < c.num_nextn_predict_layers; ++i) mw.mtp.push_back(walk_mtp(v, c, i));
  return mw;
}

}  // namespace plumb::v4
