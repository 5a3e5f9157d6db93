#pragma once
// What the grouped routed-expert kernels share (kernel-only header: moe_grouped.cu's SIMT kernels
// and moe_mma.cu's tensor-core ones): which routing ids name an expert, and the SwiGLU epilogue
// that stores the same h from the same two sums.
#include <cstdint>

#include "plumb/backend/gpu/gpu_compat.h"
#include "plumb/backend/gpu/gpu_numerics.h"
#include "plumb/backend/gpu/kernels/moe_grouped.h"

namespace plumb::gpu::k {

// A routing id the kernels compute (ids outside [0, E) are skipped, as the CPU skips them).
__device__ __forceinline__ bool live_expert(int32_t e, int64_t E) { return e >= 0 && e < E; }

// h of slot s from its gate sum gt (w1 . x) and up sum u (w3 . x), as the CPU's swiglu():
// linear()'s output rounding, std::min(g, L) and std::clamp(u, -L, L), silu (rounded under
// silu_bf16), times the routing weight unless weight_after, rounded under round_bf16.
__device__ __forceinline__ float grouped_swiglu(const GroupedMoeArgs& a, int64_t s, float gt, float u) {
  if (a.round_bf16) gt = round_bf16(gt), u = round_bf16(u);
  if (a.limit > 0.f) {
    gt = a.limit < gt ? a.limit : gt;
    u = u < -a.limit ? -a.limit : (a.limit < u ? a.limit : u);
  }
  float silu = __fdiv_rn(gt, __fadd_rn(1.0f, exp_cr(-gt)));
  if (a.silu_bf16) silu = round_bf16(silu);
  float v = __fmul_rn(silu, u);
  if (!a.weight_after) v = __fmul_rn(a.weights[s], v);
  return a.round_bf16 ? round_bf16(v) : v;
}

}  // namespace plumb::gpu::k
