// Per-layer RoPE frequencies (MODEL-SPEC 2.4) for the real V4-Flash settings.
#include "plumb/model/rope_v4.h"

#include <gtest/gtest.h>

#include <cmath>

namespace plumb::v4 {
namespace {

ModelConfig flash_like() {
  ModelConfig c;
  c.num_hidden_layers = 3;
  c.num_nextn_predict_layers = 0;
  c.compress_ratios = {0, 4, 128};
  c.qk_rope_head_dim = 64;
  c.rope_theta = 10000;
  c.compress_rope_theta = 160000;
  c.rope_scaling = RopeScaling{"yarn", 16, 65536, 32, 1};
  return c;
}

TEST(RopeV4, YarnRangeOfTheRelease) {
  const YarnRange r = yarn_range(64, 160000, 65536, 32, 1);
  EXPECT_EQ(r.low, 15);
  EXPECT_EQ(r.high, 25);
}

TEST(RopeV4, SlidingLayersUnscaledCompressedLayersBlended) {
  const ModelConfig c = flash_like();
  const std::vector<float> swa = rope_inv_freq(c, 0), csa = rope_inv_freq(c, 1), hca = rope_inv_freq(c, 2);
  ASSERT_EQ(swa.size(), 32u);
  for (int i = 0; i < 32; ++i) EXPECT_FLOAT_EQ(swa[i], std::pow(10000.0, -i / 32.0));
  auto base = [](int i) { return std::pow(160000.0, -i / 32.0); };
  for (int i = 0; i <= 15; ++i) EXPECT_FLOAT_EQ(csa[i], base(i));
  for (int i = 25; i < 32; ++i) EXPECT_FLOAT_EQ(csa[i], base(i) / 16);
  // the spec's examples: f'_16 = 0.90625 f_16, f'_20 = 0.53125 f_20, f'_24 = 0.15625 f_24
  EXPECT_FLOAT_EQ(csa[16], 0.90625 * base(16));
  EXPECT_FLOAT_EQ(csa[20], 0.53125 * base(20));
  EXPECT_FLOAT_EQ(csa[24], 0.15625 * base(24));
  EXPECT_EQ(csa, hca);
}

}  // namespace
}  // namespace plumb::v4
