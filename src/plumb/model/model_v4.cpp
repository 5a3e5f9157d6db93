#include "plumb/model/model_v4.h"

namespace plumb::v4 {

CacheSpec cache_spec_v4(const ModelConfig& cfg) {
  CacheSpec spec;
  const int64_t Dh = cfg.head_dim, di = cfg.index_head_dim;
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    LayerCacheSpec s;
    s.window = cfg.sliding_window;
    s.window_row = Dh;
    const int64_t m = cfg.compress_ratio(l);
    s.kind = cfg.attn_type(l);
    if (s.kind == AttnType::CSA) {  // overlapping compressor windows (2m slots of 2 Dh), plus the indexer's
      s.fixed = 2 * (2 * m) * (2 * Dh) + 2 * (2 * m) * (2 * di);
      s.entry = Dh + di;
    } else if (s.kind == AttnType::HCA) {  // m slots of Dh
      s.fixed = 2 * m * Dh;
      s.entry = Dh;
    }
    s.ratio = m;
    spec.layers.push_back(s);
  }
  return spec;
}

}  // namespace plumb::v4
