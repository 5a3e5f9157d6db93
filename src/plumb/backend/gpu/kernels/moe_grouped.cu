// Routed experts for few tokens (decode) with the routing left on the device: every (token, k)
// slot is a grid row, whose block reads its expert id from the routing tensor and the expert's
// weights from a device-resident table, so a layer's experts cost three launches and no host
// round trip. Up: h = swiglu(w1 x, w3 x) (one warp per kUpRows rows of w1 and w3); down: ys = w2 h
// (one warp per kDownRows rows of w2); combine: each token's slots summed in the CPU's order (expert id, then k),
// plus the shared expert. Memory-bound like the GEMV (kernels/linear_gemv.cu): each selected
// expert's bytes are read once per slot, coalesced, decoded in registers. Same function as
// GpuBackend::moe's per-expert path; only the dot products' order differs (the fast order).
#include "plumb/backend/gpu/gpu_numerics.h"
#include "plumb/backend/gpu/kernels/elementwise.h"
#include "plumb/backend/gpu/kernels/linear_common.h"
#include "plumb/backend/gpu/kernels/moe_grouped.h"

namespace plumb::gpu::k {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarp;

// Shared-memory index of vector element c: 4 floats of padding per 16 so that the lanes' float4
// reads of 16-element segments fall into distinct banks (as the GEMV pads).
__device__ __forceinline__ int64_t padded(int64_t c) { return c + (c >> 4) * 4; }

// Floats of shared memory a staged vector of n elements takes: whole 16-element segments, padded.
inline int64_t staged_floats(int64_t n) {
  const int64_t c16 = (n + 15) / 16 * 16;
  return c16 + c16 / 4;
}

// Stages v[0, n) in shared memory (padded), zeros up to the next multiple of 16 so that a partial
// last segment multiplies zeros (never stale shared memory, which could hold a NaN); the caller
// synchronizes.
__device__ void stage(float* vs, const float* v, int64_t n) {
  const int64_t c16 = (n + 15) / 16 * 16;
  for (int64_t i = threadIdx.x; i < c16; i += blockDim.x) vs[padded(i)] = i < n ? v[i] : 0.f;
}

// One warp's dot products of rows r0 .. r0 + R - 1 of each of the NM weights with the staged
// vector (n elements), fast order. All rows' weights of a segment are loaded before any product,
// so that NM * R loads are in flight per lane; rows at or past `rows` give 0. Each row's sum runs
// in the same order as a one-row loop would (lane-strided segments, then a warp sum).
template <WFormat F, int NM, int R>
__device__ void row_dots(const WeightRef (&w)[NM], int64_t r0, int64_t rows, const float* vs, int64_t n, bool vec,
                         bool round_w, int lane, float (&out)[NM][R]) {
  float acc[NM][R];
#pragma unroll
  for (int m = 0; m < NM; ++m)
#pragma unroll
    for (int j = 0; j < R; ++j) acc[m][j] = 0.f;
  for (int64_t c0 = static_cast<int64_t>(lane) * 16; c0 < n; c0 += kWarp * 16) {
    float wv[NM][R][16];
#pragma unroll
    for (int m = 0; m < NM; ++m)
#pragma unroll
      for (int j = 0; j < R; ++j) {
        const int64_t r = r0 + j;
        if (r >= rows) {
#pragma unroll
          for (int e = 0; e < 16; ++e) wv[m][j][e] = 0.f;
        } else if (vec && c0 + 16 <= n) {
          wload16<F>(w[m], r, c0, wv[m][j]);
        } else {
#pragma unroll
          for (int e = 0; e < 16; ++e) wv[m][j][e] = c0 + e < n ? wload<F>(w[m], r, c0 + e) : 0.f;
        }
      }
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float4 x = *reinterpret_cast<const float4*>(&vs[padded(c0) + 4 * q]);
#pragma unroll
      for (int m = 0; m < NM; ++m)
#pragma unroll
        for (int j = 0; j < R; ++j) {
          const float* wq = wv[m][j] + 4 * q;
          const float a0 = round_w ? round_bf16(wq[0]) : wq[0], a1 = round_w ? round_bf16(wq[1]) : wq[1];
          const float a2 = round_w ? round_bf16(wq[2]) : wq[2], a3 = round_w ? round_bf16(wq[3]) : wq[3];
          acc[m][j] = fmaf(a3, x.w, fmaf(a2, x.z, fmaf(a1, x.y, fmaf(a0, x.x, acc[m][j]))));
        }
    }
  }
#pragma unroll
  for (int m = 0; m < NM; ++m)
#pragma unroll
    for (int j = 0; j < R; ++j) out[m][j] = warp_sum(acc[m][j]);
}

__device__ __forceinline__ bool live_expert(int32_t e, int64_t E) { return e >= 0 && e < E; }

// Rows of w1 and w3 per warp in the up kernel, rows of w2 per warp in the down kernel.
constexpr int kUpRows = 2, kDownRows = 4;

