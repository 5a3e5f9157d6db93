#pragma once
// Exact scalar numerics of the checkpoint formats and of the release's quantization round trips,
// written once for device and host: kernels decode FP8/FP4/bf16 weights in registers with these,
// and the CPU test suite (which has no GPU) checks every one of them against plumb's codecs
// (format/codecs.h) exhaustively over all codes. Same results as cpu/simquant.h by construction.
#include <cstdint>
#include <cstring>

#include "plumb/backend/cr_math.h"

#if defined(__HIPCC__)
#include <hip/hip_runtime.h>  // __host__/__device__ and the device builtins (hipcc adds only a wrapper)
#endif

#if defined(__CUDACC__) || defined(__HIPCC__)
#define PLUMB_HD __host__ __device__ inline __attribute__((always_inline))  // __forceinline__ needs the runtime header first
#else
#define PLUMB_HD inline
#endif

namespace plumb::gpu {

// __builtin_memcpy, not std::memcpy: the latter is a host-only function for hipcc's device pass.
PLUMB_HD uint32_t f32_bits(float x) {
  uint32_t u;
  __builtin_memcpy(&u, &x, 4);
  return u;
}
PLUMB_HD float bits_f32(uint32_t u) {
  float x;
  __builtin_memcpy(&x, &u, 4);
  return x;
}
// Unaligned-safe loads of stored values (weights, scales) by byte address.
PLUMB_HD float load_f32(const uint8_t* p) {
  float v;
  __builtin_memcpy(&v, p, 4);
  return v;
}
PLUMB_HD uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  __builtin_memcpy(&v, p, 2);
  return v;
}

PLUMB_HD float bf16_to_f32(uint16_t b) { return bits_f32(static_cast<uint32_t>(b) << 16); }

// Round to nearest even bf16, returned as f32; NaN stays NaN (quiet).
PLUMB_HD float round_bf16(float x) {
  const uint32_t u = f32_bits(x);
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x7FFFFFu)) return bits_f32(u | 0x00400000u);
  return bits_f32((u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u);
}

// e4m3fn: bias 7, subnormals, no Inf, 0x7F / 0xFF NaN.
PLUMB_HD float e4m3_to_f32(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t e = (b >> 3) & 0xFu, m = b & 0x7u;
  if (e == 0xFu && m == 0x7u) return bits_f32(0x7FC00000u);  // both NaN codes: +qNaN, as codecs.h
  if (e == 0) return bits_f32(sign | f32_bits(static_cast<float>(m) * 0.001953125f));  // m * 2^-9
  return bits_f32(sign | ((e + 120u) << 23) | (m << 20));
}

// e2m1 nibble (low 4 bits): 0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 is the sign.
PLUMB_HD float e2m1_to_f32(uint8_t nib) {
  const uint32_t m = nib & 0x7u;
  const float mag = m < 4 ? 0.5f * static_cast<float>(m) : static_cast<float>(1u << ((m >> 1) - 1)) * (1.f + 0.5f * (m & 1u));
  return (nib & 0x8u) ? -mag : mag;
}

// 2^(b - 127); 0xFF is NaN; 0 is the subnormal 2^-127.
PLUMB_HD float ue8m0_to_f32(uint8_t b) {
  if (b == 0xFFu) return bits_f32(0x7FC00000u);
  return b == 0 ? bits_f32(0x00400000u) : bits_f32(static_cast<uint32_t>(b) << 23);
}

// The power-of-two scale 2^ceil(log2(max(amax, min_amax) / qmax)) as a ue8m0 code.
PLUMB_HD uint8_t ue8m0_scale_for(float amax, float qmax, float min_amax) {
  const float s = (amax > min_amax ? amax : min_amax) / qmax;
  const uint32_t bits = f32_bits(s);
  int e = static_cast<int>((bits >> 23) & 0xFFu) - 127 + ((bits & 0x7FFFFFu) != 0 ? 1 : 0);
  e = e < -127 ? -127 : (e > 127 ? 127 : e);
  return static_cast<uint8_t>(e + 127);
}

// Round |x| to a float format with M mantissa bits and exponent bias B (RNE), as a code without
// its sign (may exceed the format's largest finite code: callers saturate).
template <int M, int B>
PLUMB_HD uint32_t round_magnitude(float x) {
  constexpr int kEmin = 1 - B;
  const uint32_t a = f32_bits(x) & 0x7FFFFFFFu;
  if (a < static_cast<uint32_t>(127 + kEmin) << 23) {
    // Subnormal in the target: units of 2^(kEmin - M), scaled exactly, then round half to even.
    const float units = bits_f32(a) * bits_f32(static_cast<uint32_t>(127 + M - kEmin) << 23);
    const float fl = static_cast<float>(static_cast<uint32_t>(units));  // units < 2^(M+1): exact
    const float frac = units - fl;
    uint32_t q = static_cast<uint32_t>(fl);
    if (frac > 0.5f || (frac == 0.5f && (q & 1u))) ++q;
    return q;
  }
  constexpr int kShift = 23 - M;
  const uint32_t lsb = (a >> kShift) & 1u;
  const uint32_t rounded = (a + ((1u << (kShift - 1)) - 1u) + lsb) >> kShift;
  return rounded - (static_cast<uint32_t>(127 - B) << M);
}

