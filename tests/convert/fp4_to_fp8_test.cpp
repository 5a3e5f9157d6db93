// The FP4 -> FP8 re-encode: bit-exact wherever the proof in fp4_to_fp8.h says so (including the
// scale extremes, -0 and partial blocks), data-checked past the bound, and never rounding.
#include "plumb/convert/fp4_to_fp8.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "plumb/format/codecs.h"

namespace plumb::convert {
namespace {

struct Fp4 {
  int64_t rows, cols;
  std::vector<uint8_t> packed, scales;
  Fp4(int64_t r, int64_t c) : rows(r), cols(c), packed(r * c / 2), scales(r * ((c + 31) / 32)) {}
  int64_t nsub() const { return (cols + 31) / 32; }
};

// Re-encodes band by band as the converter does; returns the first problem or "".
std::string reencode(const Fp4& w, std::vector<uint8_t>& codes, std::vector<uint8_t>& grid) {
  const int64_t gc = (w.cols + 127) / 128;
  codes.assign(w.rows * w.cols, 0);
  grid.assign(((w.rows + 127) / 128) * gc, 0);
  for (int64_t r0 = 0; r0 < w.rows; r0 += 128) {
    const int64_t n = std::min<int64_t>(128, w.rows - r0);
    std::string p = reencode_fp4_band(w.packed.data() + r0 * w.cols / 2, w.scales.data() + r0 * w.nsub(), n, w.cols, r0,
                                      codes.data() + r0 * w.cols, grid.data() + (r0 / 128) * gc);
    if (!p.empty()) return p;
  }
  return "";
}

void expect_bit_exact(const Fp4& w) {
  ASSERT_TRUE(fp4_to_fp8_problems(w.packed.data(), w.scales.data(), w.rows, w.cols, 5).empty());
  std::vector<uint8_t> codes, grid;
  ASSERT_EQ(reencode(w, codes, grid), "");
  std::vector<float> a(w.rows * w.cols), b(a.size());
  dequant_fp4_block32(w.packed.data(), w.rows, w.cols, w.scales.data(), a.data());
  dequant_fp8_block128(codes.data(), w.rows, w.cols, reinterpret_cast<const std::byte*>(grid.data()), DType::F8_E8M0,
                       b.data());
  ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

// Random nibbles (all 16 codes, -0 included) and 1x32 scales drawn from [lo, lo + spread].
Fp4 random_fp4(int64_t rows, int64_t cols, int lo, int spread, uint32_t seed) {
  Fp4 w(rows, cols);
  std::mt19937 rng(seed);
  for (auto& b : w.packed) b = static_cast<uint8_t>(rng());
  std::uniform_int_distribution<int> s(lo, lo + spread);
  for (auto& x : w.scales) x = static_cast<uint8_t>(s(rng));
  return w;
}

TEST(Fp4ToFp8, BitExactWithinTheScaleBoundAcrossTheRange) {
  for (int lo : {0, 1, 60, 113, 127, 200, 240}) expect_bit_exact(random_fp4(256, 384, lo, 14, 1000u + lo));
}

TEST(Fp4ToFp8, PartialBlocksAndTinyShapes) {
  expect_bit_exact(random_fp4(96, 96, 120, 6, 1));     // tiny-v4 expert shape
  expect_bit_exact(random_fp4(193, 160, 110, 14, 2));  // partial last row and column blocks
  expect_bit_exact(random_fp4(1, 2, 127, 0, 3));
}

TEST(Fp4ToFp8, EveryNibbleAtTheExtremesOfTheBound) {
  // Each 1x32 sub-block holds all 16 codes twice; scales alternate between s and s + 14, which is
  // the widest exact span, at both ends of the ue8m0 range.
  for (int s : {0, 240}) {
    Fp4 w(128, 128);
    for (int64_t i = 0; i < w.rows * w.cols / 2; ++i)
      w.packed[i] = static_cast<uint8_t>((2 * i) % 16 | (((2 * i + 1) % 16) << 4));
    for (std::size_t i = 0; i < w.scales.size(); ++i) w.scales[i] = static_cast<uint8_t>(i % 2 ? s + 14 : s);
    expect_bit_exact(w);
  }
}

TEST(Fp4ToFp8, PastTheBoundTheDataDecides) {
  // Scales span 40 binades, but the low-scale sub-blocks hold only zeros: exact.
  Fp4 w = random_fp4(128, 128, 127, 0, 4);
  for (int64_t r = 0; r < 128; ++r) {
    w.scales[r * 4] = 87;
    for (int64_t k = 0; k < 16; ++k) w.packed[r * 64 + k] = (r % 2) ? 0x88 : 0x00;  // +-0
  }
  expect_bit_exact(w);
}

TEST(Fp4ToFp8, AnInexactBlockIsReportedNeverRounded) {
  Fp4 w(256, 256);
  std::fill(w.packed.begin(), w.packed.end(), 0x11);  // every value 0.5
  std::fill(w.scales.begin(), w.scales.end(), 127);
  // Row 130, cols 160..191 at 0.5 x 2^-18: the block scale puts 0.5 x 2^0 at 2^8, so this one
  // would need 2^-10, below e4m3's smallest subnormal 2^-9.
  w.scales[130 * 8 + 5] = 109;
  const auto problems = fp4_to_fp8_problems(w.packed.data(), w.scales.data(), 256, 256, 5);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("rows 128..255, cols 128..255"), std::string::npos) << problems[0];
  EXPECT_NE(problems[0].find("element [130, 160] = 0.5 x 2^-18"), std::string::npos) << problems[0];
  std::vector<uint8_t> codes, grid;
  EXPECT_NE(reencode(w, codes, grid), "");
  w.scales[130 * 8 + 5] = 110;  // 2^-9: past the scale bound, but the data check finds it exact
  expect_bit_exact(w);
}

TEST(Fp4ToFp8, NanScaleIsReported) {
  Fp4 w = random_fp4(128, 64, 127, 2, 5);
  w.scales[7] = 0xFF;
  const auto problems = fp4_to_fp8_problems(w.packed.data(), w.scales.data(), 128, 64, 5);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("NaN"), std::string::npos) << problems[0];
}

}  // namespace
}  // namespace plumb::convert