template <WFormat F>
__global__ void __launch_bounds__(kThreads) up_kernel(GroupedMoeArgs a) {
  extern __shared__ __align__(16) float xs[];
  const int64_t s = blockIdx.y, n = s / a.K;
  const int64_t r0 = (static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / kWarp) * kUpRows;
  const int lane = threadIdx.x % kWarp;
  const int32_t e = a.experts[s];
  if (!live_expert(e, a.E)) {  // skipped by the combine, as the CPU skips ids outside [0, E)
    if (lane < kUpRows && r0 + lane < a.I) a.h[s * a.I + r0 + lane] = 0.f;
    return;
  }
  stage(xs, a.x + n * a.D, a.D);
  __syncthreads();
  if (r0 >= a.I) return;
  const WeightRef w[2] = {a.table[3 * e], a.table[3 * e + 1]};
  float gu[2][kUpRows];
  row_dots<F, 2, kUpRows>(w, r0, a.I, xs, a.D, a.vec_up, a.round_w, lane, gu);
  if (lane != 0) return;
#pragma unroll
  for (int j = 0; j < kUpRows; ++j) {
    const int64_t r = r0 + j;
    if (r >= a.I) break;
    float g = gu[0][j], u = gu[1][j];
    if (a.round_bf16) g = round_bf16(g), u = round_bf16(u);  // linear()'s output rounding
    if (a.limit > 0.f) {                                        // std::min(g, L), std::clamp(u, -L, L)
      g = a.limit < g ? a.limit : g;
      u = u < -a.limit ? -a.limit : (a.limit < u ? a.limit : u);
    }
    float silu = __fdiv_rn(g, __fadd_rn(1.0f, exp_cr(-g)));
    if (a.silu_bf16) silu = round_bf16(silu);
    float v = __fmul_rn(silu, u);
    if (!a.weight_after) v = __fmul_rn(a.weights[s], v);
    a.h[s * a.I + r] = a.round_bf16 ? round_bf16(v) : v;
  }
}

template <WFormat F>
__global__ void __launch_bounds__(kThreads) down_kernel(GroupedMoeArgs a) {
  extern __shared__ __align__(16) float hs[];
  const int64_t s = blockIdx.y;
  const int64_t d0 = (static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / kWarp) * kDownRows;
  const int lane = threadIdx.x % kWarp;
  const int32_t e = a.experts[s];
  if (!live_expert(e, a.E)) return;
  stage(hs, a.h + s * a.I, a.I);
  __syncthreads();
  if (d0 >= a.D) return;
  const WeightRef w[1] = {a.table[3 * e + 2]};
  float v[1][kDownRows];
  row_dots<F, 1, kDownRows>(w, d0, a.D, hs, a.I, a.vec_down, a.round_w, lane, v);
  if (lane != 0) return;
#pragma unroll
  for (int j = 0; j < kDownRows; ++j)
    if (d0 + j < a.D) a.ys[s * a.D + d0 + j] = a.round_bf16 ? round_bf16(v[0][j]) : v[0][j];
}

// y[n] = bf16?(acc + shared[n]), acc the token's slots in (expert id, k) order from zero: the CPU
// loops over experts in id order and, within one, over (token, k) ascending.
__global__ void combine_kernel(GroupedMoeArgs a, const float* shared, float* y) {
  const int64_t total = a.N * a.D;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / a.D, d = i % a.D;
    const int32_t* ex = a.experts + n * a.K;
    float acc = 0.f;
    int32_t last = -1;  // the expert id added last; next: the smallest id above it, all its k in order
    for (int64_t done = 0; done < a.K;) {
      int32_t next = INT32_MAX;
      for (int64_t k = 0; k < a.K; ++k)
        if (ex[k] > last && ex[k] < next) next = ex[k];
      if (next == INT32_MAX) break;
      for (int64_t k = 0; k < a.K; ++k) {
        if (ex[k] != next) continue;
        ++done;
        if (!live_expert(next, a.E)) continue;
        const int64_t s = n * a.K + k;
        const float t = a.weight_after ? __fmul_rn(a.ys[s * a.D + d], a.weights[s]) : a.ys[s * a.D + d];
        acc = a.accumulate_bf16 ? round_bf16(__fadd_rn(acc, round_bf16(t))) : __fadd_rn(acc, t);
      }
      last = next;
    }
    const float v = __fadd_rn(acc, shared[i]);
    y[i] = a.round_bf16 ? round_bf16(v) : v;
  }
}

}  // namespace

gpuError_t grouped_moe_experts(const GroupedMoeArgs& a, gpuStream_t s) {
  const int64_t S = a.N * a.K;
  if (S <= 0 || a.D <= 0 || a.I <= 0) return gpuGetLastError();
  const std::size_t up_smem = static_cast<std::size_t>(staged_floats(a.D)) * sizeof(float);
  const std::size_t down_smem = static_cast<std::size_t>(staged_floats(a.I)) * sizeof(float);
  const int64_t up_rows = kWarps * kUpRows, down_rows = kWarps * kDownRows;  // per block
  const dim3 up(static_cast<unsigned>((a.I + up_rows - 1) / up_rows), static_cast<unsigned>(S));
  const dim3 down(static_cast<unsigned>((a.D + down_rows - 1) / down_rows), static_cast<unsigned>(S));
  GroupedMoeArgs b = a;
  b.vec_up = vec16_ok(a.format, a.D);
  b.vec_down = vec16_ok(a.format, a.I);
  return dispatch_format(a.format, [&]<WFormat F>() {
    up_kernel<F><<<up, kThreads, up_smem, s>>>(b);
    const gpuError_t e = gpuGetLastError();
    if (e != gpuSuccess) return e;
    if (a.quant_h) {
      const gpuError_t q = quant_blocks(a.h, a.h, S, a.I, a.I, 128, false, s);
      if (q != gpuSuccess) return q;
    }
    down_kernel<F><<<down, kThreads, down_smem, s>>>(b);
    return gpuGetLastError();
  });
}

gpuError_t grouped_moe_combine(const GroupedMoeArgs& a, const float* shared, float* y, gpuStream_t s) {
  const int64_t total = a.N * a.D;
  if (total > 0) {
    const int64_t b = (total + kThreads - 1) / kThreads;
    combine_kernel<<<static_cast<unsigned>(b < 65536 ? b : 65536), kThreads, 0, s>>>(a, shared, y);
  }
  return gpuGetLastError();
}

}  // namespace plumb::gpu::k
