// plumb verify --isolate-layers feeds a forward the reference's residual stream through
// Taps::with_replacement. These tests show that the replacement really takes the place of the
// computed stream, on both architectures: the last layer's residual replaced by zeros makes every
// logit exactly 0 (RMSNorm of zeros is zero, and so is the head's product), and a replacement of
// the wrong size is refused with the tap's name.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "plumb/format/config.h"
#include "plumb/model/numerics.h"
#include "plumb/model/model_v3.h"
#include "plumb/model/model_v4.h"
#include "plumb/model/taps.h"
#include "plumb/util/error.h"

namespace plumb {
namespace {

namespace fs = std::filesystem;

const fs::path kGolden = fs::path(PLUMB_TEST_DATA) / "golden";
const std::vector<TokenId> kIds = {5, 9, 17, 3};

// Taps that replace `name` with `values` and record nothing.
Taps replacing(const std::string& name, const std::vector<float>* values) {
  Taps t;
  t.with_replacement([name, values](const std::string& n) { return n == name ? values : nullptr; });
  return t;
}

template <class Model>
void expect_zero_logits_after_replacement(Model& m, const std::string& residual, int64_t width) {
  const std::vector<float> zeros(kIds.size() * static_cast<std::size_t>(width), 0.f);
  const std::vector<float> normal = m.prompt_logits(kIds);
  int64_t nonzero = 0;
  for (float v : normal) nonzero += v != 0.f;
  ASSERT_GT(nonzero, 0) << "the model's own logits are all zero: the test would prove nothing";
  const std::vector<float> replaced = m.prompt_logits(kIds, replacing(residual, &zeros));
  ASSERT_EQ(replaced.size(), normal.size());
  for (std::size_t i = 0; i < replaced.size(); ++i) ASSERT_EQ(replaced[i], 0.f) << residual << " at logit " << i;

  const std::vector<float> wrong(3, 1.f);
  try {
    m.prompt_logits(kIds, replacing(residual, &wrong));
    FAIL() << "a replacement of the wrong size was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(residual), std::string::npos) << e.what();
  }
}

TEST(TapReplacement, V3ResidualStream) {
  const fs::path dir = kGolden / "v3" / "tiny-a";
  const ModelConfig cfg = load_model_config(dir.string());
  for (Numerics n : {Numerics::Reference, Numerics::Faithful}) {
    auto m = v3::ModelV3::load(dir.string(), {"cpu", 0, n});
    expect_zero_logits_after_replacement(*m, "layer." + std::to_string(cfg.num_hidden_layers - 1) + ".residual",
                                         cfg.hidden_size);
  }
}

TEST(TapReplacement, V4HyperConnectionStreams) {
  const fs::path dir = kGolden / "v4" / "tiny-a";
  const ModelConfig cfg = load_model_config(dir.string());
  auto m = v4::ModelV4::load(dir.string(), {"cpu", 0, Numerics::Faithful});
  expect_zero_logits_after_replacement(*m, "layer." + std::to_string(cfg.num_hidden_layers - 1) + ".hc",
                                       cfg.hc_mult * cfg.hidden_size);
}

}  // namespace
}  // namespace plumb
