// Every expected value here comes from the format definitions (sign, exponent field, mantissa
// field, bias, subnormal rule) evaluated in double, or from an independent oracle (the compiler's
// _Float16 conversion; a double-based RNE for bf16), never from the code under test.
#include "plumb/format/codecs.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "plumb/util/error.h"

namespace plumb {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Equal as values, NaN equal to NaN, and +0 distinct from -0.
bool same(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

// A binary interchange-style format: 1 sign bit, `ebits` exponent bits, `mbits` mantissa bits.
struct Format {
  const char* name;
  int ebits, mbits, bias;
  int max_finite;  // largest finite non-negative code
  float (*decode)(uint8_t);
  uint8_t (*encode)(float);

  int sign_mask() const { return 1 << (ebits + mbits); }
  // The definition: exponent field 0 is subnormal (m / 2^M * 2^(1-bias)), otherwise
  // (1 + m / 2^M) * 2^(e-bias). Specials are the caller's business.
  double formula(int code) const {
    const int e = (code >> mbits) & ((1 << ebits) - 1);
    const int m = code & ((1 << mbits) - 1);
    const double frac = static_cast<double>(m) / (1 << mbits);
    const double mag = e == 0 ? std::ldexp(frac, 1 - bias) : std::ldexp(1.0 + frac, e - bias);
    return (code & sign_mask()) ? -mag : mag;
  }
};

const Format kE4m3{"e4m3", 4, 3, 7, 0x7E, e4m3_to_f32, f32_to_e4m3};
const Format kE5m2{"e5m2", 5, 2, 15, 0x7B, e5m2_to_f32, f32_to_e5m2};
const Format kE2m1{"e2m1", 2, 1, 1, 0x7, e2m1_to_f32, f32_to_e2m1};

// ---- decoders: every code against the formula

TEST(CodecE4m3, DecodesEveryCodeByFormula) {
  for (int c = 0; c < 256; ++c) {
    const float got = e4m3_to_f32(static_cast<uint8_t>(c));
    if ((c & 0x7F) == 0x7F) {  // e4m3fn: S.1111.111 is the only NaN, no Inf
      EXPECT_TRUE(std::isnan(got)) << c;
    } else {
      EXPECT_TRUE(same(got, static_cast<float>(kE4m3.formula(c)))) << c << " got " << got;
    }
  }
  EXPECT_EQ(e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::signbit(e4m3_to_f32(0x80)));
}

TEST(CodecE5m2, DecodesEveryCodeByFormula) {
  for (int c = 0; c < 256; ++c) {
    const float got = e5m2_to_f32(static_cast<uint8_t>(c));
    const int e = (c >> 2) & 0x1F, m = c & 3;
    if (e == 31 && m == 0) {
      EXPECT_EQ(got, (c & 0x80) ? -kInf : kInf) << c;
    } else if (e == 31) {
      EXPECT_TRUE(std::isnan(got)) << c;
    } else {
      EXPECT_TRUE(same(got, static_cast<float>(kE5m2.formula(c)))) << c << " got " << got;
    }
  }
  EXPECT_EQ(e5m2_to_f32(0x7B), 57344.0f);
  EXPECT_EQ(e5m2_to_f32(0x01), std::ldexp(1.0f, -16));
}

TEST(CodecUe8m0, DecodesEveryCodeByFormula) {
  for (int c = 0; c < 255; ++c) {
    const float got = ue8m0_to_f32(static_cast<uint8_t>(c));
    EXPECT_EQ(static_cast<double>(got), std::ldexp(1.0, c - 127)) << c;
  }
  EXPECT_TRUE(std::isnan(ue8m0_to_f32(0xFF)));
  // b = 0 is 2^-127, an f32 subnormal: it must not be flushed or rounded to 2^-126.
  EXPECT_EQ(std::fpclassify(ue8m0_to_f32(0)), FP_SUBNORMAL);
  EXPECT_EQ(std::bit_cast<uint32_t>(ue8m0_to_f32(0)), 0x00400000u);
  EXPECT_EQ(ue8m0_to_f32(127), 1.0f);
  EXPECT_EQ(ue8m0_to_f32(254), std::ldexp(1.0f, 127));
}

TEST(CodecE2m1, DecodesEveryNibbleByFormula) {
  for (int c = 0; c < 16; ++c)
    EXPECT_TRUE(same(e2m1_to_f32(static_cast<uint8_t>(c)), static_cast<float>(kE2m1.formula(c)))) << c;
  const float grid[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};  // the table in MODEL-SPEC 4.4
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(e2m1_to_f32(static_cast<uint8_t>(c)), grid[c]);
    EXPECT_EQ(e2m1_to_f32(static_cast<uint8_t>(c | 8)), -grid[c]);
  }
  EXPECT_TRUE(std::signbit(e2m1_to_f32(8)));
  EXPECT_EQ(e2m1_to_f32(0xF3), 1.5f);  // only the low nibble counts
}

// ---- narrow encoders: round trip, RNE ties, neighbours of ties, saturation / overflow

void check_round_trip(const Format& f) {
  for (int mag = 0; mag <= f.max_finite; ++mag) {
    for (int code : {mag, mag | f.sign_mask()}) {
      // formula() gives -0.0 for the negative zero code, so signed zeros are covered too.
      EXPECT_EQ(f.encode(static_cast<float>(f.formula(code))), code) << f.name << " code " << code;
    }
  }
}

// Between each pair of adjacent non-negative codes (c, c+1) the exact midpoint must go to the code
// with the even mantissa (the even code), and the floats just either side to the nearer code.
void check_ties(const Format& f) {
  for (int c = 0; c < f.max_finite; ++c) {
    const double lo = f.formula(c), hi = f.formula(c + 1);
    const float mid = static_cast<float>((lo + hi) / 2);
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2) << "midpoint must be exact in f32";
    const int even = (c % 2 == 0) ? c : c + 1;
    EXPECT_EQ(f.encode(mid), even) << f.name << " tie " << mid;
    EXPECT_EQ(f.encode(-mid), even | f.sign_mask()) << f.name << " tie " << -mid;
    EXPECT_EQ(f.encode(std::nextafter(mid, kInf)), c + 1) << f.name << " above " << mid;
    EXPECT_EQ(f.encode(std::nextafter(mid, 0.0f)), c) << f.name << " below " << mid;
    EXPECT_EQ(f.encode(-std::nextafter(mid, kInf)), (c + 1) | f.sign_mask()) << f.name;
  }
  // Tiny magnitudes round to a zero of the right sign.
  const float tiny = static_cast<float>(f.formula(1) / 4);
  EXPECT_EQ(f.encode(tiny), 0);
  EXPECT_EQ(f.encode(-tiny), f.sign_mask());
  EXPECT_EQ(f.encode(std::numeric_limits<float>::denorm_min()), 0);
}

