// The GPU kernels' scalar numerics (backend/gpu/gpu_numerics.h, compiled here as plain C++) against
// plumb's codecs and the CPU backend's round trips, bit for bit. Needs no GPU: the same header is
// what the kernels decode weights and quantize activations with, so this pins the GPU numerics to
// the CPU reference in CI.
#include "plumb/backend/gpu/gpu_numerics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "plumb/backend/cpu/simquant.h"
#include "plumb/format/codecs.h"
#include "plumb/format/quantize.h"

namespace plumb {
namespace {

uint32_t bits(float x) { return std::bit_cast<uint32_t>(x); }

// Edge values every conversion is checked on: zeros, subnormals, NaN, Inf, the formats' maxima
// and the rounding ties around them.
std::vector<float> edge_values() {
  std::vector<float> v = {0.f,
                          -0.f,
                          1.f,
                          -1.f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          -std::numeric_limits<float>::quiet_NaN(),
                          std::bit_cast<float>(0x7F800001u),  // signalling NaN
                          std::numeric_limits<float>::max(),
                          -std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::min(),
                          std::numeric_limits<float>::denorm_min(),
                          -std::numeric_limits<float>::denorm_min(),
                          std::bit_cast<float>(0x007FFFFFu),
                          448.f,
                          -448.f,
                          464.f,  // e4m3 tie above the max
                          480.f,
                          6.f,
                          -6.f,
                          5.f,  // e2m1 tie between 4 and 6
                          7.f,
                          0.25f,  // e2m1 tie between 0 and 0.5
                          0.75f,
                          1.25f,
                          2.5f,
                          3.5f,
                          1e-4f,
                          std::ldexp(1.f, -9),   // smallest e4m3 subnormal
                          std::ldexp(1.f, -10),  // tie to 0
                          std::ldexp(3.f, -10),  // tie to 2^-8
                          std::ldexp(1.f, -6),   // smallest e4m3 normal
                          std::ldexp(15.f, -10),
                          1.f + std::ldexp(1.f, -8),  // bf16 ties
                          1.f + 3 * std::ldexp(1.f, -8),
                          std::bit_cast<float>(0x7F7F8000u),  // rounds to bf16 Inf
                          std::bit_cast<float>(0x3F808000u)};
  // Every e4m3 and e2m1 value, the midpoints between neighbours and values one f32 ulp around them.
  std::vector<float> grid;
  for (int b = 0; b < 0x7F; ++b) grid.push_back(e4m3_to_f32(static_cast<uint8_t>(b)));
  for (std::size_t i = 0; i + 1 < grid.size(); ++i) {
    const float m = 0.5f * (grid[i] + grid[i + 1]);
    for (float x : {grid[i], m, std::nextafter(m, 0.f), std::nextafter(m, 1e9f)}) {
      v.push_back(x);
      v.push_back(-x);
    }
  }
  for (int b = 0; b < 8; ++b) {
    const float x = e2m1_to_f32(static_cast<uint8_t>(b)), y = e2m1_to_f32(static_cast<uint8_t>(b + 1));
    const float m = 0.5f * (x + y);
    for (float z : {x, m, std::nextafter(m, 0.f), std::nextafter(m, 1e9f)}) {
      v.push_back(z);
      v.push_back(-z);
    }
  }
  return v;
}

// Random f32 values over the whole exponent range (random bit patterns) and over the range the
// quantizers care about (scaled normals).
std::vector<float> random_values(std::size_t n) {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<uint32_t> u32;
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_int_distribution<int> exp(-30, 12);
  std::vector<float> v;
  for (std::size_t i = 0; i < n; ++i) {
    v.push_back(std::bit_cast<float>(u32(rng)));
    v.push_back(std::ldexp(normal(rng), exp(rng)));
  }
  return v;
}

std::vector<float> all_values() {
  std::vector<float> v = edge_values();
  for (float x : random_values(200000)) v.push_back(x);
  return v;
}

TEST(GpuNumerics, DecodersMatchCodecsOnAllCodes) {
  for (int b = 0; b < 256; ++b) {
    const auto c = static_cast<uint8_t>(b);
    EXPECT_EQ(bits(gpu::e4m3_to_f32(c)), bits(e4m3_to_f32(c))) << "e4m3 code " << b;
    EXPECT_EQ(bits(gpu::ue8m0_to_f32(c)), bits(ue8m0_to_f32(c))) << "ue8m0 code " << b;
  }
  for (int b = 0; b < 16; ++b)
    EXPECT_EQ(bits(gpu::e2m1_to_f32(static_cast<uint8_t>(b))), bits(e2m1_to_f32(static_cast<uint8_t>(b))))
        << "e2m1 code " << b;
  for (uint32_t b = 0; b < 65536; ++b)
    ASSERT_EQ(bits(gpu::bf16_to_f32(static_cast<uint16_t>(b))), bits(bf16_to_f32(static_cast<uint16_t>(b))))
        << "bf16 code " << b;
}

TEST(GpuNumerics, EncodersMatchCodecs) {
  for (float x : all_values()) {
    ASSERT_EQ(gpu::f32_to_e4m3(x), f32_to_e4m3(x)) << "f32_to_e4m3(" << x << ") bits " << std::hex << bits(x);
    ASSERT_EQ(gpu::f32_to_e2m1(x), f32_to_e2m1(x)) << "f32_to_e2m1(" << x << ") bits " << std::hex << bits(x);
    // Bit-exact with the CPU backend's rounding, which keeps a NaN's low payload bits (quieted);
    // f32_to_bf16 returns the canonical bf16 NaN, so against it only NaN-ness is compared.
    ASSERT_EQ(bits(gpu::round_bf16(x)), bits(cpu::round_bf16(x))) << "vs cpu::round_bf16, bits " << std::hex << bits(x);
    if (std::isnan(x)) {
      ASSERT_TRUE(std::isnan(gpu::round_bf16(x)));
    } else {
      const uint32_t want = static_cast<uint32_t>(f32_to_bf16(x)) << 16;
      ASSERT_EQ(bits(gpu::round_bf16(x)), want) << "round_bf16(" << x << ") bits " << std::hex << bits(x);
    }
  }
}

TEST(GpuNumerics, ScaleChoiceMatchesQuantize) {
  std::vector<float> amax;
  for (float x : all_values())
    if (!std::isnan(x)) amax.push_back(std::fabs(x));
  for (float a : amax) {
    ASSERT_EQ(gpu::ue8m0_scale_for(a, gpu::kFp8Max, gpu::kFp8MinAmax), ue8m0_scale_for(a, 448.f, 1e-4f))
        << "fp8 amax " << a;
    ASSERT_EQ(gpu::ue8m0_scale_for(a, gpu::kFp4Max, gpu::fp4_min_amax()),
              ue8m0_scale_for(a, 6.f, 6.f * std::ldexp(1.f, -126)))
        << "fp4 amax " << a;
  }
}

// The kernels' per-element round trip (block amax -> ue8m0 scale -> fp8/fp4_roundtrip) against
// cpu::fp8_roundtrip / fp4_roundtrip on whole arrays, with blocks of several sizes and a partial
// trailing block.
template <typename GpuElem, typename CpuArray>
void check_roundtrip(float qmax, float min_amax, GpuElem gpu_elem, CpuArray cpu_array, const char* what) {
  std::mt19937 rng(99);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_int_distribution<int> exp(-40, 20);
  const std::vector<float> edges = edge_values();
  for (int64_t block : {1, 3, 32, 128}) {
    for (int trial = 0; trial < 60; ++trial) {
      const int64_t n = block * 5 + (trial % 3 == 0 ? block / 2 : 0);
      std::vector<float> x(static_cast<std::size_t>(n));
      const int e = exp(rng);
      for (auto& v : x) v = std::ldexp(normal(rng), e + (trial % 4 == 1 ? exp(rng) / 4 : 0));
      if (trial % 5 == 2)  // sprinkle edge values (Inf, max, subnormals, zeros, ties)
        for (std::size_t i = 0; i < x.size(); i += 3) x[i] = edges[(i * 7 + trial) % edges.size()];
      if (trial % 7 == 3)
        for (auto& v : x) v = 0.f;
      std::vector<float> want = x;
      cpu_array(want.data(), n, block);
      for (int64_t b0 = 0; b0 < n; b0 += block) {
        const int64_t b1 = std::min(n, b0 + block);
        float amax = 0.f;  // std::max(amax, |x|) as the CPU does: NaN never wins
        for (int64_t i = b0; i < b1; ++i) amax = std::max(amax, std::fabs(x[i]));
        const float s = gpu::ue8m0_to_f32(gpu::ue8m0_scale_for(amax, qmax, min_amax));
        for (int64_t i = b0; i < b1; ++i) {
          const float got = gpu_elem(x[i], s);
          ASSERT_EQ(bits(got), bits(want[i])) << what << " block " << block << " trial " << trial << " i " << i
                                              << " x " << x[i] << " got " << got << " want " << want[i];
        }
      }
    }
  }
}

TEST(GpuNumerics, Fp8RoundTripMatchesCpu) {
  check_roundtrip(gpu::kFp8Max, gpu::kFp8MinAmax, [](float x, float s) { return gpu::fp8_roundtrip(x, s); },
                  [](float* x, int64_t n, int64_t b) { cpu::fp8_roundtrip(x, n, b); }, "fp8");
}

// fp8_roundtrip_inv (the fused act-quant's element round trip: x times the exact inverse scale,
// the e4m3 rounding on the f32 bits) is bitwise fp8_roundtrip for every ue8m0 scale: the edge
// values and random patterns at each scale, every e4m3 grid value / midpoint / neighbour carried
// to each scale, and a stride through all 2^32 patterns. (All 2^32 patterns at the scales of codes
// 0, 105, 127, 140 and 254 were checked once off line, with no difference.)
TEST(GpuNumerics, Fp8RoundTripInvMatchesFp8RoundTrip) {
  const std::vector<float> edges = edge_values(), rand = random_values(5000);
  for (int code = 0; code < 255; ++code) {
    const auto c = static_cast<uint8_t>(code);
    const float s = gpu::ue8m0_to_f32(c), inv = gpu::ue8m0_inverse(c);
    ASSERT_EQ(bits(1.0f / s), bits(inv)) << "ue8m0_inverse(" << code << ")";
    int64_t bad = 0;
    uint32_t first = 0;
    auto same = [&](float x) {
      if (bits(gpu::fp8_roundtrip_inv(x, s, inv)) != bits(gpu::fp8_roundtrip(x, s)) && bad++ == 0) first = bits(x);
    };
    for (float x : edges) {
      same(x);
      same(x * s);  // the edge value as x / s
    }
    for (float x : rand) same(x);
    for (uint64_t u = static_cast<uint64_t>(code) * 977; u <= 0xFFFFFFFFull; u += 65521)
      same(std::bit_cast<float>(static_cast<uint32_t>(u)));
    ASSERT_EQ(bad, 0) << "scale code " << code << ": first difference at x bits " << std::hex << first;
  }
}

TEST(GpuNumerics, Fp4RoundTripMatchesCpu) {
  check_roundtrip(gpu::kFp4Max, gpu::fp4_min_amax(), [](float x, float s) { return gpu::fp4_roundtrip(x, s); },
                  [](float* x, int64_t n, int64_t b) { cpu::fp4_roundtrip(x, n, b); }, "fp4");
}

}  // namespace
}  // namespace plumb
