#pragma once
// Per-layer RoPE frequencies of DeepSeek-V4 (MODEL-SPEC 2.4): ratio-0 layers use rope_theta with
// no scaling; compressed layers use compress_rope_theta with the YaRN frequency blend (no
// magnitude scaling). One table serves the layer's q, kv, compressed kv and indexer q/keys.
#include <cstdint>
#include <vector>

#include "plumb/format/config.h"

namespace plumb::v4 {

// inv_freq[i] for pair i = 0 .. qk_rope_head_dim/2 - 1, in f32.
std::vector<float> rope_inv_freq(const ModelConfig& cfg, int64_t layer);

// The YaRN ramp bounds [low, high] for `dim` rotary dims (exposed for tests).
struct YarnRange {
  double low, high;
};
YarnRange yarn_range(int64_t dim, double theta, int64_t original_max_pos, double beta_fast, double beta_slow);

}  // namespace plumb::v4
