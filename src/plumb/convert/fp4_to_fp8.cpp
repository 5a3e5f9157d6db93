// FP4 (1x32 ue8m0) -> FP8 e4m3 (128x128 ue8m0) lossless re-encoding; the proof is in the header.
#include "plumb/convert/fp4_to_fp8.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>

#include "plumb/format/codecs.h"

namespace plumb::convert {
namespace {

// floor(log2 |m|) of the e2m1 magnitudes 0.5, 1, 1.5, 2, 3, 4, 6 (index = magnitude code 1..7).
constexpr std::array<int, 8> kFloorLog2 = {0, -1, 0, 0, 1, 1, 2, 2};

// e4m3 code of m x 2^d for every magnitude code and exponent shift d in [kDMin, kDMax], or
// kInexact. Built by encoding and decoding back, so the table itself is the exactness check.
constexpr int kDMin = -16, kDMax = 16;
constexpr uint8_t kInexact = 0xFF;  // never a magnitude code (those are 0x00..0x7E)

struct CodeTable {
  std::array<std::array<uint8_t, kDMax - kDMin + 1>, 8> code{};
};

const CodeTable& code_table() {
  static const CodeTable t = [] {
    CodeTable r;
    for (int mag = 1; mag < 8; ++mag)
      for (int d = kDMin; d <= kDMax; ++d) {
        const double q = std::ldexp(static_cast<double>(e2m1_to_f32(static_cast<uint8_t>(mag))), d);
        const uint8_t c = f32_to_e4m3(static_cast<float>(q));
        r.code[mag][d - kDMin] = static_cast<double>(e4m3_to_f32(c)) == q ? c : kInexact;
      }
    return r;
  }();
  return t;
}

struct Band {
  const uint8_t* packed;
  const uint8_t* scales;
  int64_t rows, cols, row0;
  int64_t nsub() const { return (cols + 31) / 32; }
  int nibble(int64_t r, int64_t c) const { return fp4_nibble(packed + r * (cols / 2), static_cast<std::size_t>(c)); }
  int scale(int64_t r, int64_t c) const { return scales[r * nsub() + c / 32]; }
  std::string where(int64_t cb) const {
    return fmt::format("rows {}..{}, cols {}..{}", row0, row0 + rows - 1, cb * 128, std::min(cols, cb * 128 + 128) - 1);
  }
};

// Range of the 1x32 scale bytes of block column cb (0xFF, NaN, flagged separately).
struct ScaleSpan {
  int min = INT_MAX, max = INT_MIN;
  bool has_nan = false;
};

ScaleSpan scale_span(const Band& b, int64_t cb) {
  ScaleSpan s;
  const int64_t j0 = cb * 4, j1 = std::min(b.nsub(), j0 + 4);
  for (int64_t r = 0; r < b.rows; ++r)
    for (int64_t j = j0; j < j1; ++j) {
      const int v = b.scales[r * b.nsub() + j];
      if (v == 0xFF) s.has_nan = true;
      s.min = std::min(s.min, v);
      s.max = std::max(s.max, v);
    }
  return s;
}

// Encodes block column cb of the band into `codes` (row stride `code_stride`) and its scale byte
// into *t_out. Returns "" or the problem.
std::string encode_block(const Band& b, int64_t cb, uint8_t* codes, int64_t code_stride, uint8_t* t_out) {
  const int64_t c0 = cb * 128, c1 = std::min(b.cols, c0 + 128);
  if (scale_span(b, cb).has_nan)
    return fmt::format("{}: a 1x32 scale is NaN (0xFF); its values have no finite FP8 encoding", b.where(cb));
  int top = INT_MIN;
  for (int64_t r = 0; r < b.rows; ++r)
    for (int64_t c = c0; c < c1; ++c)
      if (const int mag = b.nibble(r, c) & 7) top = std::max(top, kFloorLog2[mag] + b.scale(r, c));
  // All zeros: any scale reproduces them; 2^0 is the neutral choice.
  const int t = top == INT_MIN ? 127 : std::clamp(top - 8, 0, 254);
  const auto& table = code_table().code;
  for (int64_t r = 0; r < b.rows; ++r)
    for (int64_t c = c0; c < c1; ++c) {
      const int nib = b.nibble(r, c), mag = nib & 7;
      const int d = b.scale(r, c) - t;
      uint8_t code = 0;
      if (mag) {
        code = d < kDMin || d > kDMax ? kInexact : table[mag][d - kDMin];
        if (code == kInexact) {
          const ScaleSpan s = scale_span(b, cb);
          return fmt::format(
              "{}: element [{}, {}] = {} x 2^{} is not an e4m3 value under the block scale 2^{} "
              "(the block's 1x32 scales span 2^{}..2^{}, more than e4m3 holds exactly)",
              b.where(cb), b.row0 + r, c, e2m1_to_f32(static_cast<uint8_t>(nib)), b.scale(r, c) - 127, t - 127,
              s.min - 127, s.max - 127);
        }
      }
      codes[r * code_stride + (c - c0)] = static_cast<uint8_t>(code | ((nib & 8) << 4));  // sign; -0 stays -0
    }
  *t_out = static_cast<uint8_t>(t);
  return "";
}

}  // namespace

std::string reencode_fp4_band(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols, int64_t row0,
                              uint8_t* codes, uint8_t* block_scales) {
  const Band b{packed, scales, rows, cols, row0};
  for (int64_t cb = 0; cb * 128 < cols; ++cb)
    if (std::string p = encode_block(b, cb, codes + cb * 128, cols, &block_scales[cb]); !p.empty()) return p;
  return "";
}

std::vector<std::string> fp4_to_fp8_problems(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                                             std::size_t max_problems) {
  std::vector<std::string> problems;
  std::vector<uint8_t> scratch(128 * 128);
  const int64_t nsub = (cols + 31) / 32;
  for (int64_t r0 = 0; r0 < rows && problems.size() < max_problems; r0 += 128) {
    const Band b{packed + r0 * (cols / 2), scales + r0 * nsub, std::min<int64_t>(128, rows - r0), cols, r0};
    for (int64_t cb = 0; cb * 128 < cols && problems.size() < max_problems; ++cb) {
      const ScaleSpan s = scale_span(b, cb);
      if (!s.has_nan && s.max - s.min <= 14) continue;  // proven exact from the scales alone
      uint8_t t = 0;
      if (std::string p = encode_block(b, cb, scratch.data(), 128, &t); !p.empty()) problems.push_back(std::move(p));
    }
  }
  return problems;
}

}  // namespace plumb::convert
