#include "plumb/format/codecs.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "plumb/util/error.h"

namespace plumb {
namespace {

uint32_t f32_bits(float x) { return std::bit_cast<uint32_t>(x); }
float bits_f32(uint32_t u) { return std::bit_cast<float>(u); }

// Rounds |x| (finite, not NaN) to a narrow binary float with `M` stored mantissa bits and exponent
// bias `B`, round to nearest, ties to even, and returns the magnitude code (exponent field above M
// mantissa bits) WITHOUT any overflow handling: a result above the format's largest finite code is
// returned as is (possibly past the Inf/NaN codes) so each caller applies its own overflow rule.
// One routine serves f16, e5m2, e4m3 and e2m1, so all four share the same (tested) rounding.
template <int M, int B>
uint32_t round_magnitude(float x) {
  constexpr int kEmin = 1 - B;  // exponent of the smallest normal
  const uint32_t a = f32_bits(x) & 0x7FFFFFFFu;
  if (a < static_cast<uint32_t>(127 + kEmin) << 23) {
    // Subnormal in the target: count units of 2^(kEmin - M). The scaling by a power of two is
    // exact, and nearbyint rounds ties to even in the default rounding mode. A result of 2^M
    // lands exactly on the smallest normal's code (exponent field 1, mantissa 0).
    const float units = std::ldexp(bits_f32(a), M - kEmin);
    return static_cast<uint32_t>(std::nearbyint(units));
  }
  // Normal: drop 23 - M mantissa bits of the f32 pattern with RNE; a carry out of the mantissa
  // moves into the exponent, which is the correct rounded value. Then rebias the exponent.
  constexpr int kShift = 23 - M;
  const uint32_t lsb = (a >> kShift) & 1u;
  const uint32_t rounded = (a + ((1u << (kShift - 1)) - 1u) + lsb) >> kShift;
  return rounded - (static_cast<uint32_t>(127 - B) << M);
}

uint32_t sign_bit(float x) { return f32_bits(x) >> 31; }

// 256-entry tables: the weight paths decode millions of bytes, and a table lookup is both the
// fastest and the simplest exact decode.
struct Fp8Tables {
  std::array<float, 256> e4m3;
  std::array<float, 256> e5m2;
};

const Fp8Tables& fp8_tables() {
  static const Fp8Tables t = [] {
    Fp8Tables r{};
    for (int b = 0; b < 256; ++b) {
      const float sign = (b & 0x80) ? -1.0f : 1.0f;
      {  // e4m3fn: S.EEEE.MMM, bias 7, exponent field 15 is a normal binade except S.1111.111
        const int e = (b >> 3) & 0xF, m = b & 7;
        float v;
        if (e == 15 && m == 7) v = std::numeric_limits<float>::quiet_NaN();
        else if (e == 0) v = std::ldexp(static_cast<float>(m), -9);
        else v = std::ldexp(static_cast<float>(8 + m), e - 10);
        r.e4m3[b] = sign * v;
      }
      {  // e5m2: S.EEEEE.MM, bias 15, IEEE specials
        const int e = (b >> 2) & 0x1F, m = b & 3;
        float v;
        if (e == 31) v = m ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
        else if (e == 0) v = std::ldexp(static_cast<float>(m), -16);
        else v = std::ldexp(static_cast<float>(4 + m), e - 17);
        r.e5m2[b] = sign * v;
      }
    }
    return r;
  }();
  return t;
}

constexpr std::array<float, 16> kE2m1 = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                         -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

}  // namespace

float bf16_to_f32(uint16_t bits) { return bits_f32(static_cast<uint32_t>(bits) << 16); }

uint16_t f32_to_bf16(float x) {
  const uint32_t u = f32_bits(x);
  // Truncating a NaN could clear every mantissa bit and turn it into Inf; force the quiet bit.
  if (std::isnan(x)) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  // bf16 keeps f32's exponent, so RNE is a plain integer add; overflow carries into Inf.
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

float f16_to_f32(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t e = (bits >> 10) & 0x1Fu, m = bits & 0x3FFu;
  if (e == 0) {  // zero / subnormal: m * 2^-24 is exact in f32
    const float v = std::ldexp(static_cast<float>(m), -24);
    return bits_f32(f32_bits(v) | sign);
  }
  if (e == 31) return bits_f32(sign | 0x7F800000u | (m << 13));  // Inf, NaN keeps its payload
  return bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

uint16_t f32_to_f16(float x) {
  const uint32_t s = sign_bit(x) << 15;
  if (std::isnan(x)) return static_cast<uint16_t>(s | 0x7E00u);
  const uint32_t mag = round_magnitude<10, 15>(x);
  return static_cast<uint16_t>(s | (mag >= 0x7C00u ? 0x7C00u : mag));  // overflow -> Inf
}

float e4m3_to_f32(uint8_t bits) { return fp8_tables().e4m3[bits]; }

uint8_t f32_to_e4m3(float x) {
  if (std::isnan(x)) return 0x7F;
  // No Inf code: anything rounding past 448 (0x7E), Inf included, saturates, which is what the
  // reference's clamp(-448, 448) before the cast produces (and CUDA's satfinite conversion).
  uint32_t mag = std::isinf(x) ? 0x7Eu : round_magnitude<3, 7>(x);
  if (mag > 0x7Eu) mag = 0x7Eu;
  return static_cast<uint8_t>((sign_bit(x) << 7) | mag);
}

float e5m2_to_f32(uint8_t bits) { return fp8_tables().e5m2[bits]; }

uint8_t f32_to_e5m2(float x) {
  const uint32_t s = sign_bit(x) << 7;
  if (std::isnan(x)) return static_cast<uint8_t>(s | 0x7E);
  const uint32_t mag = round_magnitude<2, 15>(x);
  return static_cast<uint8_t>(s | (mag >= 0x7Cu ? 0x7Cu : mag));  // overflow -> Inf
}

float ue8m0_to_f32(uint8_t bits) {
  if (bits == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  // Build the pattern directly: 2^-127 is an f32 subnormal (only mantissa bit 22 set).
  return bits == 0 ? bits_f32(0x00400000u) : bits_f32(static_cast<uint32_t>(bits) << 23);
}

float e2m1_to_f32(uint8_t nibble) { return kE2m1[nibble & 0x0F]; }

uint8_t f32_to_e2m1(float x) {
  // e2m1 has neither Inf nor NaN. Out of range saturates to +-6; NaN becomes +6, as CUDA's
  // satfinite FP4 conversion does, so a NaN is at least loud in the dequantized result.
  if (std::isnan(x)) return 0x7;
  uint32_t mag = std::isinf(x) ? 0x7u : round_magnitude<1, 1>(x);
  if (mag > 0x7u) mag = 0x7u;
  return static_cast<uint8_t>((sign_bit(x) << 3) | mag);
}

float decode_float(DType t, const std::byte* p) {
  switch (t) {
    case DType::BF16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return bf16_to_f32(v);
    }
    case DType::F16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return f16_to_f32(v);
    }
    case DType::F32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::F64: {
      double v;
      std::memcpy(&v, p, 8);
      return static_cast<float>(v);
    }
    case DType::F8_E4M3: return e4m3_to_f32(static_cast<uint8_t>(*p));
    case DType::F8_E5M2: return e5m2_to_f32(static_cast<uint8_t>(*p));
    case DType::F8_E8M0: return ue8m0_to_f32(static_cast<uint8_t>(*p));
    default: fail("decode_float: {} is not a floating-point dtype", dtype_name(t));
  }
}

void dequant_fp8_block128(const uint8_t* w, int64_t rows, int64_t cols, const std::byte* scales,
                          DType scale_dtype, float* out) {
  if (scale_dtype != DType::F8_E8M0 && scale_dtype != DType::F32)
    fail("dequant_fp8_block128: scale dtype {} is not supported (expected F8_E8M0 or F32)",
         dtype_name(scale_dtype));
  const auto& lut = fp8_tables().e4m3;
  const int64_t scale_cols = (cols + 127) / 128;
  const std::size_t scale_size = dtype_size(scale_dtype);
  for (int64_t r = 0; r < rows; ++r) {
    const std::byte* scale_row = scales + (r / 128) * scale_cols * scale_size;
    for (int64_t cb = 0; cb < scale_cols; ++cb) {
      const float s = decode_float(scale_dtype, scale_row + cb * scale_size);
      const int64_t end = std::min(cols, (cb + 1) * 128);
      for (int64_t c = cb * 128; c < end; ++c) out[r * cols + c] = lut[w[r * cols + c]] * s;
    }
  }
}

void dequant_fp4_block32(const uint8_t* w, int64_t rows, int64_t cols, const uint8_t* scales,
                         float* out) {
  // The I8 storage is [rows, cols/2]: an odd K has no byte layout, so it can only be a caller bug.
  if (cols % 2 != 0) fail("dequant_fp4_block32: cols {} is odd; packed FP4 holds two per byte", cols);
  const int64_t scale_cols = (cols + 31) / 32;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = w + r * (cols / 2);
    for (int64_t c = 0; c < cols; ++c) {
      const float s = ue8m0_to_f32(scales[r * scale_cols + c / 32]);
      out[r * cols + c] = kE2m1[fp4_nibble(row, static_cast<std::size_t>(c))] * s;
    }
  }
}

void reencode_e5m2_to_e4m3_per_channel(const uint8_t* w, int64_t rows, int64_t cols, uint8_t* out,
                                       float* row_scales) {
  const auto& lut = fp8_tables().e5m2;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* in = w + r * cols;
    float amax = 0.0f;
    for (int64_t c = 0; c < cols; ++c) {
      const float v = lut[in[c]];
      // A weight holding Inf/NaN is a corrupt checkpoint; re-encoding it would hide that.
      if (!std::isfinite(v))
        fail("reencode_e5m2_to_e4m3_per_channel: row {} column {} is {} (code 0x{:02X})", r, c, v,
             in[c]);
      amax = std::max(amax, std::fabs(v));
    }
    const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
    row_scales[r] = scale;
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = f32_to_e4m3(lut[in[c]] / scale);
  }
}

}  // namespace plumb
