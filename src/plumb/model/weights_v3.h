#pragma once
// DeepSeek-V3 weights bound from a checkpoint in the HF layout (MODEL-SPEC 7: `model.` names,
// FP8 e4m3 linears with F32 `weight_scale_inv` 128x128 block scales): typed views by layer,
// checked against the config's shapes. Nothing is copied or decoded here.
#include <string>
#include <vector>

#include "plumb/format/config.h"
#include "plumb/format/safetensors.h"
#include "plumb/format/weight_view.h"
#include "plumb/model/binder.h"

namespace plumb::v3 {

struct MlaWeights {
  WeightView q_a_proj;            // [q_lora_rank, D]
  WeightView q_a_layernorm;       // [q_lora_rank]
  WeightView q_b_proj;            // [H*(nope+rope), q_lora_rank]
  WeightView kv_a_proj_with_mqa;  // [kv_lora_rank + rope, D]: latent rows, then the shared rope key
  WeightView kv_a_layernorm;      // [kv_lora_rank]
  WeightView kv_b_proj;           // [H*(nope+v), kv_lora_rank]: per head nope-K rows, then V rows
  WeightView o_proj;              // [D, H*v]
};

struct MlpWeights {  // SwiGLU: down(silu(gate x) * up x)
  WeightView gate_proj, up_proj, down_proj;
};

struct MoeWeights {
  WeightView gate;  // bf16 [n_experts, D]
  WeightView bias;  // f32 [n_experts] e_score_correction_bias (selection only)
  std::vector<MlpWeights> experts;
  MlpWeights shared;  // moe_intermediate_size * n_shared_experts wide
};

struct LayerWeights {
  int64_t index = 0;
  bool dense = false;  // index < first_k_dense_replace: `mlp` is used, `moe` is empty
  WeightView input_layernorm, post_attention_layernorm;
  MlaWeights attn;
  MlpWeights mlp;
  MoeWeights moe;
};

struct ModelWeights {
  WeightView embed, norm, lm_head;
  std::vector<LayerWeights> layers;
  WeightFormat expert_format = WeightFormat::FP8Block128;  // of the routed experts, from the tensors
  int64_t mtp_tensors_skipped = 0;  // model.layers.{num_hidden_layers..} (MTP): recognized, not bound
};

// Binds every tensor. With report == nullptr any problem throws plumb::Error with the summary;
// otherwise problems are collected in *report and the affected views are left empty.
ModelWeights bind_weights(const Checkpoint& ckpt, const ModelConfig& cfg, BindReport* report = nullptr);

}  // namespace plumb::v3
