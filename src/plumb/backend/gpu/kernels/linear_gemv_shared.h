#pragma once
// What linear_gemv.cu (gemv_kernel, any rows and format) and linear_gemv_row.cu (gemv_row_kernel,
// the 1-row FP8 form and its pairs) share: the block's shape, x staged quantized in shared memory,
// the split-K finish, and the host's plan of a launch. linear_gemv.cu's header comment says how
// a row is summed; both kernels sum it that way.
#include <cstdint>
#include <span>

#include "plumb/backend/gpu/kernels/act_quant.h"
#include "plumb/backend/gpu/kernels/linear.h"
#include "plumb/backend/gpu/kernels/linear_common.h"

namespace plumb::gpu::k::gemv {

constexpr int kThreads = 256;            // 8 warps of 32, 4 wavefronts of 64
constexpr int kWarps = kThreads / kWarp;
constexpr int kSeg = 16;                 // weight elements of one raw load
constexpr int kStep = kWarp * kSeg;      // columns a warp covers per step (512; 1024 on HIP)

// Shared memory for the quantized x of one launch (QX): row n at n * qx_row(K) floats, whole
// 128-blocks. At most kQxSmemMax bytes, else linear() quantizes by a separate launch (N = 1: K up
// to 24,576 on CUDA, 8,192 on HIP, where 2 blocks of 32 KB fill gfx90a's 64 KB of LDS).
#ifdef PLUMB_CUDA
constexpr int64_t kQxSmemMax = 96 * 1024;
#else
constexpr int64_t kQxSmemMax = 32 * 1024;
#endif
constexpr int64_t qx_row(int64_t K) { return quant_segments(K) * kQuantSeg; }
// Where float4 q (0..3) of the segment at column c0 (a multiple of 16) lies in its staged row:
// segment j at 16 j, its float4s swizzled by (j >> 1) & 3, so the 8 lanes of a quarter warp,
// which read segments j0 .. j0 + 7 (j0 a multiple of 8) at the same q, hit distinct banks
// (unswizzled, lanes 0, 2, 4 and 6 would share 4 banks).
__device__ __forceinline__ int qx_offset(int64_t c0, int q) {
  const int j = static_cast<int>(c0 >> 4);
  return 16 * j + 4 * (q ^ ((j >> 1) & 3));
}
// 4 x values of row xr at columns c0 + 4q .. c0 + 4q + 3 (c0 a multiple of 16).
template <bool QX>
__device__ __forceinline__ float4 xload4(const float* xr, int64_t c0, int q) {
  if constexpr (QX)
    return *reinterpret_cast<const float4*>(xr + qx_offset(c0, q));
  else
    return *reinterpret_cast<const float4*>(xr + c0 + 4 * q);
}
template <bool QX>
__device__ __forceinline__ float xload1(const float* xr, int64_t c) {
  if constexpr (QX)
    return xr[qx_offset(c & ~int64_t{15}, static_cast<int>((c >> 2) & 3)) + (c & 3)];
  else
    return xr[c];
}

// Stages the launch's x rows (group blockIdx.y's K columns) into xs, FP8 round trip applied: lane
// by lane one 16-column segment (act_quant.h), all threads of the block (the caller synchronizes).
// x4: x's rows and group columns 16-byte aligned (float4 loads).
__device__ __forceinline__ void stage_quant_x(const LinearArgs& a, bool x4, float* xs) {
  const int segs = static_cast<int>(quant_segments(a.K)), total = static_cast<int>(a.nrows) * segs;
  const int64_t row = qx_row(a.K);
  for (int u0 = 0; u0 < total; u0 += kThreads) {  // the same trip count in every thread (shuffles)
    const int u = u0 + static_cast<int>(threadIdx.x);
    const bool live = u < total;  // total and kThreads are multiples of 8: a 128-block's lanes agree
    const int n = live ? u / segs : 0, j = live ? u % segs : 0;
    float v[kQuantSeg];
    load_segment(a.x + n * a.ldx + blockIdx.y * a.K, live ? a.K : 0, j, x4, v);
    quant_segment_fp8(v);
    if (live) {
      float* p = xs + n * row;
#pragma unroll
      for (int q = 0; q < 4; ++q)
        *reinterpret_cast<float4*>(p + qx_offset(16 * static_cast<int64_t>(j), q)) =
            make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
    }
  }
}

// acc[j][n] += w[e] * x[n][e] for e = 0..3, in turn.
__device__ __forceinline__ float fma4(const float (&w)[4], float4 x, float acc) {
  acc = fmaf(w[0], x.x, acc);
  acc = fmaf(w[1], x.y, acc);
  acc = fmaf(w[2], x.z, acc);
  return fmaf(w[3], x.w, acc);
}

// Warp sums, the S partials of a row added in warp order (shared memory), outputs stored. Every
// thread of the block calls it once (a barrier when splits > 1).
template <int NB, int RPW>
__device__ __forceinline__ void finish(const LinearArgs& a, int64_t r0, int lane, int warp, int splits,
                                       float (&acc)[RPW][NB], float (&part)[kWarps][RPW * NB]) {
#pragma unroll
  for (int i = 0; i < RPW * NB; ++i) acc[i / NB][i % NB] = warp_sum(acc[i / NB][i % NB]);
  bool store = true;
  if (splits > 1) {
    if (lane == 0) {
#pragma unroll
      for (int i = 0; i < RPW * NB; ++i) part[warp][i] = acc[i / NB][i % NB];
    }
    __syncthreads();
    store = warp % splits == 0;
    if (store) {
#pragma unroll
      for (int i = 0; i < RPW * NB; ++i) {
        float v = part[warp][i];
        for (int t = 1; t < splits; ++t) v += part[warp + t][i];
        acc[i / NB][i % NB] = v;
      }
    }
  }
  if (store) {
#pragma unroll
    for (int i = 0; i < RPW * NB; ++i) {
      const int64_t r = r0 + i / NB;
      const int n = i % NB;
      if (lane == i % kWarp && r < a.R && n < a.nrows) {
        const float v = acc[i / NB][n];
        a.y[n * a.ldy + blockIdx.y * a.R + r] = a.round_bf16 ? round_bf16(v) : v;
      }
    }
  }
}

// A block's split-K partials in shared memory: the kernel's only static shared memory, which
// launch_gemv() counts against the 48 KB default.
template <int RPW, int NB>
using Partials = float[kWarps][RPW * NB];

// A launch's plan: rows a warp (4, or 1 if even the widest split leaves the device short) and
// warps a row (split-K).
struct Plan {
  int rpw, splits;
};

// What linear_gemv decides from a job's shape, pointers and the device.
struct Setup {
  Plan plan;
  bool vec_ok, x_ok;
};

// In linear_gemv.cu. setup_for: what linear_gemv decides for a job (its plan from the weight's
// shape and the device, never from N; 16-byte loads from the pointers' alignment).
Setup setup_for(const LinearArgs& a, const WeightRef& w, int64_t target_blocks);
#ifndef PLUMB_HIP
bool fp8_hw_decode();
#endif

// In linear_gemv_row.cu.
// Whether the row form can take a launch: FP8, one x row, whole segments, no bf16 weight
// rounding. linear_gemv gives it those whose plan has 4 rows a warp (every other 1-row launch goes
// to gemv_kernel); linear_gemvs' pairs also those of 1 row a warp (a row's order is the plan's
// splits', not its rows a warp: the same bits, fewer warps).
bool row_form(const LinearArgs& a, const WeightRef& w, bool vec_ok);
// The 1-row FP8 kernel on one job, or two alike (linear_gemvs): one launch.
gpuError_t launch_row_jobs(std::span<const GemvJob> jobs, std::span<const Setup> setups, gpuStream_t s);

}  // namespace plumb::gpu::k::gemv
