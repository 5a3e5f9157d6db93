#pragma once
// Writes a random DeepSeek-V4 checkpoint in the exact official layout (native names, FP8 e4m3 +
// ue8m0 128x128 scales, FP4 packed experts + ue8m0 1x32 scales, bf16/f32/i64 where the release
// has them, sharded like the release: embed | one shard per layer | norm+head | mtp) for any
// config: the tiny embedded default, test fixtures, and real-dimension benchmark models.
#include <cstdint>
#include <string>

namespace plumb::v4 {

struct SynthOptions {
  std::string config_path;  // config.json (deepseek_v4)
  std::string out_dir;
  uint64_t seed = 1234;
  bool fp8_experts = false;  // V4-Base style FP8 routed experts instead of FP4
  bool with_mtp = true;
  bool force = false;  // overwrite an existing out_dir
};

struct SynthResult {
  int64_t tensors = 0;
  uint64_t bytes = 0;
  int64_t shards = 0;
};

SynthResult synthesize_checkpoint(const SynthOptions& opt);

}  // namespace plumb::v4
