#pragma once
// Random data and in-memory weights in every checkpoint format, for the op tests and for
// plumb_bench --ops (so no gtest here).
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "plumb/format/codecs.h"
#include "plumb/format/quantize.h"
#include "plumb/format/weight_view.h"

namespace plumb::test {

inline std::vector<float> randn(std::mt19937_64& rng, int64_t n, float stddev = 1.f, float mean = 0.f) {
  std::normal_distribution<float> d(mean, stddev);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

// A weight with its own storage; view() points into it.
struct OwnedWeight {
  std::string name = "w";
  WeightFormat format = WeightFormat::Dense;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data, scale;
  std::vector<int64_t> scale_shape;

  WeightView view() const {
    WeightView w;
    w.name = name;
    w.format = format;
    w.dtype = dtype;
    w.shape = shape;
    w.data = reinterpret_cast<const std::byte*>(data.data());
    w.scale = scale.empty() ? nullptr : reinterpret_cast<const std::byte*>(scale.data());
    w.scale_dtype = DType::F8_E8M0;
    w.scale_shape = scale_shape;
    return w;
  }
};

inline OwnedWeight f32_weight(std::vector<int64_t> shape, const std::vector<float>& v) {
  OwnedWeight w;
  w.shape = std::move(shape);
  w.data.resize(v.size() * 4);
  std::memcpy(w.data.data(), v.data(), w.data.size());
  return w;
}

inline OwnedWeight bf16_weight(std::vector<int64_t> shape, const std::vector<float>& v) {
  OwnedWeight w;
  w.dtype = DType::BF16;
  w.shape = std::move(shape);
  w.data.resize(v.size() * 2);
  for (std::size_t i = 0; i < v.size(); ++i) {
    const uint16_t b = f32_to_bf16(v[i]);
    std::memcpy(w.data.data() + 2 * i, &b, 2);
  }
  return w;
}

inline OwnedWeight fp8_weight(int64_t rows, int64_t cols, const std::vector<float>& v) {
  const QuantizedWeight q = quantize_fp8_block128(v.data(), rows, cols);
  OwnedWeight w;
  w.format = WeightFormat::FP8Block128;
  w.dtype = DType::F8_E4M3;
  w.shape = {rows, cols};
  w.data = q.data;
  w.scale = q.scales;
  w.scale_shape = {(rows + 127) / 128, (cols + 127) / 128};
  return w;
}

// One norm weight of d = v.size() values, 1 + v, in the forms rms_norm's kernels tell apart:
// bf16 and f32 words (read into registers) and FP8 (the element loop over memory).
struct NormWeights {
  explicit NormWeights(std::vector<float> v) {
    for (float& x : v) x += 1.f;
    const int64_t d = static_cast<int64_t>(v.size());
    bf16 = bf16_weight({d}, v), f32 = f32_weight({d}, v), fp8 = fp8_weight(1, d, v);
  }
  OwnedWeight bf16, f32, fp8;
};

inline OwnedWeight fp4_weight(int64_t rows, int64_t cols, const std::vector<float>& v) {
  const QuantizedWeight q = quantize_fp4_block32(v.data(), rows, cols);
  OwnedWeight w;
  w.format = WeightFormat::FP4Block32;
  w.dtype = DType::I8;
  w.shape = {rows, cols};
  w.data = q.data;
  w.scale = q.scales;
  w.scale_shape = {rows, (cols + 31) / 32};
  return w;
}

// FP8 block-128 weight with F32 scales (V3 checkpoints): the e4m3 data of fp8_weight with each
// ue8m0 scale turned into an f32 scale times a non-power-of-two factor.
inline OwnedWeight fp8_weight_f32_scales(int64_t rows, int64_t cols, const std::vector<float>& v,
                                         std::mt19937_64& rng) {
  OwnedWeight w = fp8_weight(rows, cols, v);
  std::uniform_real_distribution<float> f(0.6f, 1.4f);
  std::vector<uint8_t> sc(w.scale.size() * 4);
  for (std::size_t i = 0; i < w.scale.size(); ++i) {
    const float s = ue8m0_to_f32(w.scale[i]) * f(rng);
    std::memcpy(sc.data() + 4 * i, &s, 4);
  }
  w.scale = std::move(sc);
  return w;
}
inline WeightView f32_scaled_view(const OwnedWeight& w) {
  WeightView v = w.view();
  v.scale_dtype = DType::F32;
  return v;
}

}  // namespace plumb::test
