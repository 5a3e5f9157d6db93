// Sampler's candidate-list filters against their whole-vocabulary form (sampler_reference.h):
// the same distribution bit for bit, so the same seeded draws, over random logits with ties and
// masked (-inf) tokens, every filter alone and combined, vocabularies up to V4's 129,280 (where
// top-p must sort past its first 1,024 ranks on a flat distribution).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>

#include "plumb/runtime/sampler.h"
#include "plumb/util/error.h"
#include "sampler_reference.h"

namespace plumb {
namespace {

struct Logits {
  std::vector<float> v;
  std::string what;
};

// Random logits: `spread` their scale (small: a flat distribution), `tie_step` > 0 rounds them to
// a grid (many exact ties), `masked` the share of -inf entries (never all).
Logits make_logits(std::mt19937_64& rng, std::size_t n, float spread, float tie_step, double masked) {
  std::normal_distribution<float> normal(0.f, spread);
  std::uniform_real_distribution<double> u(0, 1);
  Logits l;
  l.v.resize(n);
  for (float& x : l.v) {
    x = normal(rng);
    if (tie_step > 0) x = std::round(x / tie_step) * tie_step;
    if (u(rng) < masked) x = -std::numeric_limits<float>::infinity();
  }
  l.v[rng() % n] = 1.f;  // at least one finite
  l.what = "n=" + std::to_string(n) + " spread=" + std::to_string(spread) + " tie_step=" + std::to_string(tie_step) +
           " masked=" + std::to_string(masked);
  return l;
}

std::string describe(const SamplingParams& p) {
  return "temperature=" + std::to_string(p.temperature) + " top_k=" + std::to_string(p.top_k) +
         " top_p=" + std::to_string(p.top_p) + " min_p=" + std::to_string(p.min_p);
}

// The first index where the two distributions differ in any bit; -1 if none.
long first_difference(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(double)) != 0) return static_cast<long>(i);
  return -1;
}

// `excluded` (ascending) are passed to Sampler and set to -inf in the reference's copy.
void expect_same_as_reference(const Logits& l, const SamplingParams& params, int draws,
                              const std::vector<std::uint32_t>& excluded = {}) {
  const std::string what = l.what + " " + describe(params) + " excluded=" + std::to_string(excluded.size());
  Sampler fast(params, l.v.size());
  std::vector<float> masked = l.v;
  for (std::uint32_t id : excluded) masked[id] = -std::numeric_limits<float>::infinity();
  const std::vector<double> want = reference_sampler::distribution(masked, params),
                            got = fast.distribution(l.v, excluded);
  const long d = first_difference(got, want);
  ASSERT_EQ(d, -1) << what << ": token " << d << " has p " << got[static_cast<std::size_t>(d)] << ", reference "
                   << want[static_cast<std::size_t>(d)];
  std::mt19937_64 rng(params.seed);  // Sampler's draws: its seeded generator's top 53 bits
  for (int i = 0; i < draws; ++i) {
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    ASSERT_EQ(fast.sample(l.v, excluded), reference_sampler::draw(want, u)) << what << ", draw " << i;
  }
}

TEST(Sampler, FastFiltersEqualTheWholeVocabularyForm) {
  std::mt19937_64 rng(20261203);
  const float temperatures[] = {0.3f, 0.7f, 1.0f, 1.7f};
  const int top_ks[] = {0, 1, 2, 7, 50, 999, 1000, 1003};
  const float top_ps[] = {1.0f, 0.999f, 0.9f, 0.5f, 0.01f};
  const float min_ps[] = {0.0f, 0.05f, 0.4f};
  int cases = 0;
  for (std::size_t n : {1u, 2u, 5u, 1000u, 3000u})
    for (float tie_step : {0.f, 0.25f})
      for (double masked : {0.0, 0.3}) {
        const Logits l = make_logits(rng, n, 2.f, tie_step, masked);
        for (float t : temperatures)
          for (int k : top_ks)
            for (float p : top_ps)
              for (float m : min_ps) {
                if (rng() % 4 != 0) continue;  // a quarter of the grid: every value still meets every other
                SamplingParams params;
                params.temperature = t, params.top_k = k, params.top_p = p, params.min_p = m, params.seed = rng();
                expect_same_as_reference(l, params, 8);
                if (HasFatalFailure()) return;
                ++cases;
              }
      }
  EXPECT_GT(cases, 400);
}