TEST(CodecE4m3, EncoderRoundTripsEveryFiniteCode) { check_round_trip(kE4m3); }
TEST(CodecE4m3, EncoderRoundsToNearestEven) { check_ties(kE4m3); }
TEST(CodecE4m3, EncoderSaturatesAndMapsNaN) {
  // 464 is the midpoint between 448 (mantissa 110, even) and the non-existent 480.
  EXPECT_EQ(f32_to_e4m3(464.0f), 0x7E);
  EXPECT_EQ(f32_to_e4m3(std::nextafter(464.0f, kInf)), 0x7E);
  EXPECT_EQ(f32_to_e4m3(1e30f), 0x7E);
  EXPECT_EQ(f32_to_e4m3(-1e30f), 0xFE);
  EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::max()), 0x7E);
  EXPECT_EQ(f32_to_e4m3(kInf), 0x7E);
  EXPECT_EQ(f32_to_e4m3(-kInf), 0xFE);
  EXPECT_EQ(f32_to_e4m3(kNaN), 0x7F);
  EXPECT_EQ(f32_to_e4m3(-kNaN), 0x7F);
}

TEST(CodecE5m2, EncoderRoundTripsEveryFiniteCode) { check_round_trip(kE5m2); }
TEST(CodecE5m2, EncoderRoundsToNearestEven) { check_ties(kE5m2); }
TEST(CodecE5m2, EncoderOverflowsToInf) {
  // 61440 = midpoint of 57344 (mantissa 11) and 65536 (the Inf code's place, mantissa 00): even
  // wins, so it overflows, as IEEE rounding does.
  EXPECT_EQ(f32_to_e5m2(std::nextafter(61440.0f, 0.0f)), 0x7B);
  EXPECT_EQ(f32_to_e5m2(61440.0f), 0x7C);
  EXPECT_EQ(f32_to_e5m2(1e30f), 0x7C);
  EXPECT_EQ(f32_to_e5m2(-1e30f), 0xFC);
  EXPECT_EQ(f32_to_e5m2(kInf), 0x7C);
  EXPECT_EQ(f32_to_e5m2(-kInf), 0xFC);
  EXPECT_TRUE(std::isnan(e5m2_to_f32(f32_to_e5m2(kNaN))));
  EXPECT_TRUE(std::isnan(e5m2_to_f32(f32_to_e5m2(-kNaN))));
}

