#pragma once
// Device helpers shared by the linear kernels (kernel-only header: included by .cu files only).
// Weight decoding specialised per format at compile time; values are exact (as weight_at).
#include <cstdint>

#include "plumb/backend/gpu/gpu_compat.h"
#include "plumb/backend/gpu/gpu_numerics.h"
#include "plumb/backend/gpu/weight_ref.h"

namespace plumb::gpu::k {

// e2m1 nibble -> f32 without a table: codes 2..7 are normal with exponent bias 1, so their bits
// shifted into an f32 exponent/mantissa and rebiased (+126) are the value; 0 and 1 are 0 and 0.5.
__device__ __forceinline__ float fp4_value(uint32_t nib) {
  const uint32_t c = nib & 7u;
  const float mag = c < 2u ? 0.5f * static_cast<float>(c) : bits_f32((c << 22) + (126u << 23));
  return (nib & 8u) ? -mag : mag;
}

// Element (r, c) of w, format known at compile time (same value as weight_at).
template <WFormat F>
__device__ __forceinline__ float wload(const WeightRef& w, int64_t r, int64_t c) {
  const int64_t i = r * w.cols + c;
  if constexpr (F == WFormat::F32) return load_f32(w.data + 4 * i);
  if constexpr (F == WFormat::BF16) return bf16_to_f32(load_u16(w.data + 2 * i));
  if constexpr (F == WFormat::FP8) return e4m3_to_f32(w.data[i]) * weight_scale(w, r, c);
  if constexpr (F == WFormat::FP4) {
    const uint8_t b = w.data[i >> 1];
    return fp4_value((c & 1) ? (b >> 4) : (b & 0xFu)) * weight_scale(w, r, c);
  }
  return 0.f;
}

// The fast exact decodes: a code shifted to the top of a 32-bit word (the bits below it are
// masked off) and arithmetic-shifted so that its magnitude bits land in an f32's low exponent /
// high mantissa bits: exactly value * 2^-120 (e4m3; subnormal codes become f32 subnormals, also
// exact) or value * 2^-126 (e2m1); times k = scale * 2^120 (or 2^126), rounded once, that is
// value * scale as the CPU's lut[code] * scale. The callers keep NaN codes and scales whose k
// would overflow on the slow path (wdecode16).
__device__ __forceinline__ float fp8_top_to_f32(uint32_t top, float k) {
  return bits_f32(static_cast<uint32_t>(static_cast<int32_t>(top) >> 4) & 0x87F00000u) * k;
}
__device__ __forceinline__ float fp4_top_to_f32(uint32_t top, float k) {
  return bits_f32(static_cast<uint32_t>(static_cast<int32_t>(top) >> 6) & 0x81C00000u) * k;
}

// A 16-element segment's stored bytes and scale, loaded by wraw16 and decoded later by
// wdecode16: a lane can keep many segments' loads in flight in few registers (FP8: 16 bytes + a
// scale in 5 registers, where the 16 decoded floats take 16), which is what a memory-bound GEMV
// needs. The scale stays as stored (weight_scale_from_bits decodes it): decoding it at the load
// would make the next load wait for this one. c0 is a multiple of 16 (so the segment lies in one
// scale block of FP8 128 / FP4 32), the row stride keeps the alignment (the caller checks K with
// vec16_ok) and f32 scales are 4-byte aligned (the GEMV's launcher checks).
template <WFormat F>
struct WRaw {
  uint4 v[F == WFormat::F32 ? 4 : (F == WFormat::BF16 ? 2 : 1)];
  uint32_t sbits;  // the segment's stored scale (FP8 / FP4)
};

template <WFormat F>
__device__ __forceinline__ WRaw<F> wraw16(const WeightRef& w, int64_t r, int64_t c0) {
  const int64_t i = r * w.cols + c0;
  WRaw<F> raw;
  if constexpr (F == WFormat::F32) {
    const uint4* p = reinterpret_cast<const uint4*>(w.data + 4 * i);
#pragma unroll
    for (int q = 0; q < 4; ++q) raw.v[q] = p[q];
  } else if constexpr (F == WFormat::BF16) {
    const uint4* p = reinterpret_cast<const uint4*>(w.data + 2 * i);
    raw.v[0] = p[0], raw.v[1] = p[1];
  } else if constexpr (F == WFormat::FP8) {
    raw.v[0] = *reinterpret_cast<const uint4*>(w.data + i);
  } else {  // FP4: 8 bytes, element 2j in the low nibble of byte j
    const uint2 v = *reinterpret_cast<const uint2*>(w.data + (i >> 1));
    raw.v[0] = make_uint4(v.x, v.y, 0u, 0u);
  }
  raw.sbits = 0u;
  if constexpr (F == WFormat::FP8 || F == WFormat::FP4) {
    const int64_t si = weight_scale_index(w, r, c0);
    raw.sbits = F == WFormat::FP8 && w.scale_f32 ? *reinterpret_cast<const uint32_t*>(w.scale + 4 * si) : w.scale[si];
  }
  return raw;
}

// The 16 values of a segment wraw16 loaded from w, exactly weight_at's.
template <WFormat F>
__device__ __forceinline__ void wdecode16(const WRaw<F>& raw, const WeightRef& w, float* out) {
  if constexpr (F == WFormat::F32) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const uint4 v = raw.v[q];
      out[4 * q] = bits_f32(v.x), out[4 * q + 1] = bits_f32(v.y), out[4 * q + 2] = bits_f32(v.z),
      out[4 * q + 3] = bits_f32(v.w);
    }
  } else if constexpr (F == WFormat::BF16) {
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const uint4 v = raw.v[q];
      const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        out[8 * q + 2 * j] = bits_f32(u[j] << 16);
        out[8 * q + 2 * j + 1] = bits_f32(u[j] & 0xFFFF0000u);
      }
    }
  } else if constexpr (F == WFormat::FP8) {
    // Fast exact decode (fp8_top_to_f32; the GEMV is ALU-bound otherwise). NaN codes (magnitude
    // 0x7F) and scales >= 2^8 (s * 2^120 would overflow) take the slow path.
    const uint32_t u[4] = {raw.v[0].x, raw.v[0].y, raw.v[0].z, raw.v[0].w};
    const float s = weight_scale_from_bits<F>(w, raw.sbits);
    uint32_t nan = 0;  // bit 7 of a byte set iff its low 7 bits are all ones
#pragma unroll
    for (int j = 0; j < 4; ++j) nan |= ((u[j] & 0x7F7F7F7Fu) + 0x01010101u) & 0x80808080u;
    const float k = s * 0x1p120f;
    if (nan == 0 && fabsf(k) < 0x1p127f) {
#pragma unroll
      for (int j = 0; j < 16; ++j) out[j] = fp8_top_to_f32(u[j / 4] << (24 - 8 * (j % 4)), k);
    } else {
#pragma unroll
      for (int j = 0; j < 16; ++j) out[j] = e4m3_to_f32(static_cast<uint8_t>(u[j / 4] >> (8 * (j % 4)))) * s;
    }
  } else {  // FP4 (fp4_top_to_f32)
    const uint32_t u[2] = {raw.v[0].x, raw.v[0].y};
    const float s = weight_scale_from_bits<F>(w, raw.sbits);
    const float k = s * 0x1p126f;
    if (fabsf(k) < 0x1p127f) {
#pragma unroll
      for (int j = 0; j < 16; ++j) out[j] = fp4_top_to_f32(u[j / 8] << (28 - 4 * (j % 8)), k);
    } else {
#pragma unroll
      for (int j = 0; j < 16; ++j) out[j] = fp4_value(u[j / 8] >> (4 * (j % 8))) * s;
    }
  }
}

// Whether rows of K elements keep 16-element segments aligned for wraw16.
inline bool vec16_ok(WFormat f, int64_t K) {
  switch (f) {
    case WFormat::F32: return K % 4 == 0;
    case WFormat::BF16: return K % 8 == 0;
    case WFormat::FP8:
    case WFormat::FP4: return K % 16 == 0;
  }
  return false;
}

// Calls fn.template operator()<F>() for w's format (kernels are instantiated per format).
template <typename Fn>
gpuError_t dispatch_format(WFormat f, Fn&& fn) {
  switch (f) {
    case WFormat::F32: return fn.template operator()<WFormat::F32>();
    case WFormat::BF16: return fn.template operator()<WFormat::BF16>();
    case WFormat::FP8: return fn.template operator()<WFormat::FP8>();
    case WFormat::FP4: return fn.template operator()<WFormat::FP4>();
  }
  return gpuSuccess;
}

}  // namespace plumb::gpu::k
