// Sampler: each filter checked on distributions worked out by hand (logits = log of simple
// probabilities), penalties on hand-computed logits, and fixed-seed reproducibility.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "plumb/runtime/sampler.h"
#include "plumb/util/error.h"

namespace plumb {
namespace {

// Logits whose softmax is exactly {0.1, 0.2, 0.3, 0.4}.
const std::vector<float> kLogits = {std::log(0.1f), std::log(0.2f), std::log(0.3f), std::log(0.4f)};

void expect_distribution(const SamplingParams& params, const std::vector<double>& expected,
                         const std::vector<float>& logits = kLogits) {
  std::vector<double> p = Sampler(params, logits.size()).distribution(logits);
  ASSERT_EQ(p.size(), expected.size());
  for (std::size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(p[i], expected[i], 1e-6) << "token " << i;
}

TEST(Sampler, TemperatureOneKeepsTheModelDistribution) { expect_distribution({}, {0.1, 0.2, 0.3, 0.4}); }

TEST(Sampler, TemperatureSharpens) {
  // T = 0.5 squares the probabilities: {1, 4, 9, 16} / 30.
  expect_distribution({.temperature = 0.5f}, {1 / 30.0, 4 / 30.0, 9 / 30.0, 16 / 30.0});
  // T = 2 takes square roots.
  double s = std::sqrt(0.1) + std::sqrt(0.2) + std::sqrt(0.3) + std::sqrt(0.4);
  expect_distribution({.temperature = 2.0f}, {std::sqrt(0.1) / s, std::sqrt(0.2) / s, std::sqrt(0.3) / s, std::sqrt(0.4) / s});
}

TEST(Sampler, TopK) {
  expect_distribution({.top_k = 2}, {0, 0, 3 / 7.0, 4 / 7.0});
  expect_distribution({.top_k = 1}, {0, 0, 0, 1});
  expect_distribution({.top_k = 10}, {0.1, 0.2, 0.3, 0.4});
  // Ties at the k-th value are all kept.
  expect_distribution({.top_k = 1}, {0.5, 0.5, 0}, {1.0f, 1.0f, 0.0f});
}

TEST(Sampler, TopP) {
  // Kept while the mass of the more likely tokens is below top_p: 0.4 (before: 0), 0.3 (before: 0.4).
  expect_distribution({.top_p = 0.5f}, {0, 0, 3 / 7.0, 4 / 7.0});
  expect_distribution({.top_p = 0.35f}, {0, 0, 0, 1});
  expect_distribution({.top_p = 0.75f}, {0, 2 / 9.0, 3 / 9.0, 4 / 9.0});
}

TEST(Sampler, MinP) {
  // Threshold 0.55 * 0.4 = 0.22 drops 0.1 and 0.2.
  expect_distribution({.min_p = 0.55f}, {0, 0, 3 / 7.0, 4 / 7.0});
  expect_distribution({.min_p = 0.3f}, {0, 0.2 / 0.9, 0.3 / 0.9, 0.4 / 0.9});  // threshold 0.12
}

TEST(Sampler, FiltersComposeAfterTemperature) {
  // T = 0.5 gives {1, 4, 9, 16}/30; top-k 3 keeps {4, 9, 16}/29; top-p 0.6 keeps 16/29 (0.55) and 9/29.
  expect_distribution({.temperature = 0.5f, .top_k = 3, .top_p = 0.6f}, {0, 0, 9 / 25.0, 16 / 25.0});
}

TEST(Sampler, RepetitionPenaltyDividesPositiveMultipliesNegative) {
  SamplingParams params{.repetition_penalty = 2.0f};
  Sampler s(params, 4);
  std::vector<std::uint32_t> prompt = {0, 1};
  s.observe_prompt(prompt);
  // Logits {2, -2, 1, 0} become {1, -4, 1, 0}.
  std::vector<double> p = s.distribution(std::vector<float>{2, -2, 1, 0});
  double z = 2 * std::exp(1.0) + std::exp(-4.0) + 1;
  EXPECT_NEAR(p[0], std::exp(1.0) / z, 1e-6);
  EXPECT_NEAR(p[1], std::exp(-4.0) / z, 1e-6);
  EXPECT_NEAR(p[2], std::exp(1.0) / z, 1e-6);
  EXPECT_NEAR(p[3], 1 / z, 1e-6);
}

TEST(Sampler, PresenceAndFrequencyPenaltiesCountGeneratedTokensOnly) {
  Sampler s({.presence_penalty = 0.5f, .frequency_penalty = 0.25f}, 4);
  std::vector<std::uint32_t> prompt = {0};
  s.observe_prompt(prompt);  // the prompt is not penalized
  s.observe_generated(2);
  s.observe_generated(2);
  s.observe_generated(3);
  // Logits all 0 become {0, 0, -0.5 - 2 * 0.25, -0.5 - 0.25}.
  std::vector<double> p = s.distribution(std::vector<float>(4, 0.0f));
  double z = 2 + std::exp(-1.0) + std::exp(-0.75);
  EXPECT_NEAR(p[0], 1 / z, 1e-6);
  EXPECT_NEAR(p[2], std::exp(-1.0) / z, 1e-6);
  EXPECT_NEAR(p[3], std::exp(-0.75) / z, 1e-6);
}

TEST(Sampler, GreedyPicksTheFirstLargest) {
  Sampler greedy({.greedy = true}, 4);
  EXPECT_EQ(greedy.sample(std::vector<float>{0, 3, 3, 1}), 1u);
  Sampler zero_temperature({.temperature = 0.0f}, 4);
  EXPECT_EQ(zero_temperature.sample(kLogits), 3u);
  // Penalties apply in greedy mode too: after generating 3, token 2 wins.
  Sampler penalized({.greedy = true, .repetition_penalty = 10.0f}, 4);
  penalized.observe_generated(3);
  EXPECT_EQ(penalized.sample(std::vector<float>{0, 1, 2, 3}), 2u);
}

std::vector<std::uint32_t> draws(std::uint64_t seed, int n, const SamplingParams& base = {}) {
  SamplingParams params = base;
  params.seed = seed;
  Sampler s(params, kLogits.size());
  std::vector<std::uint32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(s.sample(kLogits));
  return out;
}

TEST(Sampler, SeedReproducesDraws) {
  EXPECT_EQ(draws(42, 200), draws(42, 200));
  EXPECT_NE(draws(42, 200), draws(43, 200));
  // Pinned: the same seed must give these tokens on every platform and build.
  EXPECT_EQ(draws(42, 12), (std::vector<std::uint32_t>{3, 3, 3, 1, 3, 0, 2, 2, 1, 2, 0, 2}));
}

TEST(Sampler, EmpiricalFrequenciesMatchTheDistribution) {
  const int n = 200000;
  std::vector<int> counts(4);
  for (std::uint32_t t : draws(7, n)) ++counts[t];
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(counts[i] / double(n), 0.1 * (i + 1), 0.005) << "token " << i;
  std::vector<int> top_k_counts(4);
  for (std::uint32_t t : draws(7, n, {.top_k = 2})) ++top_k_counts[t];
  EXPECT_EQ(top_k_counts[0] + top_k_counts[1], 0);
  EXPECT_NEAR(top_k_counts[3] / double(n), 4 / 7.0, 0.005);
}

TEST(Sampler, RejectsBadParameters) {
  EXPECT_THROW(Sampler({.temperature = -1.0f}, 4), Error);
  EXPECT_THROW(Sampler({.top_k = -1}, 4), Error);
  EXPECT_THROW(Sampler({.top_p = 0.0f}, 4), Error);
  EXPECT_THROW(Sampler({.top_p = 1.5f}, 4), Error);
  EXPECT_THROW(Sampler({.min_p = 2.0f}, 4), Error);
  EXPECT_THROW(Sampler({.repetition_penalty = 0.0f}, 4), Error);
  Sampler s({}, 4);
  EXPECT_THROW(s.sample(std::vector<float>(3)), Error);
  EXPECT_THROW(s.observe_generated(4), Error);
}

TEST(SamplingDefaults, FromGenerationConfig) {
  auto dir = std::filesystem::temp_directory_path() / ("plumb_sampling_defaults_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  EXPECT_FALSE(sampling_defaults_for(dir.string()).greedy);  // no file: plain sampling

  // DeepSeek-V4-Flash's generation_config.json (MODEL-SPEC section 1).
  std::ofstream(dir / "generation_config.json") << R"({"bos_token_id": 0, "eos_token_id": 1, "do_sample": true,
    "temperature": 1.0, "top_p": 1.0})";
  SamplingParams v4 = sampling_defaults_for(dir.string());
  EXPECT_FALSE(v4.greedy);
  EXPECT_EQ(v4.temperature, 1.0f);
  EXPECT_EQ(v4.top_p, 1.0f);

  std::ofstream(dir / "generation_config.json") << R"({"temperature": 0.6, "top_p": 0.95, "top_k": 20, "min_p": 0.05,
    "repetition_penalty": 1.1})";
  SamplingParams other = sampling_defaults_for(dir.string());
  EXPECT_TRUE(other.greedy);  // do_sample defaults to false, as in HF
  EXPECT_EQ(other.temperature, 0.6f);
  EXPECT_EQ(other.top_p, 0.95f);
  EXPECT_EQ(other.top_k, 20);
  EXPECT_EQ(other.min_p, 0.05f);
  EXPECT_EQ(other.repetition_penalty, 1.1f);

  std::ofstream(dir / "generation_config.json") << R"({"top_p": 7})";
  EXPECT_THROW(sampling_defaults_for(dir.string()), Error);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace plumb