// V4's vocabulary: a peaked distribution (top-p cut within the first ranks) and a flat one (the
// cut past the first 1,024 ranks: the whole sort), with ties and masked tokens.
TEST(Sampler, FastFiltersEqualTheWholeVocabularyFormAtV4Size) {
  std::mt19937_64 rng(7);
  for (const auto& [spread, tie_step] : {std::pair{4.f, 0.f}, std::pair{0.05f, 0.f}, std::pair{0.05f, 0.01f}}) {
    const Logits l = make_logits(rng, 129280, spread, tie_step, 0.01);
    for (const auto& [t, k, p, m] : {std::tuple{1.0f, 0, 0.95f, 0.0f}, std::tuple{0.7f, 0, 0.9f, 0.0f},
                                     std::tuple{0.6f, 40, 0.95f, 0.0f}, std::tuple{1.0f, 0, 1.0f, 0.05f},
                                     std::tuple{1.0f, 0, 1.0f, 0.0f}}) {
      SamplingParams params;
      params.temperature = t, params.top_k = k, params.top_p = p, params.min_p = m, params.seed = rng();
      expect_same_as_reference(l, params, 4);
    }
  }
}

// Ids excluded without a masked copy (RequestOutput's unknown ids): as if at -inf, greedy too (the
// first of the largest among the rest, where the largest of all is excluded and ties remain).
TEST(Sampler, ExcludedIdsActAsMinusInfinity) {
  std::mt19937_64 rng(11);
  for (std::size_t n : {7u, 3000u}) {
    Logits l = make_logits(rng, n, 2.f, 0.5f, 0.1);
    const auto top = static_cast<std::uint32_t>(std::max_element(l.v.begin(), l.v.end()) - l.v.begin());
    std::vector<std::uint32_t> excluded = {top, top};  // a repeat too
    for (std::uint32_t i = 0; i < n; i += 3) if (i != top) excluded.push_back(i);
    std::sort(excluded.begin(), excluded.end());
    for (float p : {1.0f, 0.9f}) {
      SamplingParams params;
      params.top_p = p, params.top_k = 20, params.seed = rng();
      expect_same_as_reference(l, params, 16, excluded);
    }
    std::vector<float> masked = l.v;
    for (std::uint32_t id : excluded) masked[id] = -std::numeric_limits<float>::infinity();
    SamplingParams greedy;
    greedy.greedy = true;
    Sampler s(greedy, n);
    EXPECT_EQ(s.sample(l.v, excluded), std::max_element(masked.begin(), masked.end()) - masked.begin()) << l.what;
  }
}

// With penalties the sampler works on a penalized copy: the reference on the same values computed
// by hand (HF's repetition penalty over prompt and output, presence and frequency over output).
TEST(Sampler, PenalizedCandidatesEqualTheWholeVocabularyForm) {
  std::mt19937_64 rng(12);
  const Logits l = make_logits(rng, 2000, 2.f, 0.f, 0.0);
  SamplingParams params;
  params.repetition_penalty = 1.3f, params.presence_penalty = 0.4f, params.frequency_penalty = 0.2f;
  params.top_p = 0.8f, params.seed = 99;
  Sampler s(params, l.v.size());
  const std::vector<std::uint32_t> prompt = {5, 9, 9, 1999}, out = {9, 17, 17, 3};
  s.observe_prompt(prompt);
  for (std::uint32_t t : out) s.observe_generated(t);
  std::vector<float> want = l.v;
  for (std::uint32_t t : {3u, 5u, 9u, 17u, 1999u}) want[t] = want[t] < 0 ? want[t] * 1.3f : want[t] / 1.3f;
  for (const auto& [t, count] : {std::pair{9u, 1}, std::pair{17u, 2}, std::pair{3u, 1}})
    want[t] -= 0.4f + 0.2f * float(count);
  const std::vector<double> expected = reference_sampler::distribution(want, params), got = s.distribution(l.v);
  EXPECT_EQ(first_difference(got, expected), -1);
}

TEST(Sampler, EveryTokenMaskedIsAnError) {
  const std::vector<float> l(5, -std::numeric_limits<float>::infinity());
  SamplingParams params;
  params.seed = 1;
  Sampler s(params, l.size());
  EXPECT_THROW(s.sample(l), Error);
}

}  // namespace
}  // namespace plumb
