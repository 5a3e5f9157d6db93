#pragma once
// DeepSeek-V3 behind the Model interface: the forward of forward_v3.* on its bound weights, in
// the reference numerics (f32, what HF computes) or the faithful ones (the release's bf16
// inference/model.py), on any backend.
#include "plumb/model/checkpoint_model.h"
#include "plumb/model/forward_v3.h"
#include "plumb/model/weights_v3.h"

namespace plumb::v3 {

// What each layer of `cfg` keeps per sequence: the latent and the rope key of every token.
CacheSpec cache_spec_v3(const ModelConfig& cfg);

struct Traits {
  using Forward = ForwardV3;
  using Weights = ModelWeights;
  using State = SequenceState;
  static constexpr Arch kArch = Arch::DeepseekV3;
  static constexpr const char* kName = "ModelV3";
  static constexpr const char* kResidualTap = "residual";
  static Weights bind(const Checkpoint& c, const ModelConfig& cfg, BindReport* report = nullptr) {
    return bind_weights(c, cfg, report);
  }
  static auto& routed_experts(LayerWeights& layer) { return layer.moe.experts; }
  static CacheSpec cache_spec(const ModelConfig& cfg) { return cache_spec_v3(cfg); }
};

using ModelV3 = CheckpointModel<Traits>;

}  // namespace plumb::v3
