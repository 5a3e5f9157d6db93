// linear() path (a): GEMV for few rows of x (decode). Memory-bound: the floor is weight bytes /
// HBM bandwidth (e.g. a 7168 x 4096 FP8 weight, 29 MB, is ~6 us at 4.8 TB/s on an H200). Each
// weight byte is read once, coalesced, with 16-byte loads (8-byte for FP4) where K keeps rows
// aligned: one warp per weight row (up to 4 rows per warp so each x value read from shared memory
// feeds 4 products), lanes stride over K, FP8/FP4 decoded in registers with the segment's scale.
// x rows (up to 8 per launch; more rows loop) are staged in shared memory in chunks of kChunk
// columns, padded 4 floats per 16 so the lanes' 16-byte reads hit distinct banks. Expected: close
// to bandwidth (~70-85%) for N <= 4 on large weights; for N = 8 the shared-memory reads of x
// start to cost as much as the weight stream. Small weights (few blocks) underfill the device:
// rows per warp then drop to 1 (no split-K).
#include "plumb/backend/gpu/kernels/linear.h"
#include "plumb/backend/gpu/kernels/linear_common.h"

namespace plumb::gpu::k {
namespace {

constexpr int kThreads = 256;            // 8 warps of 32, 4 wavefronts of 64
constexpr int kWarps = kThreads / kWarp;
constexpr int kMaxRpw = 4;               // weight rows per warp
constexpr int kChunk = 1024;             // x columns staged per step (a multiple of 16 * kWarp)
constexpr int kPadded = kChunk + kChunk / 4;
constexpr int kMaxN = 8;                 // x rows per launch
static_assert(kChunk % (16 * kWarp) == 0, "a chunk is whole warp steps");

__device__ __forceinline__ int padded(int c) { return c + (c >> 4) * 4; }

template <WFormat F, int NB>
__global__ void __launch_bounds__(kThreads) gemv_kernel(LinearArgs a, WeightRef w, int rpw, bool vec_ok) {
  __shared__ __align__(16) float xs[NB][kPadded];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t g = blockIdx.y, R = a.R, K = a.K;
  const int64_t r0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * rpw;  // first row in the group
  const float* xg = a.x + g * K;
  const int nrows = static_cast<int>(a.nrows);

  float acc[kMaxRpw][NB];
#pragma unroll
  for (int j = 0; j < kMaxRpw; ++j)
#pragma unroll
    for (int n = 0; n < NB; ++n) acc[j][n] = 0.f;

  for (int64_t k0 = 0; k0 < K; k0 += kChunk) {
    __syncthreads();  // the previous chunk is no longer read
    for (int i = threadIdx.x; i < NB * kChunk; i += kThreads) {
      const int n = i / kChunk, c = i % kChunk;
      xs[n][padded(c)] = (n < nrows && k0 + c < K) ? xg[n * a.ldx + k0 + c] : 0.f;
    }
    __syncthreads();
    for (int off = lane * 16; off < kChunk; off += kWarp * 16) {
      const int64_t c0 = k0 + off;
      if (c0 >= K) break;
      // All rows' weights first (independent loads in flight together), then x in float4 pieces.
      float wv[kMaxRpw][16];
#pragma unroll
      for (int j = 0; j < kMaxRpw; ++j) {
        const int64_t r = r0 + j;
        const int64_t row = g * R + r;
        if (j >= rpw || r >= R) {
#pragma unroll
          for (int e = 0; e < 16; ++e) wv[j][e] = 0.f;
        } else if (vec_ok && c0 + 16 <= K) {
          wload16<F>(w, row, c0, wv[j]);
        } else {
#pragma unroll
          for (int e = 0; e < 16; ++e) wv[j][e] = c0 + e < K ? wload<F>(w, row, c0 + e) : 0.f;
        }
        if (a.round_w) {
#pragma unroll
          for (int e = 0; e < 16; ++e) wv[j][e] = round_bf16(wv[j][e]);
        }
      }
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        float4 xv[NB];
#pragma unroll
        for (int n = 0; n < NB; ++n) xv[n] = *reinterpret_cast<const float4*>(&xs[n][padded(off) + 4 * q]);
#pragma unroll
        for (int j = 0; j < kMaxRpw; ++j)
#pragma unroll
          for (int n = 0; n < NB; ++n) {
            float t = acc[j][n];
            t = fmaf(wv[j][4 * q], xv[n].x, t);
            t = fmaf(wv[j][4 * q + 1], xv[n].y, t);
            t = fmaf(wv[j][4 * q + 2], xv[n].z, t);
            acc[j][n] = fmaf(wv[j][4 * q + 3], xv[n].w, t);
          }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kMaxRpw; ++j) {
    if (j < rpw) {  // uniform over the warp: every lane takes part in the shuffles
      const int64_t r = r0 + j;
#pragma unroll
      for (int n = 0; n < NB; ++n) {
        const float v = warp_sum(acc[j][n]);
        if (lane == 0 && r < R && n < nrows) a.y[n * a.ldy + g * R + r] = a.round_bf16 ? round_bf16(v) : v;
      }
    }
  }
}

template <WFormat F, int NB>
gpuError_t launch(const LinearArgs& a, const WeightRef& w, int rpw, gpuStream_t s) {
  const int64_t rows_per_block = static_cast<int64_t>(kWarps) * rpw;
  const dim3 grid(static_cast<unsigned>((a.R + rows_per_block - 1) / rows_per_block), static_cast<unsigned>(a.groups));
  gemv_kernel<F, NB><<<grid, kThreads, 0, s>>>(a, w, rpw, vec16_ok(F, a.K));
  return gpuGetLastError();
}

}  // namespace

gpuError_t linear_gemv(const LinearArgs& a, const WeightRef& w, int64_t target_blocks, gpuStream_t s) {
  if (a.nrows <= 0 || a.R <= 0 || a.groups <= 0) return gpuGetLastError();
  // 4 rows per warp when that still gives the device enough blocks, else 1.
  const int64_t blocks4 = (a.R + kWarps * kMaxRpw - 1) / (kWarps * kMaxRpw) * a.groups;
  const int rpw = blocks4 >= target_blocks ? kMaxRpw : 1;
  for (int64_t n0 = 0; n0 < a.nrows; n0 += kMaxN) {  // forced GEMV on many rows: 8 rows a launch
    LinearArgs b = a;
    b.x = a.x + n0 * a.ldx;
    b.y = a.y + n0 * a.ldy;
    b.nrows = a.nrows - n0 < kMaxN ? a.nrows - n0 : kMaxN;
    const gpuError_t e = dispatch_format(w.format, [&]<WFormat F>() {
      if (b.nrows == 1) return launch<F, 1>(b, w, rpw, s);
      if (b.nrows == 2) return launch<F, 2>(b, w, rpw, s);
      if (b.nrows <= 4) return launch<F, 4>(b, w, rpw, s);
      return launch<F, 8>(b, w, rpw, s);
    });
    if (e != gpuSuccess) return e;
  }
  return gpuGetLastError();
}

}  // namespace plumb::gpu::k
