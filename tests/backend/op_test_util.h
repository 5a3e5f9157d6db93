#pragma once
// Helpers for the op tests: random data (never zeros), in-memory weights in every checkpoint
// format, and relative comparisons.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "plumb/backend/backend.h"
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

inline std::vector<float> host(backend::Backend& be, const backend::Tensor& t) {
  std::vector<float> v(static_cast<std::size_t>(t.numel()));
  be.to_host(t, v.data());
  return v;
}

inline std::vector<int32_t> host_i32(backend::Backend& be, const backend::Tensor& t) {
  std::vector<int32_t> v(static_cast<std::size_t>(t.numel()));
  be.to_host(t, v.data());
  return v;
}

// max |a - b| / max |b|
inline double rel_diff(const std::vector<float>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0, den = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    num = std::max(num, std::fabs(a[i] - b[i]));
    den = std::max(den, std::fabs(b[i]));
  }
  return den > 0 ? num / den : num;
}

// The FP8 1x128 activation round trip, written independently of the code under test: scale
// 2^ceil(log2(max(amax, 1e-4) / 448)) per block, e4m3 round to nearest even.
inline void naive_act_quant(std::vector<float>& x, int64_t rows, int64_t K, int64_t block = 128) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < K; b += block) {
      const int64_t e = std::min(K, b + block);
      double amax = 0;
      for (int64_t k = b; k < e; ++k) amax = std::max(amax, std::fabs(static_cast<double>(x[r * K + k])));
      const double s = std::exp2(std::ceil(std::log2(std::max(amax, 1e-4) / 448.0)));
      for (int64_t k = b; k < e; ++k)
        x[r * K + k] = static_cast<float>(e4m3_to_f32(f32_to_e4m3(static_cast<float>(x[r * K + k] / s))) * s);
    }
}

inline float bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

}  // namespace plumb::test
