// The perplexity definition with fake logits: window boundaries, the BOS input, batching, and
// NLL values checked by hand.
#include "plumb/runtime/perplexity.h"

#include <gtest/gtest.h>

#include <cmath>

#include "plumb/util/error.h"

namespace plumb {
namespace {

constexpr std::size_t kVocab = 8;

// Uniform logits for every predicting position (all but the last); records the inputs it saw,
// batch by batch.
struct UniformModel {
  std::vector<std::vector<std::vector<TokenId>>> calls;
  WindowLogitsFn fn() {
    return [this](std::span<const std::vector<TokenId>> inputs) {
      calls.emplace_back(inputs.begin(), inputs.end());
      std::vector<std::vector<float>> out;
      for (const auto& in : inputs) out.emplace_back((in.size() - 1) * kVocab, 0.5f);
      return out;
    };
  }
};

TEST(Perplexity, WindowsAreBosPlusConsecutiveSlices) {
  const std::vector<TokenId> ids = {1, 2, 3, 4, 5, 6, 7, 0, 1, 2};
  UniformModel m;
  PerplexityOptions o{4, 0, 2};
  std::vector<std::int64_t> progress;
  const PerplexityResult r =
      perplexity(ids, o, m.fn(), [&](const PerplexityResult& p) { progress.push_back(p.tokens); });
  ASSERT_EQ(m.calls.size(), 2u);  // 3 windows in batches of 2
  EXPECT_EQ(m.calls[0], (std::vector<std::vector<TokenId>>{{0, 1, 2, 3, 4}, {0, 5, 6, 7, 0}}));
  EXPECT_EQ(m.calls[1], (std::vector<std::vector<TokenId>>{{0, 1, 2}}));
  EXPECT_EQ(progress, (std::vector<std::int64_t>{8, 10}));
  EXPECT_EQ(r.tokens, 10);
  EXPECT_EQ(r.windows, 3);
  EXPECT_EQ(window_count(10, 4), 3);
  // Uniform over 8 ids: every target costs log 8, so the perplexity is 8.
  EXPECT_NEAR(r.nll, 10 * std::log(8.0), 1e-12);
  EXPECT_NEAR(r.ppl(), 8.0, 1e-12);
}

TEST(Perplexity, LogitsAtPositionJPredictTokenJ) {
  // Position j's logits put 2 on id (j + 1) % 4 and 0 elsewhere (vocab 4). Targets chosen to hit
  // that id on the first two positions and miss it on the third.
  const std::vector<TokenId> ids = {1, 2, 0};
  const WindowLogitsFn fn = [](std::span<const std::vector<TokenId>> inputs) {
    std::vector<std::vector<float>> out;
    for (const auto& in : inputs) {
      std::vector<float> l((in.size() - 1) * 4, 0.f);
      for (std::size_t j = 0; j + 1 < in.size(); ++j) l[j * 4 + (j + 1) % 4] = 2.f;
      out.push_back(l);
    }
    return out;
  };
  const PerplexityResult r = perplexity(ids, {256, 0, 1}, fn);
  const double z = std::log(std::exp(2.0) + 3.0);
  EXPECT_NEAR(r.nll, (z - 2.0) + (z - 2.0) + z, 1e-12);
  EXPECT_EQ(r.windows, 1);
}

TEST(Perplexity, TokenNllIsStableForLargeLogits) {
  const std::vector<float> logits = {1000.f, 1000.f};
  EXPECT_NEAR(token_nll(logits, 0), std::log(2.0), 1e-12);
  EXPECT_THROW(token_nll(logits, 2), Error);
}

TEST(Perplexity, RejectsBadInput) {
  UniformModel m;
  const std::vector<TokenId> ids = {1, 2};
  EXPECT_THROW(perplexity({}, {}, m.fn()), Error);
  EXPECT_THROW(perplexity(ids, {0, 0, 1}, m.fn()), Error);
  EXPECT_THROW(perplexity(ids, {4, 0, 0}, m.fn()), Error);
  const WindowLogitsFn short_logits = [](std::span<const std::vector<TokenId>> inputs) {
    return std::vector<std::vector<float>>(inputs.size(), std::vector<float>(5, 0.f));
  };
  EXPECT_THROW(perplexity(ids, {}, short_logits), Error);  // 5 logits for 2 predicting positions
  const WindowLogitsFn nan_logits = [](std::span<const std::vector<TokenId>> inputs) {
    return std::vector<std::vector<float>>(inputs.size(), std::vector<float>(2 * 4, std::nanf("")));
  };
  EXPECT_THROW(perplexity(ids, {}, nan_logits), Error);
}

}  // namespace
}  // namespace plumb
