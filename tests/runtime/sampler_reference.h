#pragma once
// The sampler's filters in their whole-vocabulary form (as plumb had them before 2026-12-03): the
// test oracle for Sampler's candidate-list form, which must give the same distribution bit for
// bit and so the same draws. Written for clarity, not speed: every filter is a pass over the
// vocabulary, top-p a stable sort of it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <span>
#include <vector>

#include "plumb/runtime/sampler.h"

namespace plumb::reference_sampler {

constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

inline std::vector<double> softmax(const std::vector<double>& logits) {
  const double max = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double sum = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) sum += p[i] = std::exp(logits[i] - max);
  for (double& x : p) x /= sum;
  return p;
}

inline void keep_top_k(std::vector<double>& logits, int k) {
  if (k <= 0 || static_cast<std::size_t>(k) >= logits.size()) return;
  std::vector<double> sorted = logits;
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<>());
  const double kth = sorted[k - 1];
  for (double& x : logits)
    if (x < kth) x = kMinusInf;
}

inline void keep_top_p(std::vector<double>& logits, double top_p) {
  if (top_p >= 1.0) return;
  const std::vector<double> p = softmax(logits);
  std::vector<std::uint32_t> order(p.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) { return p[a] > p[b]; });
  double mass_before = 0;
  for (std::size_t rank = 0; rank < order.size(); ++rank) {
    if (rank > 0 && mass_before >= top_p) logits[order[rank]] = kMinusInf;
    mass_before += p[order[rank]];
  }
}

inline void keep_min_p(std::vector<double>& logits, double min_p) {
  if (min_p <= 0.0) return;
  const std::vector<double> p = softmax(logits);
  const double threshold = min_p * *std::max_element(p.begin(), p.end());
  for (std::size_t i = 0; i < p.size(); ++i)
    if (p[i] < threshold) logits[i] = kMinusInf;
}

// The distribution a non-greedy draw uses, for logits with the penalties already applied.
inline std::vector<double> distribution(std::span<const float> scores, const SamplingParams& params) {
  std::vector<double> tempered(scores.begin(), scores.end());
  for (double& x : tempered) x /= params.temperature;
  keep_top_k(tempered, params.top_k);
  keep_top_p(tempered, params.top_p);
  keep_min_p(tempered, params.min_p);
  return softmax(tempered);
}

// The draw for a uniform u in [0, 1): the first index whose cumulative mass passes u.
inline std::uint32_t draw(const std::vector<double>& p, double u) {
  double cumulative = 0;
  std::uint32_t last_possible = 0;
  for (std::uint32_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0.0) continue;
    cumulative += p[i];
    last_possible = i;
    if (u < cumulative) return i;
  }
  return last_possible;
}

}  // namespace plumb::reference_sampler
