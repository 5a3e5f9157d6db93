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

// The hardware FP8 decode (CUDA sm_89+: cvt.rn.f16x2.e4m3x2), for wdecode4<FP8, true>. Elsewhere
// (HIP gfx90a, CUDA sm_80 and the compute_80 PTX) the integer decode above serves both.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define PLUMB_FP8_CVT 1
// The 4 e4m3 codes of u (element 0 in the low byte) times s, exactly as e4m3_to_f32(code) * s: an
// e4m3 value (at most 448, at least 2^-9 in magnitude, 3 mantissa bits) is an f16 normal, so the
// conversion to f16 is exact, f16 -> f32 is exact, and the one rounding is the f32 product, the
// CPU's lut[code] * s. Any scale (2^-127, >= 2^8, NaN) takes this same path: no k = s * 2^120 to
// overflow. A NaN code gives an f16 NaN, then an f32 NaN, then NaN * s: a NaN, as the integer
// path's slow branch gives (and any sum with a NaN term is NaN). +-0 keep their sign.
__device__ __forceinline__ void fp8x4_cvt(uint32_t u, float s, float* out) {
  uint32_t h01, h23;  // f16x2: elements 0 and 1, 2 and 3 (lower half first)
  asm("{\n\t.reg .b16 lo, hi;\n\tmov.b32 {lo, hi}, %2;\n\tcvt.rn.f16x2.e4m3x2 %0, lo;\n\tcvt.rn.f16x2.e4m3x2 %1, hi;\n\t}"
      : "=r"(h01), "=r"(h23)
      : "r"(u));
  float f[4];
  asm("{\n\t.reg .b16 a, b, c, d;\n\tmov.b32 {a, b}, %4;\n\tmov.b32 {c, d}, %5;\n\tcvt.f32.f16 %0, a;\n\tcvt.f32.f16 %1, "
      "b;\n\tcvt.f32.f16 %2, c;\n\tcvt.f32.f16 %3, d;\n\t}"
      : "=f"(f[0]), "=f"(f[1]), "=f"(f[2]), "=f"(f[3])
      : "r"(h01), "r"(h23));
#pragma unroll
  for (int i = 0; i < 4; ++i) out[i] = f[i] * s;
}
#else
#define PLUMB_FP8_CVT 0
#endif

// A 16-element segment's stored bytes and scale, loaded by wraw16 and decoded later by
// wdecode16: a lane can keep many segments' loads in flight in few registers (FP8: 16 bytes + a
// scale in 5 registers, where the 16 decoded floats take 16), which is what a memory-bound GEMV
// needs. The scale stays as stored (weight_scale_from_bits decodes it): decoding it at the load
// would make the next load wait for this one. c0 is a multiple of 16 (so the segment lies in one
// scale block of FP8 128 / FP4 32), the row stride keeps the alignment (the caller checks K with
// vec16_ok) and f32 scales are 4-byte aligned (the GEMV's launcher checks).
// The stored scale of element (r, c) of w (FP8 / FP4; 0 for the other formats), as WRaw::sbits
// keeps it.
template <WFormat F>
__device__ __forceinline__ uint32_t wscale_bits(const WeightRef& w, int64_t r, int64_t c) {
  if constexpr (F == WFormat::FP8 || F == WFormat::FP4) {
    const int64_t si = weight_scale_index(w, r, c);
    return F == WFormat::FP8 && w.scale_f32 ? *reinterpret_cast<const uint32_t*>(w.scale + 4 * si) : w.scale[si];
  }
  return 0u;
}

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
  raw.sbits = wscale_bits<F>(w, r, c0);
  return raw;
}

// FP4's two decodes of the 4 nibbles of u (the lowest first): fast, fp4_top_to_f32 with k = s *
// 2^126; slow, as weight_at multiplies them, by the ue8m0 scale of code sbits (scales of 2^1 and
// up, and NaN).
__device__ __forceinline__ void fp4x4_fast(uint32_t u, float k, float* out) {
#pragma unroll
  for (int i = 0; i < 4; ++i) out[i] = fp4_top_to_f32(u << (28 - 4 * i), k);
}
__device__ __forceinline__ void fp4x4_slow(uint32_t u, uint32_t sbits, float* out) {
  const float s = ue8m0_to_f32(static_cast<uint8_t>(sbits));
#pragma unroll
  for (int i = 0; i < 4; ++i) out[i] = fp4_value(u >> (4 * i)) * s;
}