TEST(CodecE2m1, EncoderRoundTripsEveryCode) { check_round_trip(kE2m1); }
TEST(CodecE2m1, EncoderRoundsToNearestEven) { check_ties(kE2m1); }
TEST(CodecE2m1, EncoderSaturatesAtSix) {
  EXPECT_EQ(f32_to_e2m1(7.0f), 0x7);
  EXPECT_EQ(f32_to_e2m1(1000.0f), 0x7);
  EXPECT_EQ(f32_to_e2m1(-1000.0f), 0xF);
  EXPECT_EQ(f32_to_e2m1(kInf), 0x7);
  EXPECT_EQ(f32_to_e2m1(-kInf), 0xF);
  EXPECT_EQ(f32_to_e2m1(kNaN), 0x7);  // no NaN code: documented as +6
  // A few hand-checked ties: 0.25 -> 0, 0.75 -> 1.0 (even), 1.25 -> 1.0, 2.5 -> 2, 3.5 -> 4, 5 -> 4.
  EXPECT_EQ(f32_to_e2m1(0.25f), 0x0);
  EXPECT_EQ(f32_to_e2m1(0.75f), 0x2);
  EXPECT_EQ(f32_to_e2m1(1.25f), 0x2);
  EXPECT_EQ(f32_to_e2m1(2.5f), 0x4);
  EXPECT_EQ(f32_to_e2m1(3.5f), 0x6);
  EXPECT_EQ(f32_to_e2m1(5.0f), 0x6);
  EXPECT_EQ(f32_to_e2m1(5.01f), 0x7);
}

// ---- 16-bit formats: all 65536 codes, and RNE on millions of random f32 against oracles

double f16_formula(uint16_t c) {
  const int e = (c >> 10) & 0x1F, m = c & 0x3FF;
  const double mag = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024.0 + m, e - 25);
  return (c & 0x8000) ? -mag : mag;
}

double bf16_formula(uint16_t c) {
  const int e = (c >> 7) & 0xFF, m = c & 0x7F;
  const double mag = e == 0 ? std::ldexp(m, -133) : std::ldexp(128.0 + m, e - 134);
  return (c & 0x8000) ? -mag : mag;
}

// Independent bf16 RNE: round the exact double value to the bf16 quantum of its binade.
uint16_t bf16_reference(float x) {
  const double v = x;
  if (v == 0) return std::signbit(x) ? 0x8000 : 0;
  if (std::isinf(v)) return std::signbit(x) ? 0xFF80 : 0x7F80;
  const int e = std::max(std::ilogb(v), -126);  // below 2^-126 the quantum stays 2^-133
  const double q = std::ldexp(1.0, e - 7);
  const double r = std::nearbyint(v / q) * q;
  const double max = std::ldexp(255.0, 127 - 7);  // 0x7F7F = (2 - 2^-7) * 2^127
  if (std::fabs(r) > max) return std::signbit(x) ? 0xFF80 : 0x7F80;
  return static_cast<uint16_t>(std::bit_cast<uint32_t>(static_cast<float>(r)) >> 16);
}

TEST(CodecF16, DecodesEveryCodeByFormulaAndRoundTrips) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto c = static_cast<uint16_t>(i);
    const float got = f16_to_f32(c);
    const int e = (c >> 10) & 0x1F;
    if (e == 31) {
      if (c & 0x3FF) EXPECT_TRUE(std::isnan(got)) << i;
      else EXPECT_EQ(got, (c & 0x8000) ? -kInf : kInf) << i;
      EXPECT_EQ(std::isnan(got), std::isnan(f16_to_f32(f32_to_f16(got)))) << i;
    } else {
      ASSERT_TRUE(same(got, static_cast<float>(f16_formula(c)))) << i;
      ASSERT_EQ(f32_to_f16(got), c) << i;
    }
    _Float16 h;
    std::memcpy(&h, &c, 2);
    ASSERT_TRUE(same(got, static_cast<float>(h))) << i;  // the compiler agrees too
  }
}

