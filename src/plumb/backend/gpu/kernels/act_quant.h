#pragma once
// The FP8 activation round trip (act_fp8: one ue8m0 scale per 128-block, fp8_roundtrip per
// element, as quant_blocks / quant_kernel) done by a kernel's own block while it stages its input
// vector in shared memory, so the consumer needs no separate launch and no quantized copy
// (kernel-only header: the GEMV, linear_gemv.cu, and the grouped experts, moe_grouped.cu).
// A lane holds one 16-element segment of a vector; the 8 lanes of an aligned group of 8 hold one
// 128-block (segments 8b .. 8b + 7), so the block's amax is three xor shuffles within the group
// (kWarp is a multiple of 8: 32 or 64). Same values as quant_kernel: the amax is the max of |x|
// with NaN ignored (fmaxf, in any order: max is exact), zeros past the vector's end change
// nothing (the amax starts at 0), the scale is ue8m0_scale_for's, and fp8_roundtrip_inv is bitwise
// fp8_roundtrip (gpu_numerics.h).
#include <cstdint>

#include "plumb/backend/gpu/gpu_compat.h"
#include "plumb/backend/gpu/gpu_numerics.h"

namespace plumb::gpu::k {

constexpr int kQuantSeg = 16;  // elements of a lane's segment; 8 segments per 128-block

// Segments a vector of n elements is staged in: its whole 128-blocks, 8 segments each.
__host__ __device__ constexpr int64_t quant_segments(int64_t n) { return (n + 127) / 128 * 8; }

// Segment j of v[0, n) (zeros past n): four float4 loads when vec4 (v 16-byte aligned) and the
// segment is whole, else element by element.
__device__ __forceinline__ void load_segment(const float* v, int64_t n, int64_t j, bool vec4, float (&x)[kQuantSeg]) {
  const int64_t c0 = j * kQuantSeg;
  if (vec4 && c0 + kQuantSeg <= n) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float4 t = reinterpret_cast<const float4*>(v + c0)[q];
      x[4 * q] = t.x, x[4 * q + 1] = t.y, x[4 * q + 2] = t.z, x[4 * q + 3] = t.w;
    }
  } else {
#pragma unroll
    for (int e = 0; e < kQuantSeg; ++e) x[e] = c0 + e < n ? v[c0 + e] : 0.f;
  }
}

// The round trip of a lane's segment in place. Every lane of the warp calls it (xor shuffles);
// lanes 8g .. 8g + 7 hold the 8 segments of one 128-block (a lane with nothing to stage holds
// zeros, and its group's result is not stored).
__device__ __forceinline__ void quant_segment_fp8(float (&x)[kQuantSeg]) {
  float amax = 0.f;
#pragma unroll
  for (int e = 0; e < kQuantSeg; ++e) amax = fmaxf(amax, fabsf(x[e]));
  amax = fmaxf(amax, shfl_xor(amax, 1));
  amax = fmaxf(amax, shfl_xor(amax, 2));
  amax = fmaxf(amax, shfl_xor(amax, 4));
  const uint8_t code = ue8m0_scale_for(amax, kFp8Max, kFp8MinAmax);
  const float s = ue8m0_to_f32(code), inv = ue8m0_inverse(code);
#pragma unroll
  for (int e = 0; e < kQuantSeg; ++e) x[e] = fp8_roundtrip_inv(x[e], s, inv);
}

}  // namespace plumb::gpu::k
