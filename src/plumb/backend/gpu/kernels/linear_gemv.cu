// linear() path (a): GEMV for few rows of x (decode). Memory-bound: the floor is weight bytes /
// HBM bandwidth (e.g. a 7168 x 4096 FP8 weight, 29 MB, is ~6 us at 4.8 TB/s on an H200). Each
// weight byte is read once, coalesced, with 16-byte loads (8-byte for FP4) where K keeps rows
// aligned: one warp per weight row (up to 4 rows per warp so each x value read from shared memory
// feeds 4 products), lanes stride over K, FP8/FP4 decoded in registers with the segment's scale.
// x rows (up to 8 per launch; more rows loop) are staged in shared memory in chunks (chunk_for),
// padded 4 floats per 16 so the lanes' 16-byte reads hit distinct banks. Expected: close to
// bandwidth (~70-85%) for N <= 4 on large weights; for N = 8 the shared-memory reads of x start
// to cost as much as the weight stream. Small weights (few blocks) underfill the device: rows per
// warp then drop to 1 (no split-K), and for one or two x rows each lane then keeps 4 segments of
// its row in flight instead (measured: 1 row per warp with one load in flight reached ~20% of
// the bandwidth on the H200, docs/PERF.md v3).
#include "plumb/backend/gpu/kernels/linear.h"
#include "plumb/backend/gpu/kernels/linear_common.h"

namespace plumb::gpu::k {
namespace {

constexpr int kThreads = 256;            // 8 warps of 32, 4 wavefronts of 64
constexpr int kWarps = kThreads / kWarp;
constexpr int kMaxRpw = 4;               // weight rows per warp
constexpr int kMaxN = 8;                 // x rows per launch
constexpr int kSeg = 16;                 // weight elements a lane loads at once

// x columns staged per step: long chunks for one or two x rows (fewer block barriers, each of
// which drains the weight stream), 1024 for more (shared memory). A multiple of kSeg * kWarp * U.
template <int NB>
constexpr int chunk_for() { return NB <= 2 ? 4096 : 1024; }
// Weight segments a lane keeps in flight per row: 4 rows per warp, or 4 segments of one row.
template <int NB, int RPW>
constexpr int unroll_for() { return RPW == 1 && NB <= 2 ? 4 : 1; }
static_assert(chunk_for<8>() % (kSeg * kWarp) == 0 && chunk_for<1>() % (kSeg * kWarp * 4) == 0,
              "a chunk is whole warp steps");

__device__ __forceinline__ int padded(int c) { return c + (c >> 4) * 4; }

// Each lane's segments run in increasing column order (lane * 16 + m * kWarp * 16), whatever
// the chunk and unroll, so a row's sum is the same for every launch shape of one NB.
template <WFormat F, int NB, int RPW>
__global__ void __launch_bounds__(kThreads) gemv_kernel(LinearArgs a, WeightRef w, bool vec_ok) {
  constexpr int C = chunk_for<NB>(), U = unroll_for<NB, RPW>(), kStep = kWarp * kSeg;
  __shared__ __align__(16) float xs[NB][C + C / 4];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t g = blockIdx.y, R = a.R, K = a.K;
  const int64_t r0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * RPW;  // first row in the group
  const float* xg = a.x + g * K;
  const int nrows = static_cast<int>(a.nrows);

  float acc[RPW][NB];
#pragma unroll
  for (int j = 0; j < RPW; ++j)
#pragma unroll
    for (int n = 0; n < NB; ++n) acc[j][n] = 0.f;

  for (int64_t k0 = 0; k0 < K; k0 += C) {
    __syncthreads();  // the previous chunk is no longer read
    for (int i = threadIdx.x; i < NB * C; i += kThreads) {
      const int n = i / C, c = i % C;
      xs[n][padded(c)] = (n < nrows && k0 + c < K) ? xg[n * a.ldx + k0 + c] : 0.f;
    }
    __syncthreads();
    for (int off = lane * kSeg; off < C; off += kStep * U) {
      if (k0 + off >= K) break;
      // All segments' weights first (independent loads in flight together), then x in float4 pieces.
      float wv[U][RPW][kSeg];
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int j = 0; j < RPW; ++j) {
          const int64_t c0 = k0 + off + u * kStep, r = r0 + j, row = g * R + r;
          if (r >= R || c0 >= K) {
#pragma unroll
            for (int e = 0; e < kSeg; ++e) wv[u][j][e] = 0.f;
          } else if (vec_ok && c0 + kSeg <= K) {
            wload16<F>(w, row, c0, wv[u][j]);
          } else {
#pragma unroll
            for (int e = 0; e < kSeg; ++e) wv[u][j][e] = c0 + e < K ? wload<F>(w, row, c0 + e) : 0.f;
          }
          if (a.round_w) {
#pragma unroll
            for (int e = 0; e < kSeg; ++e) wv[u][j][e] = round_bf16(wv[u][j][e]);
          }
        }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (k0 + off + u * kStep >= K) break;  // past the end: nothing added (as a shorter loop)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          float4 xv[NB];
#pragma unroll
          for (int n = 0; n < NB; ++n)
            xv[n] = *reinterpret_cast<const float4*>(&xs[n][padded(off + u * kStep) + 4 * q]);
#pragma unroll
          for (int j = 0; j < RPW; ++j)
#pragma unroll
            for (int n = 0; n < NB; ++n) {
              float t = acc[j][n];
              t = fmaf(wv[u][j][4 * q], xv[n].x, t);
              t = fmaf(wv[u][j][4 * q + 1], xv[n].y, t);
              t = fmaf(wv[u][j][4 * q + 2], xv[n].z, t);
              acc[j][n] = fmaf(wv[u][j][4 * q + 3], xv[n].w, t);
            }
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < RPW; ++j) {
    const int64_t r = r0 + j;
#pragma unroll
    for (int n = 0; n < NB; ++n) {
      const float v = warp_sum(acc[j][n]);
      if (lane == 0 && r < R && n < nrows) a.y[n * a.ldy + g * R + r] = a.round_bf16 ? round_bf16(v) : v;
    }
  }
}

template <WFormat F, int NB>
gpuError_t launch(const LinearArgs& a, const WeightRef& w, int rpw, gpuStream_t s) {
  const int64_t rows_per_block = static_cast<int64_t>(kWarps) * rpw;
  const dim3 grid(static_cast<unsigned>((a.R + rows_per_block - 1) / rows_per_block), static_cast<unsigned>(a.groups));
  if (rpw == kMaxRpw)
    gemv_kernel<F, NB, kMaxRpw><<<grid, kThreads, 0, s>>>(a, w, vec16_ok(F, a.K));
  else
    gemv_kernel<F, NB, 1><<<grid, kThreads, 0, s>>>(a, w, vec16_ok(F, a.K));
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