// A segment's scale as wdecode4 applies it: s, and for the fast exact decodes k = s * 2^120 (FP8)
// or s * 2^126 (FP4) and whether k is below 2^127 (else the slow path). wdecode16 works it out
// once for its four quarters. FP4's ue8m0 code b gives k = 2^(b - 1) for b < 128 directly (b = 0:
// s = 2^-127, k = 2^-1), the value s * 2^126 rounds to, without ue8m0_to_f32's branches; its s is
// left to the slow path (fp4x4_slow).
struct SegScale {
  float s, k;
  bool fast;
};
template <WFormat F>
__device__ __forceinline__ SegScale seg_scale(const WRaw<F>& raw, const WeightRef& w) {
  if constexpr (F == WFormat::FP4) {
    const uint32_t b = raw.sbits & 0xFFu;
    return {0.f, bits_f32((b + 126u) << 23), b < 128u};
  } else if constexpr (F == WFormat::FP8) {
    const float s = weight_scale_from_bits<F>(w, raw.sbits), k = s * 0x1p120f;
    return {s, k, fabsf(k) < 0x1p127f};
  }
  return {1.f, 1.f, true};
}

// Values 4q .. 4q + 3 of a segment wraw16 loaded from w, exactly weight_at's (the GEMV decodes a
// segment a quarter at a time: 4 floats live instead of 16), with its scale sc = seg_scale(raw, w).
// HW: FP8 by the hardware conversion where there is one (PLUMB_FP8_CVT), else (and for !HW) by
// the integer decode.
template <WFormat F, bool HW = false>
__device__ __forceinline__ void wdecode4(const WRaw<F>& raw, const SegScale& sc, int q, float* out) {
  const uint4 v0 = raw.v[0];
  const uint32_t u0[4] = {v0.x, v0.y, v0.z, v0.w};
  if constexpr (F == WFormat::F32) {
    const uint4 v = raw.v[q];
    out[0] = bits_f32(v.x), out[1] = bits_f32(v.y), out[2] = bits_f32(v.z), out[3] = bits_f32(v.w);
  } else if constexpr (F == WFormat::BF16) {
    const uint4 v = raw.v[q / 2];
    const uint32_t a = q % 2 ? v.z : v.x, b = q % 2 ? v.w : v.y;
    out[0] = bits_f32(a << 16), out[1] = bits_f32(a & 0xFFFF0000u);
    out[2] = bits_f32(b << 16), out[3] = bits_f32(b & 0xFFFF0000u);
#if PLUMB_FP8_CVT
  } else if constexpr (F == WFormat::FP8 && HW) {
    fp8x4_cvt(u0[q], sc.s, out);
#endif
  } else if constexpr (F == WFormat::FP8) {
    // Fast exact decode (fp8_top_to_f32; the GEMV is ALU-bound otherwise). A word with a NaN code
    // (magnitude 0x7F) and scales >= 2^8 (s * 2^120 would overflow) take the slow path.
    const uint32_t u = u0[q];
    const uint32_t nan = ((u & 0x7F7F7F7Fu) + 0x01010101u) & 0x80808080u;  // bit 7 of a byte: its low 7 all ones
    if (nan == 0 && sc.fast) {
#pragma unroll
      for (int i = 0; i < 4; ++i) out[i] = fp8_top_to_f32(u << (24 - 8 * i), sc.k);
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) out[i] = e4m3_to_f32(static_cast<uint8_t>(u >> (8 * i))) * sc.s;
    }
  } else {  // FP4 (fp4_top_to_f32): nibbles 4q .. 4q + 3, element 2j in the low nibble of byte j
    const uint32_t u = u0[q / 2] >> (16 * (q % 2));
    if (sc.fast)
      fp4x4_fast(u, sc.k, out);
    else
      fp4x4_slow(u, raw.sbits, out);
  }
}
template <WFormat F, bool HW = false>
__device__ __forceinline__ void wdecode4(const WRaw<F>& raw, const WeightRef& w, int q, float* out) {
  wdecode4<F, HW>(raw, seg_scale<F>(raw, w), q, out);
}

