#include "plumb/runtime/sampler.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>

#include "plumb/util/error.h"

namespace plumb {
namespace {

// The tokens a draw can still pick, in index order, with their tempered logits. Every filter
// below works on this list instead of the whole vocabulary (129,280 entries for V4): a token
// outside it is one whose logit is -inf, and the sums come out bit for bit as over the whole
// vocabulary, because an entry at -inf adds exp(-inf) = +0 to a non-negative double sum, which
// leaves it unchanged. tests/runtime/sampler_reference.h keeps the whole-vocabulary form, and
// Sampler.FastFiltersEqualTheWholeVocabularyForm checks the two against each other.
struct Kept {
  std::vector<std::uint32_t> ids;
  std::vector<double> logits;

  void keep_if(const std::vector<char>& keep) {  // keeps the order
    std::size_t out = 0;
    for (std::size_t i = 0; i < ids.size(); ++i)
      if (keep[i]) ids[out] = ids[i], logits[out] = logits[i], ++out;
    ids.resize(out);
    logits.resize(out);
  }
};

// Calls f(i) for every index in [0, n) not in `excluded` (ascending; repeats allowed), in order.
template <class F>
void for_each_included(std::size_t n, std::span<const std::uint32_t> excluded, F&& f) {
  std::size_t next = 0;
  for (std::uint32_t i = 0; i < n; ++i) {
    while (next < excluded.size() && excluded[next] < i) ++next;
    if (next < excluded.size() && excluded[next] == i) continue;
    f(i);
  }
}

// The tempered logits that are not -inf (masked tokens and filtered ones never come back); the
// excluded ids count as -inf.
Kept tempered(std::span<const float> scores, std::span<const std::uint32_t> excluded, float temperature) {
  Kept k;
  k.ids.reserve(scores.size());
  k.logits.reserve(scores.size());
  for_each_included(scores.size(), excluded, [&](std::uint32_t i) {
    const double x = static_cast<double>(scores[i]) / temperature;
    if (x != -std::numeric_limits<double>::infinity()) k.ids.push_back(i), k.logits.push_back(x);
  });
  if (k.ids.empty()) fail("every token's logit is -inf: nothing to sample");
  return k;
}

// exp(x - max) normalized, summed in index order.
std::vector<double> softmax(const Kept& k) {
  const double max = *std::max_element(k.logits.begin(), k.logits.end());
  std::vector<double> p(k.logits.size());
  double sum = 0;
  for (std::size_t i = 0; i < p.size(); ++i) sum += p[i] = std::exp(k.logits[i] - max);
  for (double& x : p) x /= sum;
  return p;
}

// Keeps the k largest logits; those equal to the k-th largest are kept too (as HF does). With k
// at least the kept count, the k-th largest of the vocabulary is -inf or below every kept logit.
void keep_top_k(Kept& kept, int k) {
  if (k <= 0 || static_cast<std::size_t>(k) >= kept.ids.size()) return;
  std::vector<double> sorted = kept.logits;
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<>());
  const double kth = sorted[k - 1];
  std::vector<char> keep(kept.ids.size());
  for (std::size_t i = 0; i < keep.size(); ++i) keep[i] = kept.logits[i] >= kth;
  kept.keep_if(keep);
}

// Keeps the most likely tokens while the mass before each is below top_p (at least one): ranks by
// probability, ties by index (what a stable sort of the index order gives), sorted only as far as
// the cut needs: the first 1,024 ranks (a peaked distribution's cut is there), else all.
void keep_top_p(Kept& kept, double top_p) {
  if (top_p >= 1.0) return;
  const std::vector<double> p = softmax(kept);
  const std::size_t n = p.size();
  // (probability, position in `kept`, whose order is the index order), contiguous for the sort.
  std::vector<std::pair<double, std::uint32_t>> order(n);
  for (std::uint32_t i = 0; i < n; ++i) order[i] = {p[i], i};
  const auto before = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  std::size_t cut = n, sorted = 0;  // order[0, sorted) holds the top ranks in order
  for (std::size_t m = std::min<std::size_t>(n, 1024);; m = n) {
    if (m < n)
      std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(m), order.end(), before);
    else
      std::sort(order.begin() + static_cast<std::ptrdiff_t>(sorted), order.end(), before);
    sorted = m;
    double mass_before = 0;
    std::size_t rank = 0;
    for (; rank < m && !(rank > 0 && mass_before >= top_p); ++rank) mass_before += order[rank].first;
    if (rank < m || (rank > 0 && mass_before >= top_p) || m == n) {
      cut = rank;
      break;
    }
  }
  std::vector<char> keep(n);
  for (std::size_t r = 0; r < cut; ++r) keep[order[r].second] = true;
  kept.keep_if(keep);
}

// Drops tokens whose probability is below min_p times the largest one.
void keep_min_p(Kept& kept, double min_p) {
  if (min_p <= 0.0) return;
  const std::vector<double> p = softmax(kept);
  const double threshold = min_p * *std::max_element(p.begin(), p.end());
  std::vector<char> keep(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) keep[i] = !(p[i] < threshold);
  kept.keep_if(keep);
}

// The first of the largest, the excluded ids left out.
std::uint32_t argmax(std::span<const float> v, std::span<const std::uint32_t> excluded) {
  std::uint32_t best = 0;
  float best_value = -std::numeric_limits<float>::infinity();
  bool any = false;
  for_each_included(v.size(), excluded, [&](std::uint32_t i) {
    if (!any || v[i] > best_value) best = i, best_value = v[i], any = true;
  });
  if (!any) fail("every token is excluded: nothing to sample");
  return best;
}

}  // namespace

