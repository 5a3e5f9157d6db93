#pragma once
// Helpers for the op tests: random data and weights (op_weights.h), host copies and relative
// comparisons.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "op_weights.h"
#include "plumb/backend/backend.h"
#include "plumb/format/codecs.h"
#include "plumb/format/quantize.h"
#include "plumb/format/weight_view.h"

namespace plumb::test {

// The CPU op tests' fixture: a CPU backend of two threads and a generator with a fixed seed.
template <uint64_t Seed>
class CpuOpTest : public ::testing::Test {
 protected:
  std::unique_ptr<backend::Backend> be = backend::make_cpu_backend(2);
  std::mt19937_64 rng{Seed};
  backend::Tensor upload(const std::vector<float>& v, backend::Shape s) { return be->from_host(v.data(), std::move(s)); }
};

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