TEST(CodecBf16, DecodesEveryCodeByFormulaAndRoundTrips) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto c = static_cast<uint16_t>(i);
    const float got = bf16_to_f32(c);
    const int e = (c >> 7) & 0xFF;
    if (e == 255) {
      if (c & 0x7F) EXPECT_TRUE(std::isnan(got)) << i;
      else EXPECT_EQ(got, (c & 0x8000) ? -kInf : kInf) << i;
      // NaN stays NaN (not Inf), keeping its sign.
      const uint16_t back = f32_to_bf16(got);
      EXPECT_TRUE(same(bf16_to_f32(back), got)) << i;
      EXPECT_EQ(back & 0x8000, c & 0x8000) << i;
    } else {
      ASSERT_TRUE(same(got, static_cast<float>(bf16_formula(c)))) << i;
      ASSERT_EQ(f32_to_bf16(got), c) << i;
    }
  }
  // A NaN whose payload sits only in the low 16 bits must not truncate to Inf.
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::bit_cast<float>(0x7F800001u)))));
}

// Random f32 drawn two ways: uniform bit patterns (every binade, subnormals, specials) and values
// concentrated around the 16-bit formats' range, where the rounding decisions happen.
std::vector<float> random_floats(std::size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> exp(-30, 17);
  std::vector<float> v;
  v.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const uint32_t bits = rng();
    if (i % 2) v.push_back(std::bit_cast<float>(bits));
    else v.push_back(std::ldexp(1.0f + (bits & 0x7FFFFF) * 0x1p-23f, exp(rng)) * ((bits >> 31) ? -1 : 1));
  }
  // Exact ties for both formats: odd multiples of half a quantum.
  for (int k = 1; k < 4000; k += 2) {
    v.push_back(std::ldexp(static_cast<float>(2048 + k), -12));  // f16 ties near 1..2 (ulp 2^-10)
    v.push_back(std::ldexp(static_cast<float>(256 + k), -8));    // bf16 ties (ulp 2^-7)
    v.push_back(std::ldexp(static_cast<float>(k), -25));         // f16 subnormal ties
  }
  return v;
}

TEST(CodecF16, EncoderMatchesCompilerOnRandomFloats) {
  for (float x : random_floats(4'000'000, 1234)) {
    const uint16_t got = f32_to_f16(x);
    const _Float16 ref = static_cast<_Float16>(x);
    if (std::isnan(x)) {
      ASSERT_TRUE(std::isnan(f16_to_f32(got))) << x;
      continue;
    }
    uint16_t ref_bits;
    std::memcpy(&ref_bits, &ref, 2);
    ASSERT_EQ(got, ref_bits) << std::hexfloat << x;
  }
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);  // max + half ulp ties to Inf
  EXPECT_EQ(f32_to_f16(std::nextafter(65520.0f, 0.0f)), 0x7BFF);
}

TEST(CodecBf16, EncoderMatchesDoubleReferenceOnRandomFloats) {
  for (float x : random_floats(4'000'000, 99)) {
    if (std::isnan(x)) {
      ASSERT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(x))));
      continue;
    }
    ASSERT_EQ(f32_to_bf16(x), bf16_reference(x)) << std::hexfloat << x;
  }
}

// ---- decode_float

TEST(CodecDecodeFloat, ReadsEveryFloatDtype) {
  auto bytes = [](auto v) {
    std::vector<std::byte> b(sizeof(v));
    std::memcpy(b.data(), &v, sizeof(v));
    return b;
  };
  EXPECT_EQ(decode_float(DType::BF16, bytes(uint16_t{0x3FC0}).data()), 1.5f);
  EXPECT_EQ(decode_float(DType::F16, bytes(uint16_t{0x3E00}).data()), 1.5f);
  EXPECT_EQ(decode_float(DType::F32, bytes(-2.25f).data()), -2.25f);
  EXPECT_EQ(decode_float(DType::F64, bytes(0.125).data()), 0.125f);
  EXPECT_EQ(decode_float(DType::F8_E4M3, bytes(uint8_t{0x7E}).data()), 448.0f);
  EXPECT_EQ(decode_float(DType::F8_E5M2, bytes(uint8_t{0x3C}).data()), 1.0f);
  EXPECT_EQ(decode_float(DType::F8_E8M0, bytes(uint8_t{130}).data()), 8.0f);
  EXPECT_THROW(decode_float(DType::I32, bytes(int32_t{1}).data()), Error);
  EXPECT_THROW(decode_float(DType::I8, bytes(int8_t{1}).data()), Error);
}

