#include "plumb/model/rope_v4.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "plumb/util/error.h"

namespace plumb::v4 {

YarnRange yarn_range(int64_t dim, double theta, int64_t original_max_pos, double beta_fast, double beta_slow) {
  // The rotary dim at which a frequency completes `rotations` turns over the original context.
  auto correction_dim = [&](double rotations) {
    return static_cast<double>(dim) * std::log(static_cast<double>(original_max_pos) / (rotations * 2 * std::numbers::pi)) /
           (2 * std::log(theta));
  };
  double low = std::max(std::floor(correction_dim(beta_fast)), 0.0);
  double high = std::min(std::ceil(correction_dim(beta_slow)), static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // avoid a zero-width ramp
  return {low, high};
}

std::vector<float> rope_inv_freq(const ModelConfig& cfg, int64_t layer) {
  const int64_t dim = cfg.qk_rope_head_dim;
  if (dim <= 0 || dim % 2 != 0) fail("qk_rope_head_dim must be positive and even, got {}", dim);
  const bool compressed = cfg.compress_ratio(layer) != 0;
  const double theta = compressed ? cfg.compress_rope_theta : cfg.rope_theta;
  std::vector<float> f(static_cast<std::size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i)
    f[i] = static_cast<float>(1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(dim)));
  if (!compressed || !cfg.rope_scaling || cfg.rope_scaling->original_max_position_embeddings <= 0) return f;
  const RopeScaling& y = *cfg.rope_scaling;
  const YarnRange r = yarn_range(dim, theta, y.original_max_position_embeddings, y.beta_fast, y.beta_slow);
  const float factor = static_cast<float>(y.factor);
  for (int64_t i = 0; i < dim / 2; ++i) {
    // smooth = 1 - ramp: 1 keeps the base frequency (fast-rotating pairs), 0 interpolates by factor.
    const float ramp = std::clamp(static_cast<float>((static_cast<double>(i) - r.low) / (r.high - r.low)), 0.f, 1.f);
    const float smooth = 1.f - ramp;
    f[i] = f[i] / factor * (1.f - smooth) + f[i] * smooth;
  }
  return f;
}

}  // namespace plumb::v4
