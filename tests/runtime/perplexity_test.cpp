// The perplexity definition with fake logprobs: window boundaries, the BOS input, batching, and
// NLL values checked by hand.
#include "plumb/runtime/perplexity.h"

#include <gtest/gtest.h>

#include <cmath>

#include "plumb/util/error.h"

namespace plumb {
namespace {

constexpr std::size_t kVocab = 8;

// A uniform distribution over kVocab ids at every predicting position (all but the last);
// records the inputs it saw, batch by batch.
struct UniformModel {
  std::vector<std::vector<std::vector<TokenId>>> calls;
  WindowLogprobsFn fn() {
    return [this](std::span<const std::vector<TokenId>> inputs) {
      calls.emplace_back(inputs.begin(), inputs.end());
      std::vector<std::vector<float>> out;
      for (const auto& in : inputs) out.emplace_back(in.size() - 1, static_cast<float>(-std::log(double(kVocab))));
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
  // Uniform over 8 ids: every target costs log 8 (as a float), so the perplexity is 8.
  EXPECT_NEAR(r.nll, 10 * std::log(8.0), 1e-5);
  EXPECT_NEAR(r.ppl(), 8.0, 1e-5);
}

TEST(Perplexity, LogprobJScoresTokenJPlusOne) {
  // The logprob of input[j + 1] is -(j + 1) / 10 + (target id) / 100: the sum tells whether each
  // target was scored at its own position with its own id.
  const std::vector<TokenId> ids = {1, 2, 0, 3, 5};
  const WindowLogprobsFn fn = [](std::span<const std::vector<TokenId>> inputs) {
    std::vector<std::vector<float>> out;
    for (const auto& in : inputs) {
      std::vector<float> l;
      for (std::size_t j = 0; j + 1 < in.size(); ++j) l.push_back(static_cast<float>(-static_cast<double>(j + 1) / 10.0 + in[j + 1] / 100.0));
      out.push_back(l);
    }
    return out;
  };
  const PerplexityResult r = perplexity(ids, {3, 0, 1}, fn);  // windows {1, 2, 0} and {3, 5}
  const double want = (0.1 - 0.01) + (0.2 - 0.02) + (0.3 - 0.0) + (0.1 - 0.03) + (0.2 - 0.05);
  EXPECT_NEAR(r.nll, want, 1e-6);
  EXPECT_EQ(r.windows, 2);
  EXPECT_EQ(r.tokens, 5);
}

TEST(Perplexity, RejectsBadInput) {
  UniformModel m;
  const std::vector<TokenId> ids = {1, 2};
  EXPECT_THROW(perplexity({}, {}, m.fn()), Error);
  EXPECT_THROW(perplexity(ids, {0, 0, 1}, m.fn()), Error);
  EXPECT_THROW(perplexity(ids, {4, 0, 0}, m.fn()), Error);
  const WindowLogprobsFn wrong_count = [](std::span<const std::vector<TokenId>> inputs) {
    return std::vector<std::vector<float>>(inputs.size(), std::vector<float>(5, -1.f));
  };
  EXPECT_THROW(perplexity(ids, {}, wrong_count), Error);  // 5 logprobs for 2 targets
  const WindowLogprobsFn nan_logprobs = [](std::span<const std::vector<TokenId>> inputs) {
    return std::vector<std::vector<float>>(inputs.size(), std::vector<float>(2, std::nanf("")));
  };
  EXPECT_THROW(perplexity(ids, {}, nan_logprobs), Error);
}

}  // namespace
}  // namespace plumb