PLUMB_HD bool is_nan(float x) { return (f32_bits(x) & 0x7FFFFFFFu) > 0x7F800000u; }
PLUMB_HD bool is_inf(float x) { return (f32_bits(x) & 0x7FFFFFFFu) == 0x7F800000u; }

PLUMB_HD uint8_t f32_to_e4m3(float x) {
  if (is_nan(x)) return 0x7F;
  uint32_t mag = is_inf(x) ? 0x7Eu : round_magnitude<3, 7>(x);
  if (mag > 0x7Eu) mag = 0x7Eu;
  return static_cast<uint8_t>(((f32_bits(x) >> 31) << 7) | mag);
}

PLUMB_HD uint8_t f32_to_e2m1(float x) {
  if (is_nan(x)) return 0x7;
  uint32_t mag = is_inf(x) ? 0x7u : round_magnitude<1, 1>(x);
  if (mag > 0x7u) mag = 0x7u;
  return static_cast<uint8_t>(((f32_bits(x) >> 31) << 3) | mag);
}

PLUMB_HD float clampf(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }

// One element of the FP8 e4m3 round trip with block scale s (a power of two): the release's
// act_quant. kFp8Max / kFp8MinAmax feed ue8m0_scale_for.
// fp8_code / fp4_code are the stored code of x under scale s (the paged caches' fp8 entries and
// fp4 keys, backend/kv_row.h, store exactly these).
constexpr float kFp8Max = 448.f, kFp8MinAmax = 1e-4f;
PLUMB_HD uint8_t fp8_code(float x, float s) { return f32_to_e4m3(clampf(x / s, -kFp8Max, kFp8Max)); }
PLUMB_HD float fp8_roundtrip(float x, float s) { return e4m3_to_f32(fp8_code(x, s)) * s; }

// 1 / ue8m0_to_f32(code) for code < 255, exactly: 2^(127 - code), a power of two that f32 holds
// (2^-127 for code 254 as a subnormal).
PLUMB_HD float ue8m0_inverse(uint8_t code) {
  return code == 254 ? bits_f32(0x00400000u) : bits_f32(static_cast<uint32_t>(254 - code) << 23);
}

// fp8_roundtrip(x, s) for a power-of-two scale s = ue8m0_to_f32(code) (code < 255) given its exact
// inverse inv = ue8m0_inverse(code): bitwise the same result for every x, in ~12 instructions
// where fp8_roundtrip takes a division and the code's encode / decode branches (the GEMV and the
// grouped experts quantize their inputs in their prologue with it; gpu_numerics_test checks it
// against fp8_roundtrip). Why it is the same:
// - x * inv is the correctly rounded x * 2^-e, as x / s is (the same real; overflow and subnormal
//   results round alike).
// - |y| >= 448 (Inf included) clamps to 448, e4m3's largest value; below it, rounding to 3
//   mantissa bits (ties to even) never passes 448.
// - |y| >= 2^-6 (e4m3 normal): round_magnitude's mantissa rounding on the f32 bits, which is the
//   code's value.
// - |y| < 2^-6 (e4m3 subnormal, units of 2^-9): |y| + 2^14 lies in [2^14, 2^14 + 2^-6), where an
//   f32 ulp is 2^-9, so the add rounds |y| to a multiple of 2^-9, ties to even (2^14 is an even
//   number of units), and subtracting 2^14 is exact.
// - the sign is y's, as the code's (so -0 stays -0); NaN gives fp8_code's NaN decoded, times s.
// The add and subtract are kept as written (no reassociation: plain IEEE f32 on the host, the _rn
// intrinsics on the device).
PLUMB_HD float fp8_roundtrip_inv(float x, float s, float inv) {
  const float y = x * inv;
  const uint32_t yb = f32_bits(y), a = yb & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return bits_f32(0x7FC00000u) * s;
  uint32_t m;
  if (a >= 0x43E00000u) {
    m = 0x43E00000u;  // 448
  } else if (a >= 0x3C800000u) {
    m = (a + 0x7FFFFu + ((a >> 20) & 1u)) & 0xFFF00000u;
  } else {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
    m = f32_bits(__fsub_rn(__fadd_rn(bits_f32(a), 16384.f), 16384.f));
#else
    volatile float t = bits_f32(a) + 16384.f;  // volatile: evaluated as written whatever the flags
    m = f32_bits(t - 16384.f);
#endif
  }
  return bits_f32(m | (yb & 0x80000000u)) * s;
}

// Same for FP4 e2m1 (amax floor 6 * 2^-126).
constexpr float kFp4Max = 6.f;
PLUMB_HD float fp4_min_amax() { return 6.f * bits_f32(0x00800000u); }
PLUMB_HD uint8_t fp4_code(float x, float s) { return f32_to_e2m1(clampf(x / s, -kFp4Max, kFp4Max)); }
PLUMB_HD float fp4_roundtrip(float x, float s) { return e2m1_to_f32(fp4_code(x, s)) * s; }

// exp_cr / log1p_cr: the CPU backend's exact exponential and log (backend/cr_math.h).
using backend::exp_cr;
using backend::log1p_cr;

}  // namespace plumb::gpu
