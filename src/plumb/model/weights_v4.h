#pragma once
// DeepSeek-V4 weights bound from a checkpoint with native names (MODEL-SPEC 4.2-4.5): typed views
// by layer, checked against the config's shapes. Nothing is copied or decoded here.
#include <optional>
#include <string>
#include <vector>

#include "plumb/format/config.h"
#include "plumb/format/safetensors.h"
#include "plumb/format/weight_view.h"
#include "plumb/model/binder.h"

namespace plumb::v4 {

struct HcWeights {  // mHC site: fn [n_out, hc*D] f32, base [n_out] f32, scale [3 or 1] f32
  WeightView fn, base, scale;
};

struct CompressorWeights {  // wkv/wgate [c*d, D] bf16, ape [ratio, c*d] f32, norm [d]
  WeightView wkv, wgate, ape, norm;
};

struct IndexerWeights {
  WeightView wq_b;          // FP8 [n_heads*head_dim, q_lora_rank]
  WeightView weights_proj;  // bf16 [n_heads, D]
  CompressorWeights compressor;
};

struct AttentionWeights {
  WeightView attn_sink;       // f32 [H]
  WeightView q_norm, kv_norm; // [q_lora_rank], [head_dim]
  WeightView wq_a, wq_b, wkv, wo_a, wo_b;
  std::optional<CompressorWeights> compressor;  // CSA and HCA layers
  std::optional<IndexerWeights> indexer;        // CSA layers
};

struct ExpertWeights {
  WeightView w1, w2, w3;  // w1/w3 [inter, D], w2 [D, inter]
};

struct MoeWeights {
  WeightView gate;       // bf16 [n_experts, D]
  WeightView gate_bias;  // f32 [n_experts]; absent in hash layers
  WeightView tid2eid;    // i64 [vocab, top_k]; hash layers only
  std::vector<ExpertWeights> experts;
  ExpertWeights shared;
  WeightFormat expert_format = WeightFormat::FP4Block32;  // detected from the tensors
};

struct LayerWeights {
  int64_t index = 0;
  AttnType type = AttnType::SWA;
  WeightView attn_norm, ffn_norm;
  HcWeights hc_attn, hc_ffn;
  AttentionWeights attn;
  MoeWeights ffn;
};

struct MtpWeights {  // mtp.0.* (bound so it is not reported as unexpected; the forward may skip it)
  LayerWeights layer;
  WeightView e_proj, h_proj, enorm, hnorm, norm;
  HcWeights hc_head;
};

struct ModelWeights {
  WeightView embed, head, norm;
  HcWeights hc_head;
  std::vector<LayerWeights> layers;
  std::vector<MtpWeights> mtp;
  WeightFormat expert_format = WeightFormat::FP4Block32;
};

using plumb::BindReport;  // binder.h

// Binds every tensor. With report == nullptr any problem throws plumb::Error with the summary;
// otherwise problems are collected in *report and the affected views are left empty.
ModelWeights bind_weights(const Checkpoint& ckpt, const ModelConfig& cfg, BindReport* report = nullptr);

}  // namespace plumb::v4