// All 16 values of the segment (wdecode4 four times, the scale worked out once; FP4 with one
// branch for the segment, not one a quarter).
template <WFormat F, bool HW = false>
__device__ __forceinline__ void wdecode16(const WRaw<F>& raw, const WeightRef& w, float* out) {
  const SegScale sc = seg_scale<F>(raw, w);
  if constexpr (F == WFormat::FP4) {
    const uint32_t u[2] = {raw.v[0].x, raw.v[0].y};
    if (sc.fast) {
#pragma unroll
      for (int q = 0; q < 4; ++q) fp4x4_fast(u[q / 2] >> (16 * (q % 2)), sc.k, out + 4 * q);
    } else {
#pragma unroll
      for (int q = 0; q < 4; ++q) fp4x4_slow(u[q / 2] >> (16 * (q % 2)), raw.sbits, out + 4 * q);
    }
  } else {
#pragma unroll
    for (int q = 0; q < 4; ++q) wdecode4<F, HW>(raw, sc, q, out + 4 * q);
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

// 32-bit word i (0..3) of 16 loaded bytes.
__device__ __forceinline__ uint32_t word_of(const uint4& v, int i) {
  return i == 0 ? v.x : (i == 1 ? v.y : (i == 2 ? v.z : v.w));
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

// 16 bytes of weights read once (CUDA's streaming hint: evict first; a plain load on HIP).
__device__ __forceinline__ uint4 load_stream(const uint8_t* p) {
#ifdef PLUMB_CUDA
  return __ldcs(reinterpret_cast<const uint4*>(p));
#else
  return *reinterpret_cast<const uint4*>(p);
#endif
}

#if defined(PLUMB_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define PLUMB_MMA_BF16 1
// D = A (16x16, row) * B (16x8, col) + D, bf16 inputs, f32 accumulators (PTX ISA fragment layout
// for m16n8k16: groupID = lane / 4, tig = lane % 4; A regs {a0a1, a2a3, a4a5, a6a7} hold
// (g, 2tig..+1), (g+8, 2tig..+1), (g, 2tig+8..+9), (g+8, 2tig+8..+9); B regs hold k = 2tig..+1 and
// 2tig+8..+9 of column g; C holds (g, 2tig..+1) and (g+8, 2tig..+1); lower half = lower index).
// linear_gemm.cu's tiles and linear_f32_mma.cu use it.
__device__ __forceinline__ void mma_bf16(float* d, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#elif defined(PLUMB_EMU) && defined(PLUMB_CUDA)  // (not the emulator's HIP flavour: a 32-lane instruction)
#define PLUMB_MMA_BF16 1
__device__ __forceinline__ void mma_bf16(float* d, const uint32_t* a, const uint32_t* b) { emu::mma_m16n8k16_bf16(d, a, b); }
#endif

// The three bf16 parts of a finite f32 v, as bits: hi = bf16(v), mid = bf16(v - hi), lo = the rest
// (v - hi and (v - hi) - mid are exact in f32 and the last has at most 8 significant bits), so
// hi + mid + lo = v and a bf16 weight value times each part is exact in f32. Limits (paths (f)
// and (g)): a non-finite v, or one within half a bf16 ulp of FLT_MAX (hi rounds to inf), gives
// NaN parts; parts below bf16's normal range (|v| < ~2^-110) may lose bits.
__device__ __forceinline__ void bf16_parts(float v, uint32_t* p) {
  const float hi = round_bf16(v);
  const float r = __fsub_rn(v, hi);
  const float mid = round_bf16(r);
  const float lo = __fsub_rn(r, mid);
  p[0] = f32_bits(hi) >> 16, p[1] = f32_bits(mid) >> 16, p[2] = f32_bits(round_bf16(lo)) >> 16;
}

#ifdef PLUMB_MMA_BF16
// a * b per bf16 half (lower half first), rounded to nearest, subnormals kept (PTX: bf16 fma has
// no flush-to-zero form). fma with a -0 addend, so that a +0 product stays +0. moe_mma.cu scales
// decoded FP4 weights with it (exact products: powers of two times values of 2 bits).
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
#if defined(PLUMB_EMU)
  const uint32_t lo = f32_bits(round_bf16(bits_f32(a << 16) * bits_f32(b << 16))) >> 16;
  const uint32_t hi = f32_bits(round_bf16(bits_f32(a & 0xFFFF0000u) * bits_f32(b & 0xFFFF0000u))) & 0xFFFF0000u;
  return hi | lo;
#else
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
  return d;
#endif
}

// ldmatrix.sync.aligned.m8n8.x4.shared.b16: four 8x8 matrices of 16-bit elements from shared
// memory, lane l giving the address of row l % 8 of matrix l / 8 (16 contiguous, 16-byte-aligned
// bytes), and receiving in r[j] the two elements (row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1)
// of matrix j, lower column in the lower half: exactly the 32-bit words an mma fragment's loads
// would take from those rows, in one instruction instead of four (the tiles' operands, same bits).
__device__ __forceinline__ void ldmatrix_x4(uint32_t* r, const void* row) {
#if defined(PLUMB_EMU)
  emu::ldmatrix_x4(r, row);
#else
  const auto a = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
#endif
}
#endif

}  // namespace plumb::gpu::k