// ---- block dequantization

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void check_fp8_block(int64_t rows, int64_t cols, DType scale_dtype, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << rows << "x" << cols << " " << dtype_name(scale_dtype));
  std::mt19937 rng(seed);
  std::vector<uint8_t> w(rows * cols);
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  const int64_t sr = ceil_div(rows, 128), sc = ceil_div(cols, 128);
  std::vector<double> scale(sr * sc);  // the value each block is meant to be scaled by
  std::vector<std::byte> raw(sr * sc * (scale_dtype == DType::F32 ? 4 : 1));
  for (int64_t i = 0; i < sr * sc; ++i) {
    if (scale_dtype == DType::F32) {
      const float s = std::uniform_real_distribution<float>(1e-4f, 1e-2f)(rng);
      std::memcpy(raw.data() + 4 * i, &s, 4);
      scale[i] = s;
    } else {
      const auto b = static_cast<uint8_t>(110 + rng() % 30);
      raw[i] = std::byte{b};
      scale[i] = std::ldexp(1.0, b - 127);
    }
  }
  std::vector<float> out(rows * cols);
  dequant_fp8_block128(w.data(), rows, cols, raw.data(), scale_dtype, out.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t code = w[r * cols + c];
      const float value = (code & 0x7F) == 0x7F ? kNaN : static_cast<float>(kE4m3.formula(code));
      const float want = value * static_cast<float>(scale[(r / 128) * sc + c / 128]);
      ASSERT_TRUE(same(out[r * cols + c], want)) << r << "," << c;
    }
  }
}

TEST(CodecDequant, Fp8Block128WithE8m0AndF32ScalesOnRaggedShapes) {
  for (DType st : {DType::F8_E8M0, DType::F32}) {
    check_fp8_block(300, 200, st, 1);
    check_fp8_block(129, 257, st, 2);
    check_fp8_block(1, 33, st, 3);
    check_fp8_block(256, 128, st, 4);
  }
  std::vector<uint8_t> w(4);
  std::vector<std::byte> s(4);
  std::vector<float> out(4);
  EXPECT_THROW(dequant_fp8_block128(w.data(), 2, 2, s.data(), DType::BF16, out.data()), Error);
}

void check_fp4_block(int64_t rows, int64_t cols, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << rows << "x" << cols);
  std::mt19937 rng(seed);
  std::vector<uint8_t> w(rows * cols / 2), scales(rows * ceil_div(cols, 32));
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  for (auto& b : scales) b = static_cast<uint8_t>(100 + rng() % 50);
  std::vector<float> out(rows * cols);
  dequant_fp4_block32(w.data(), rows, cols, scales.data(), out.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t byte = w[r * (cols / 2) + c / 2];
      const int nibble = (c % 2 == 0) ? (byte & 0xF) : (byte >> 4);  // low nibble = element 2k
      const double s = std::ldexp(1.0, scales[r * ceil_div(cols, 32) + c / 32] - 127);
      ASSERT_TRUE(same(out[r * cols + c], static_cast<float>(kE2m1.formula(nibble) * s))) << r << "," << c;
    }
  }
}

TEST(CodecDequant, Fp4Block32OnRaggedShapes) {
  check_fp4_block(3, 66, 7);
  check_fp4_block(1, 34, 8);
  check_fp4_block(130, 250, 9);
  check_fp4_block(4, 64, 10);
}

