#pragma once
// DeepSeek-V4 behind the Model interface: the forward of forward_v4.* on its bound weights.
#include "plumb/model/checkpoint_model.h"
#include "plumb/model/forward_v4.h"
#include "plumb/model/weights_v4.h"

namespace plumb::v4 {

// What each layer of `cfg` keeps per sequence (state_v4.h).
CacheSpec cache_spec_v4(const ModelConfig& cfg);

struct Traits {
  using Forward = ForwardV4;
  using Weights = ModelWeights;
  using State = SequenceState;
  static constexpr Arch kArch = Arch::DeepseekV4;
  static constexpr const char* kName = "ModelV4";
  static constexpr const char* kResidualTap = "hc";  // the mHC streams after each layer
  static Weights bind(const Checkpoint& c, const ModelConfig& cfg, BindReport* report = nullptr) {
    return bind_weights(c, cfg, report);
  }
  static auto& routed_experts(LayerWeights& layer) { return layer.ffn.experts; }
  static CacheSpec cache_spec(const ModelConfig& cfg) { return cache_spec_v4(cfg); }
};

using ModelV4 = CheckpointModel<Traits>;

}  // namespace plumb::v4
