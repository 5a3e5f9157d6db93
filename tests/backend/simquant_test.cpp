// The faithful profile's quantization round trips against hand-computed cases (MODEL-SPEC 2.2, 9).
#include "plumb/backend/cpu/simquant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace plumb::cpu {
namespace {

TEST(SimQuant, Bf16RoundsToNearestEven) {
  EXPECT_EQ(round_bf16(1.0f + std::ldexp(1.f, -8)), 1.0f);  // halfway, 1.0 is even
  EXPECT_EQ(round_bf16(1.0f + 3 * std::ldexp(1.f, -8)), 1.0f + std::ldexp(1.f, -6));  // halfway, up to even
  EXPECT_EQ(round_bf16(1.0f + std::ldexp(1.f, -8) + std::ldexp(1.f, -20)), 1.0f + std::ldexp(1.f, -7));
  EXPECT_EQ(round_bf16(-2.75f), -2.75f);  // representable
  EXPECT_TRUE(std::isnan(round_bf16(std::numeric_limits<float>::quiet_NaN())));
}

TEST(SimQuant, Fp8BlockScaleIsThePowerOfTwoAboveAmaxOver448) {
  // amax 448 -> scale 1: values round on the e4m3 grid itself; 0.3 lies between 0.28125 and
  // 0.3125 (step 2^-5 in [0.25, 0.5)) and goes to the nearer 0.3125.
  std::vector<float> x = {448.f, 1.f, -0.3f};
  fp8_roundtrip(x.data(), 3, 3);
  EXPECT_EQ(x, (std::vector<float>{448.f, 1.f, -0.3125f}));
  // amax 1000 -> 1000/448 = 2.23 -> scale 4: 1000/4 = 250 -> 256 (grid step 32 above 256, 16
  // below), 3/4 = 0.75 exact.
  x = {1000.f, 3.f};
  fp8_roundtrip(x.data(), 2, 2);
  EXPECT_EQ(x, (std::vector<float>{1024.f, 3.f}));
}

TEST(SimQuant, Fp8TrailingPartialBlockHasItsOwnScale) {
  // Blocks of 4 over 5 values: 1e-5 alone gets scale 2^-22 (its amax is floored at 1e-4, and
  // 1e-4 / 448 = 2^-22.1) and rounds 41.94 -> 40 (step 4 in [32, 64)); sharing the scale 2^-8
  // of the ones it would be an e4m3 subnormal (2.56e-3 / 2^-9 = 1.31 -> 1).
  std::vector<float> x = {1.f, 1.f, 1.f, 1.f, 1e-5f};
  fp8_roundtrip(x.data(), 5, 4);
  EXPECT_EQ(x[4], std::ldexp(40.f, -22));
  x = {1.f, 1.f, 1.f, 1.f, 1e-5f};
  fp8_roundtrip(x.data(), 5, 8);
  EXPECT_EQ(x[4], std::ldexp(1.f, -17));
}

TEST(SimQuant, Fp8AmaxFloor) {
  // amax is clamped below at 1e-4: scale 2^ceil(log2(1e-4/448)) = 2^-22, so 1e-9 * 2^22 =
  // 0.0042 is an e4m3 subnormal: 2.15 steps of 2^-9 -> 2. (Without the floor the scale would be
  // 2^-38 and 1e-9 would keep 3 mantissa bits: 274.9 -> 288.)
  std::vector<float> x = {1e-9f, 0.f};
  fp8_roundtrip(x.data(), 2, 2);
  EXPECT_EQ(x[0], std::ldexp(1.f, -30));
  EXPECT_EQ(x[1], 0.f);
}

TEST(SimQuant, Fp4GridTiesAndScale) {
  // amax 6 -> scale 1. e2m1 grid 0, 0.5, 1, 1.5, 2, 3, 4, 6; ties go to the even code.
  std::vector<float> x = {6.f, 1.4f, -2.6f, 0.2f, 0.25f, 1.25f, 2.5f, 5.f};
  fp4_roundtrip(x.data(), 8, 32);
  EXPECT_EQ(x, (std::vector<float>{6.f, 1.5f, -3.f, 0.f, 0.f, 1.f, 2.f, 4.f}));
  // amax 7 -> 7/6 -> scale 2: 7/2 = 3.5 ties between 3 (code 5) and 4 (code 6) -> 4 -> 8.
  x = {7.f, 1.f};
  fp4_roundtrip(x.data(), 2, 32);
  EXPECT_EQ(x, (std::vector<float>{8.f, 1.f}));
}

TEST(SimQuant, Fp4TrailingPartialBlock) {
  // 33 values in blocks of 32: the last one (0.7) is alone: scale 2^ceil(log2(0.7/6)) = 2^-3,
  // 0.7 * 8 = 5.6 -> 6 -> 0.75. With the 6s of the first block it would be 0.5.
  std::vector<float> x(33, 6.f);
  x[32] = 0.7f;
  fp4_roundtrip(x.data(), 33, 32);
  EXPECT_EQ(x[32], 0.75f);
  EXPECT_EQ(x[0], 6.f);
}

TEST(SimQuant, HadamardSylvesterOrder) {
  // H4 rows: [1 1 1 1], [1 -1 1 -1], [1 1 -1 -1], [1 -1 -1 1]; scale 1/2.
  std::vector<float> x = {1.f, 2.f, 3.f, 4.f};
  hadamard(x.data(), 4);
  EXPECT_EQ(x, (std::vector<float>{5.f, -1.f, -2.f, 0.f}));
  hadamard(x.data(), 4);  // orthonormal and symmetric: its own inverse
  EXPECT_EQ(x, (std::vector<float>{1.f, 2.f, 3.f, 4.f}));
  EXPECT_THROW(hadamard(x.data(), 3), std::exception);
}

}  // namespace
}  // namespace plumb::cpu