TEST(CodecDequant, Fp4PackingOrderIsLowNibbleFirst) {
  const uint8_t w[2] = {0x21, 0xF8};  // elements: 0.5, 1.0, -0.0, -6.0
  const uint8_t scale[1] = {128};     // x2
  float out[4];
  dequant_fp4_block32(w, 1, 4, scale, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 2.0f);
  EXPECT_TRUE(same(out[2], -0.0f));
  EXPECT_EQ(out[3], -12.0f);
  EXPECT_EQ(fp4_nibble(w, 0), 1);
  EXPECT_EQ(fp4_nibble(w, 1), 2);
  EXPECT_EQ(fp4_nibble(w, 3), 0xF);
  EXPECT_THROW(dequant_fp4_block32(w, 1, 3, scale, out), Error);
}

// ---- e5m2 -> e4m3 per-channel re-encoding

TEST(CodecReencode, E5m2ToE4m3PerChannelApproximatesWithinE4m3Precision) {
  constexpr int64_t kRows = 5, kCols = 200;
  std::mt19937 rng(42);
  std::vector<uint8_t> w(kRows * kCols);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kCols; ++c) {
      uint8_t code;
      do code = static_cast<uint8_t>(rng());
      while (((code >> 2) & 0x1F) == 31);  // finite codes only
      if (r == 1) code &= 0x80;               // row 1: all +-0
      if (r == 3) code = static_cast<uint8_t>((code & 0x83) | (6 << 2));  // tiny row: ~2^-9
      w[r * kCols + c] = code;
    }
  }
  std::vector<uint8_t> q(w.size());
  std::vector<float> scales(kRows);
  reencode_e5m2_to_e4m3_per_channel(w.data(), kRows, kCols, q.data(), scales.data());
  for (int64_t r = 0; r < kRows; ++r) {
    double amax = 0;
    for (int64_t c = 0; c < kCols; ++c) amax = std::max(amax, std::fabs(kE5m2.formula(w[r * kCols + c])));
    const double scale = amax > 0 ? static_cast<float>(amax / 448) : 1.0;
    EXPECT_EQ(scales[r], static_cast<float>(scale)) << "row " << r;
    for (int64_t c = 0; c < kCols; ++c) {
      const double x = kE5m2.formula(w[r * kCols + c]);
      const double y = kE4m3.formula(q[r * kCols + c]) * scales[r];
      // RNE to a 3-bit mantissa: relative error <= 2^-4 in the normal range, absolute error
      // <= half the smallest subnormal (2^-10 in scaled units) below it; 1e-6 covers x/scale's
      // own f32 rounding.
      const double tol = std::max(std::ldexp(std::fabs(x), -4), std::ldexp(scale, -10)) * (1 + 1e-6);
      ASSERT_LE(std::fabs(y - x), tol) << r << "," << c << " x=" << x << " y=" << y;
    }
  }
}

TEST(CodecReencode, ExactWhenValuesAreRepresentable) {
  // Row amax 448 * 2^k makes the scale a power of two, and every e5m2 value of the row with an
  // exponent inside e4m3's normal range after scaling fits e4m3's wider mantissa exactly.
  constexpr int64_t kCols = 64;
  std::vector<uint8_t> w(2 * kCols);
  std::mt19937 rng(5);
  for (int64_t c = 0; c < kCols; ++c) {
    const auto sign = static_cast<uint8_t>(rng() & 0x80);
    w[c] = static_cast<uint8_t>(sign | ((9 + rng() % 15) << 2) | (rng() & 3));          // 2^-6 .. 2^8
    w[kCols + c] = static_cast<uint8_t>(sign | ((13 + rng() % 15) << 2) | (rng() & 3));  // x16
  }
  w[0] = f32_to_e5m2(448.0f);
  w[kCols] = f32_to_e5m2(-448.0f * 16);
  std::vector<uint8_t> q(w.size());
  float scales[2];
  reencode_e5m2_to_e4m3_per_channel(w.data(), 2, kCols, q.data(), scales);
  EXPECT_EQ(scales[0], 1.0f);
  EXPECT_EQ(scales[1], 16.0f);
  for (int64_t i = 0; i < 2 * kCols; ++i)
    ASSERT_EQ(kE4m3.formula(q[i]) * scales[i / kCols], kE5m2.formula(w[i])) << i;
}

TEST(CodecReencode, RejectsInfAndNaN) {
  const uint8_t w[3] = {0x3C, 0x7C, 0x00};  // 1, Inf, 0
  uint8_t q[3];
  float s[1];
  EXPECT_THROW(reencode_e5m2_to_e4m3_per_channel(w, 1, 3, q, s), Error);
}

}  // namespace
}  // namespace plumb
