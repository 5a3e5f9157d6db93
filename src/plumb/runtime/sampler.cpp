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

constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

// exp(x - max) normalized; -inf entries get 0.
std::vector<double> softmax(const std::vector<double>& logits) {
  double max = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double sum = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) sum += p[i] = std::exp(logits[i] - max);
  for (double& x : p) x /= sum;
  return p;
}

// Keeps the k largest logits; those equal to the k-th largest are kept too (as HF does).
void keep_top_k(std::vector<double>& logits, int k) {
  if (k <= 0 || static_cast<std::size_t>(k) >= logits.size()) return;
  std::vector<double> sorted = logits;
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<>());
  double kth = sorted[k - 1];
  for (double& x : logits)
    if (x < kth) x = kMinusInf;
}

// Keeps the most likely tokens while the mass before each is below top_p (at least one).
void keep_top_p(std::vector<double>& logits, double top_p) {
  if (top_p >= 1.0) return;
  std::vector<double> p = softmax(logits);
  std::vector<std::uint32_t> order(p.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) { return p[a] > p[b]; });
  double mass_before = 0;
  for (std::size_t rank = 0; rank < order.size(); ++rank) {
    if (rank > 0 && mass_before >= top_p) logits[order[rank]] = kMinusInf;
    mass_before += p[order[rank]];
  }
}

// Drops tokens whose probability is below min_p times the largest one.
void keep_min_p(std::vector<double>& logits, double min_p) {
  if (min_p <= 0.0) return;
  std::vector<double> p = softmax(logits);
  double threshold = min_p * *std::max_element(p.begin(), p.end());
  for (std::size_t i = 0; i < p.size(); ++i)
    if (p[i] < threshold) logits[i] = kMinusInf;
}

std::uint32_t argmax(std::span<const float> v) {
  return static_cast<std::uint32_t>(std::max_element(v.begin(), v.end()) - v.begin());  // first of ties
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

std::vector<float> Sampler::penalized(std::span<const float> logits) const {
  if (logits.size() != vocab_size_) fail("got {} logits for a vocabulary of {}", logits.size(), vocab_size_);
  std::vector<float> out(logits.begin(), logits.end());
  const float rep = params_.repetition_penalty;
  for (std::uint32_t t : touched_) {
    float& l = out[t];
    if (seen_[t] && rep != 1.0f) l = l < 0 ? l * rep : l / rep;
    if (generated_[t] > 0) l -= params_.presence_penalty + params_.frequency_penalty * float(generated_[t]);
  }
  return out;
}

std::vector<double> Sampler::distribution(std::span<const float> logits) const {
  std::vector<float> scores = penalized(logits);
  if (is_greedy()) {
    std::vector<double> one_hot(vocab_size_, 0.0);
    one_hot[argmax(scores)] = 1.0;
    return one_hot;
  }
  std::vector<double> tempered(scores.begin(), scores.end());
  for (double& x : tempered) x /= params_.temperature;
  keep_top_k(tempered, params_.top_k);
  keep_top_p(tempered, params_.top_p);
  keep_min_p(tempered, params_.min_p);
  return softmax(tempered);
}

double Sampler::uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

std::uint32_t Sampler::sample(std::span<const float> logits) {
  if (is_greedy()) return argmax(penalized(logits));
  std::vector<double> p = distribution(logits);
  double u = uniform(), cumulative = 0;
  std::uint32_t last_possible = 0;
  for (std::uint32_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0.0) continue;
    cumulative += p[i];
    last_possible = i;
    if (u < cumulative) return i;
  }
  return last_possible;  // rounding left u above the total mass
}

}  // namespace plumb
