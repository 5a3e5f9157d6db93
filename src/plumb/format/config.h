#pragma once
// config.json -> ModelConfig for deepseek_v4 and deepseek_v3 checkpoints. Every field the
// forward needs is read and validated; a missing or inconsistent field is a plumb::Error that
// names the field and the file ("config.json: field 'compress_ratios' has 42 entries, expected
// num_hidden_layers + num_nextn_predict_layers = 44").
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace plumb {

enum class Arch { DeepseekV4, DeepseekV3 };
const char* arch_name(Arch a);

struct RopeScaling {  // YaRN
  std::string type = "yarn";
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 1.0;          // V3 only
  double mscale_all_dim = 0.0;  // V3 only
};

struct QuantizationConfig {
  std::string quant_method;  // "fp8" or "" when absent
  std::string fmt;           // "e4m3"
  std::string scale_fmt;     // "ue8m0" (V4, V3.1) or "" (V3: fp32 activation scales)
  std::string activation_scheme;
  std::vector<int64_t> weight_block_size;  // [128, 128]
};

// Attention layer kinds, by role. DeepSeek-V4: SWA (ratio 0: the sliding window only), CSA
// (compressed sparse attention, ratio 4: overlapping windows + the Lightning indexer), HCA
// (heavily compressed attention, any other ratio >= 2: disjoint windows, no indexer; 128 in
// V4-Flash, 16 in tiny test models); compress_ratio() gives the actual ratio. DeepSeek-V3: MLA
// (multi-head latent attention, every layer).
enum class AttnType { SWA, CSA, HCA, MLA };

struct ModelConfig {
  Arch arch = Arch::DeepseekV4;
  std::string model_type;  // as written in config.json
  // shared
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t q_lora_rank = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t n_routed_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t n_shared_experts = 0;
  int64_t moe_intermediate_size = 0;
  int64_t num_nextn_predict_layers = 0;
  std::string scoring_func;  // "sqrtsoftplus" (V4) / "sigmoid" (V3)
  std::string topk_method;   // "noaux_tc"
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  std::optional<RopeScaling> rope_scaling;
  int64_t max_position_embeddings = 0;
  int64_t bos_token_id = 0;
  int64_t eos_token_id = 1;
  bool tie_word_embeddings = false;
  QuantizationConfig quantization;

  // deepseek_v4
  int64_t head_dim = 0;            // 512
  int64_t o_groups = 0;            // 8
  int64_t o_lora_rank = 0;         // 1024
  int64_t sliding_window = 0;      // 128
  // num_hidden_layers + num_nextn_predict_layers entries, each 0 or >= 2. A config listing only
  // the main layers (as HF truncates it) is padded with 0 for the MTP layers (OFF: MTP is ratio 0).
  std::vector<int64_t> compress_ratios;
  double compress_rope_theta = 0;  // 160000
  int64_t index_n_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;
  int64_t num_hash_layers = 0;
  double swiglu_limit = 0;  // 0 = no clamp
  int64_t hc_mult = 0;
  int64_t hc_sinkhorn_iters = 0;
  double hc_eps = 0;
  std::string expert_dtype;  // "fp4" / "fp8" / "" (informational; binding detects from tensors)

  // deepseek_v3
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t v_head_dim = 0;
  int64_t intermediate_size = 0;  // dense layers
  int64_t first_k_dense_replace = 0;
  int64_t n_group = 0;
  int64_t topk_group = 0;
  int64_t moe_layer_freq = 1;

  // What the file holds that the release and HF accept but that is unusual (one sentence each);
  // load_model_config prints them to stderr.
  std::vector<std::string> warnings;

  // derived helpers
  // Both throw for a layer outside [0, num_hidden_layers + num_nextn_predict_layers).
  AttnType attn_type(int64_t layer) const;  // V4: from compress_ratios[layer]; throws for V3 (MLA)
  int64_t compress_ratio(int64_t layer) const;  // V3: always 0
  bool is_hash_layer(int64_t layer) const { return layer < num_hash_layers; }
  bool is_dense_layer(int64_t layer) const { return arch == Arch::DeepseekV3 && layer < first_k_dense_replace; }
};

// Parses and validates. `source` names the file in error messages.
ModelConfig parse_model_config(const nlohmann::json& j, const std::string& source);
// Reads DIR/config.json (or a path to a config.json file).
ModelConfig load_model_config(const std::string& path);

}  // namespace plumb