void validate(const SamplingParams& p) {
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) fail("temperature must be >= 0, got {}", p.temperature);
  if (p.top_k < 0) fail("top-k must be >= 0, got {}", p.top_k);
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) fail("top-p must be in (0, 1], got {}", p.top_p);
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) fail("min-p must be in [0, 1], got {}", p.min_p);
  if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty))
    fail("repetition penalty must be > 0, got {}", p.repetition_penalty);
  if (!std::isfinite(p.presence_penalty)) fail("presence penalty must be finite");
  if (!std::isfinite(p.frequency_penalty)) fail("frequency penalty must be finite");
}

SamplingParams sampling_defaults_for(const std::string& model_dir) {
  SamplingParams params;
  auto path = std::filesystem::path(model_dir) / "generation_config.json";
  if (!std::filesystem::is_regular_file(path)) return params;
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(std::ifstream(path));
    params.greedy = !config.value("do_sample", false);  // HF GenerationConfig's default
    params.temperature = config.value("temperature", params.temperature);
    // Read wide: nlohmann would truncate 2^32 + 1 into an int (1) and silently change the sampling.
    const std::int64_t top_k = config.value("top_k", std::int64_t{params.top_k});
    if (top_k < 0 || top_k > INT32_MAX) fail("{}: field 'top_k' must be in [0, {}], got {}", path.string(), INT32_MAX, top_k);
    params.top_k = static_cast<int>(top_k);
    params.top_p = config.value("top_p", params.top_p);
    params.min_p = config.value("min_p", params.min_p);
    params.repetition_penalty = config.value("repetition_penalty", params.repetition_penalty);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: {}", path.string(), e.what());
  }
  validate(params);
  return params;
}

Sampler::Sampler(const SamplingParams& params, std::size_t vocab_size)
    : params_(params), vocab_size_(vocab_size), seen_(vocab_size), generated_(vocab_size), rng_(params.seed) {
  validate(params);
}

void Sampler::observe_prompt(std::span<const std::uint32_t> tokens) {
  for (std::uint32_t t : tokens) {
    if (t >= vocab_size_) fail("token id {} is outside the vocabulary ({} ids)", t, vocab_size_);
    if (!seen_[t] && generated_[t] == 0) touched_.push_back(t);
    seen_[t] = true;
  }
}

void Sampler::observe_generated(std::uint32_t token) {
  observe_prompt(std::span(&token, 1));
  ++generated_[token];
}

bool Sampler::penalties_apply() const {
  return !touched_.empty() &&
         (params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f);
}

std::vector<float> Sampler::penalized(std::span<const float> logits) const {
  std::vector<float> out(logits.begin(), logits.end());
  const float rep = params_.repetition_penalty;
  for (std::uint32_t t : touched_) {
    float& l = out[t];
    if (seen_[t] && rep != 1.0f) l = l < 0 ? l * rep : l / rep;
    if (generated_[t] > 0) l -= params_.presence_penalty + params_.frequency_penalty * float(generated_[t]);
  }
  return out;
}

// The logits with the penalties: `logits` itself when none applies (no copy of the vocabulary).
std::span<const float> Sampler::scores(std::span<const float> logits, std::vector<float>& copy) const {
  if (logits.size() != vocab_size_) fail("got {} logits for a vocabulary of {}", logits.size(), vocab_size_);
  if (!penalties_apply()) return logits;
  copy = penalized(logits);
  return copy;
}

Sampler::Draw Sampler::filtered(std::span<const float> logits, std::span<const std::uint32_t> excluded) const {
  std::vector<float> copy;
  Kept kept = tempered(scores(logits, copy), excluded, params_.temperature);
  keep_top_k(kept, params_.top_k);
  keep_top_p(kept, params_.top_p);
  keep_min_p(kept, params_.min_p);
  std::vector<double> p = softmax(kept);
  return {std::move(kept.ids), std::move(p)};
}

std::uint32_t Sampler::greedy_pick(std::span<const float> logits, std::span<const std::uint32_t> excluded) const {
  std::vector<float> copy;
  return argmax(scores(logits, copy), excluded);
}

std::vector<double> Sampler::distribution(std::span<const float> logits, std::span<const std::uint32_t> excluded) const {
  std::vector<double> out(vocab_size_, 0.0);
  if (is_greedy()) {
    out[greedy_pick(logits, excluded)] = 1.0;
    return out;
  }
  const Draw d = filtered(logits, excluded);
  for (std::size_t i = 0; i < d.ids.size(); ++i) out[d.ids[i]] = d.p[i];
  return out;
}

double Sampler::uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

std::uint32_t Sampler::sample(std::span<const float> logits, std::span<const std::uint32_t> excluded) {
  if (is_greedy()) return greedy_pick(logits, excluded);
  const Draw d = filtered(logits, excluded);
  // The first token in index order whose cumulative mass passes u (tokens of probability 0 are
  // never picked).
  double u = uniform(), cumulative = 0;
  std::uint32_t last_possible = 0;
  for (std::size_t i = 0; i < d.ids.size(); ++i) {
    if (d.p[i] == 0.0) continue;
    cumulative += d.p[i];
    last_possible = d.ids[i];
    if (u < cumulative) return d.ids[i];
  }
  return last_possible;  // rounding left u above the total mass
}

}  // namespace plumb
