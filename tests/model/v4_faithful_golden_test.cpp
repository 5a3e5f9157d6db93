// The `faithful` profile against the release's own inference/model.py
// (tests/data/golden/v4-faithful/<config>/, made by tools/golden/make_v4_faithful.py on the
// checkpoints of tests/data/golden/v4/<config>/).
//
// What to expect, from the release's own noise floors (meta.json, issue 13): its GEMM-order floor
// (one f32 GEMM instead of the kernels' blockwise promotion) is bitwise at every prompt, but the
// same release code run by torch on the CPU instead of the GPU scores cosine 0.974-1.0 at <= 8
// tokens and 0.986-0.9999 at 17-259 tokens against its GPU goldens (release_cpu_vs_gpu): f32
// reduction-order differences flip bf16 / FP8 roundings and these tiny random models amplify
// them. plumb scores 1.000000 (six digits) at <= 5 tokens and 0.991-1.0 beyond, closer to the GPU release
// than the release's CPU run at most prompts. So: near-equality where no flip has had room to grow
// (<= 5 tokens) and cosine >= 0.99 / 80% argmax elsewhere, which already sits at or above the
// release's own cross-platform spread; a missing or misplaced quantization point costs far more
// (the reference profile scores 0.81-0.99 against these goldens).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <regex>
#include <vector>

#include "plumb/format/npy.h"
#include "plumb/model/model_v4.h"

namespace plumb {
namespace {

namespace fs = std::filesystem;

TEST(V4FaithfulGolden, LogitsFollowTheRelease) {
  const fs::path root = fs::path(PLUMB_TEST_DATA) / "golden";
  if (!fs::exists(root / "v4-faithful")) FAIL() << "no faithful fixtures: they are committed under tests/data/golden/v4-faithful";
  int checked = 0;
  for (const auto& cfg_dir : fs::directory_iterator(root / "v4-faithful")) {
    const fs::path model_dir = root / "v4" / cfg_dir.path().filename();
    if (!fs::exists(model_dir / "config.json")) continue;
    auto model = v4::ModelV4::load(model_dir.string(), {"cpu", 2, Numerics::Faithful});
    const int64_t V = model->config().vocab_size;
    const std::regex re("prompt_([0-9]+)\\.logits\\.npy");
    for (const auto& f : fs::directory_iterator(cfg_dir.path())) {
      std::smatch m;
      const std::string name = f.path().filename().string();
      if (!std::regex_match(name, m, re)) continue;
      const int64_t L = std::stoll(m[1]);
      const NpyArray want = read_npy(f.path().string());
      ASSERT_EQ(want.shape, (std::vector<int64_t>{L, V})) << f.path();
      std::vector<float> w(static_cast<std::size_t>(L * V));
      std::memcpy(w.data(), want.data.data(), w.size() * sizeof(float));
      const std::vector<float> got =
          model->prompt_logits(read_token_ids((model_dir / ("prompt_" + std::to_string(L) + ".ids.npy")).string()));
      double dot = 0, na = 0, nb = 0;
      for (std::size_t i = 0; i < w.size(); ++i) dot += double(got[i]) * w[i], na += double(got[i]) * got[i], nb += double(w[i]) * w[i];
      const double cos = dot / std::sqrt(na * nb);
      int64_t agree = 0;
      for (int64_t t = 0; t < L; ++t)
        agree += argmax(std::span<const float>(got.data() + t * V, V)) == argmax(std::span<const float>(w.data() + t * V, V));
      std::printf("[faithful golden] %s prompt_%lld: cosine %.6f, argmax agreement %lld/%lld\n",
                  cfg_dir.path().filename().c_str(), static_cast<long long>(L), cos, static_cast<long long>(agree),
                  static_cast<long long>(L));
      EXPECT_GE(cos, L <= 5 ? 0.99999 : 0.99) << name;
      EXPECT_GE(agree, L <= 5 ? L : (8 * L) / 10) << name;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

}  // namespace
}  // namespace plumb
