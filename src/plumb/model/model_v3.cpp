#include "plumb/model/model_v3.h"

namespace plumb::v3 {

CacheSpec cache_spec_v3(const ModelConfig& cfg) {
  CacheSpec spec;
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l)
    spec.layers.push_back({.kind = AttnType::MLA, .ratio = 1, .entry = cfg.kv_lora_rank + cfg.qk_rope_head_dim});
  return spec;
}

}  // namespace plumb::v3
