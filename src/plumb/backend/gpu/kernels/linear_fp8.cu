// linear() path (d): FP8 e4m3 mma.sync on sm_89+ (see linear_fp8.h for the numerics).
// Tiles: 64 rows of x by 64 weight rows by 128 K (one scale block), 4 warps of 32x32, each warp
// 2 x 4 m16n8k32 MMAs per 32-wide K step. Expected (untuned, synchronous 16-byte tile loads, no
// double buffering): a few hundred TFLOP/s at most, well under wgmma's ceiling; what it buys now
// is reading 1-byte weights and activations through the tensor cores instead of decoding to bf16.
// Split K when the tiles alone are too few blocks for the device (decode: one row tile; wkv's 512
// rows were 8 blocks that each walked all 32 K blocks with synchronous loads, 52 us for 2 MB at 8
// or 32 rows; 13 us split 16 ways, PERF.md v15).
//
// Large tiles (v21, from kLM rows of x: prefill): 128 x rows by 128 weight rows a block, 8 warps
// of 64 x 32, the K blocks streamed through kStages shared-memory stages by cp.async, so that the
// next blocks' bytes are in flight while the tensor cores work (the small tile waits on DRAM, then
// on a barrier, every K block, and reads each byte of x for 64 weight rows only). Each output's
// sums are the small tile's: per K block its 4 MMAs (k = 0, 32, 64, 96) from zero, then
// total = fma(part, sx * sw, total), K blocks in order; so both give the same bits at the same
// splits (GpuOps.LinearFp8TensorCores compares them; PLUMB_GPU_FP8_TILES=small is the A/B).
#include "plumb/backend/gpu/kernels/linear_fp8.h"

#include <algorithm>

#include "plumb/backend/gpu/gpu_numerics.h"
#include "plumb/backend/gpu/kernels/cp_async.h"
#include "plumb/backend/gpu/kernels/launch.h"

namespace plumb::gpu::k {

#if defined(PLUMB_CUDA)
namespace {
// Per (row, 128-column block): scale from the block's amax, e4m3 codes of x / s. One warp per
// block; 128 / kWarp elements per lane.
__global__ void quant_kernel(const float* x, int64_t ldx, int64_t N, int64_t blocks, uint8_t* q, int64_t ldq,
                             float* sx) {
  pdl_begin();
  const int64_t wid = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (wid >= N * blocks) return;
  const int64_t n = wid / blocks, b = wid % blocks;
  constexpr int kPer = 128 / kWarp;
  float v[kPer];
  float amax = 0.f;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    v[i] = x[n * ldx + b * 128 + lane + i * kWarp];
    amax = fmaxf(amax, fabsf(v[i]));
  }
  amax = warp_max(amax);
  const float s = ue8m0_to_f32(ue8m0_scale_for(amax, kFp8Max, kFp8MinAmax));
#pragma unroll
  for (int i = 0; i < kPer; ++i) q[n * ldq + b * 128 + lane + i * kWarp] = f32_to_e4m3(clampf(v[i] / s, -kFp8Max, kFp8Max));
  if (lane == 0) sx[n * blocks + b] = s;
}

constexpr int kBM = 64, kBN = 64, kBK = 128, kThreads = 128;
static_assert(kBK == 128, "one K tile is exactly one 128-wide scale block");

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define PLUMB_FP8_MMA 1
// D (16x8 f32) += A (16x32 e4m3, row) * B (32x8 e4m3, col). Fragments (PTX ISA, 8-bit m16n8k32):
// g = lane / 4, t = lane % 4; a0: A[g][4t..4t+3], a1: A[g+8][4t..], a2: A[g][16+4t..],
// a3: A[g+8][16+4t..]; b0: B[4t..4t+3][g], b1: B[16+4t..][g]; d0,d1: D[g][2t, 2t+1],
// d2,d3: D[g+8][2t, 2t+1].
__device__ __forceinline__ void mma_e4m3(float* d, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#elif defined(PLUMB_EMU)
#define PLUMB_FP8_MMA 1
__device__ __forceinline__ void mma_e4m3(float* d, const uint32_t* a, const uint32_t* b) { emu::mma_m16n8k32_e4m3(d, a, b); }
#endif

// A warp's MI x 4 m16n8 accumulators, x rows n0 + 16 mi + g (+ 8) by weight rows r0 + 8 ni + 2 tg
// (+ 1): both tile sizes' warps, so that they promote and store alike.
template <int MI>
using WarpAcc = float[MI][4][4];

// The promotion after a K block: total += part * (x row's scale sx[row, xcol] times sw), fused
// (both tile sizes round alike whatever the compiler would contract); rows past nrows add 0.
template <int MI>
__device__ __forceinline__ void promote(const LinearArgs& a, const float* sx, int64_t xblocks, int64_t xcol, float sw,
                                        int64_t n0, int g, const WarpAcc<MI>& part, WarpAcc<MI>& total) {
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
    const int64_t na = n0 + mi * 16 + g, nb = na + 8;
    const float sa = na < a.nrows ? sx[na * xblocks + xcol] * sw : 0.f;
    const float sb = nb < a.nrows ? sx[nb * xblocks + xcol] * sw : 0.f;
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) total[mi][ni][e] = __fmaf_rn(part[mi][ni][e], e < 2 ? sa : sb, total[mi][ni][e]);
  }
}

// Every output of the warp's accumulators: y (bf16-rounded if asked) or, split, its split's
// partial sum; those past nrows or R are not written.
template <int MI>
__device__ __forceinline__ void store(const LinearArgs& a, int splits, int64_t split, float* partials, int64_t grp,
                                      int64_t n0, int64_t r0, int g, int tg, const WarpAcc<MI>& total) {
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t n = n0 + mi * 16 + g + (e >= 2 ? 8 : 0), r = r0 + ni * 8 + 2 * tg + (e & 1);
        if (n >= a.nrows || r >= a.R) continue;
        const float v = total[mi][ni][e];
        if (splits > 1)
          partials[split_part_index(a, split, n, grp * a.R + r)] = v;
        else
          a.y[n * a.ldy + grp * a.R + r] = a.round_bf16 ? round_bf16(v) : v;
      }
}

// grid (R / kBN, ceil(N / kBM), groups * splits): split s of a group sums K blocks
// [s * KB / splits, (s + 1) * KB / splits) and writes its unrounded total to partials[s] when
// splits > 1 (linear_split_sum adds them), else y.
__global__ void __launch_bounds__(kThreads) fp8_kernel(LinearArgs a, const uint8_t* q, int64_t ldq, const float* sx,
                                                      WeightRef w, int splits, float* partials) {
  pdl_begin();
#ifdef PLUMB_FP8_MMA
  constexpr int kLd = kBK + 16;  // 144-byte rows: fragment loads of a warp hit 32 distinct banks
  __shared__ __align__(16) uint8_t xs[kBM][kLd];
  __shared__ __align__(16) uint8_t ws[kBN][kLd];
  const int t = threadIdx.x, warp = t / 32, lane = t % 32, g = lane / 4, tg = lane % 4;
  const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;  // this warp's 32x32 corner of the tile
  const int64_t grp = blockIdx.z / splits, split = blockIdx.z % splits, R = a.R, K = a.K, KB = K / kBK;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kBM, r0 = static_cast<int64_t>(blockIdx.x) * kBN;
  const int64_t xblocks = a.groups * KB;  // scale blocks per x row
  float total[2][4][4] = {};
  for (int64_t kb = split * KB / splits; kb < (split + 1) * KB / splits; ++kb) {
    __syncthreads();
    // 64 rows x 128 bytes per operand = 512 16-byte chunks: 4 per thread per operand.
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int c = t + i * kThreads, row = c / 8, col = (c % 8) * 16;
      const int64_t n = n0 + row, r = r0 + row;
      uint4 xv = make_uint4(0, 0, 0, 0), wv = make_uint4(0, 0, 0, 0);
      if (n < a.nrows) xv = *reinterpret_cast<const uint4*>(q + n * ldq + grp * K + kb * kBK + col);
      if (r < R) wv = *reinterpret_cast<const uint4*>(w.data + (grp * R + r) * w.cols + kb * kBK + col);
      *reinterpret_cast<uint4*>(&xs[row][col]) = xv;
      *reinterpret_cast<uint4*>(&ws[row][col]) = wv;
    }
    __syncthreads();
    float part[2][4][4] = {};
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 32) {
      uint32_t af[2][4], bf[4][2];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        const int m = wm + mi * 16 + g;
        af[mi][0] = *reinterpret_cast<const uint32_t*>(&xs[m][kk + 4 * tg]);
        af[mi][1] = *reinterpret_cast<const uint32_t*>(&xs[m + 8][kk + 4 * tg]);
        af[mi][2] = *reinterpret_cast<const uint32_t*>(&xs[m][kk + 16 + 4 * tg]);
        af[mi][3] = *reinterpret_cast<const uint32_t*>(&xs[m + 8][kk + 16 + 4 * tg]);
      }
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const int nn = wn + ni * 8 + g;
        bf[ni][0] = *reinterpret_cast<const uint32_t*>(&ws[nn][kk + 4 * tg]);
        bf[ni][1] = *reinterpret_cast<const uint32_t*>(&ws[nn][kk + 16 + 4 * tg]);
      }
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) mma_e4m3(part[mi][ni], af[mi], bf[ni]);
    }
    // Promote: total += part * sx[row, block] * sw[block]; the weight tile lies in one 128-row
    // scale block (r0 is a multiple of 64 and R of 64, so 64 rows never straddle two).
    const float sw = weight_scale(w, grp * R + r0, kb * kBK);
    promote<2>(a, sx, xblocks, grp * KB + kb, sw, n0 + wm, g, part, total);
  }
  store<2>(a, splits, split, partials, grp, n0 + wm, r0 + wn, g, tg, total);
#endif
}

// ---- large tiles
constexpr int kLM = 128, kLN = 128, kLThreads = 256, kStages = 3;
constexpr int kLLd = kBK + 16;                              // as the small tile's rows
constexpr int kLStageBytes = (kLM + kLN) * kLLd;            // x rows, then weight rows
constexpr int kLSmem = kStages * kLStageBytes;              // 110,592 bytes
static_assert((kLM + kLN) * (kBK / 16) % kLThreads == 0, "whole 16-byte chunks a thread");

// grid (ceil(R / kLN), ceil(N / kLM), groups * splits), as fp8_kernel's with the large tile:
// warp (wm, wn) = (warp / 4, warp % 4) holds x rows 64 wm .. + 63 by weight rows 32 wn .. + 31
// (4 x 4 m16n8 accumulators). Stage kb % kStages holds K block kb; one commit group a K block
// (empty past the split's end, so that the wait counts stay uniform).
__global__ void __launch_bounds__(kLThreads, 1) fp8_large_kernel(LinearArgs a, const uint8_t* q, int64_t ldq,
                                                                const float* sx, WeightRef w, int splits,
                                                                float* partials) {
  pdl_begin();
#ifdef PLUMB_FP8_MMA
  PLUMB_DYNAMIC_SHARED(uint8_t, smem);
  const int t = threadIdx.x, warp = t / 32, lane = t % 32, g = lane / 4, tg = lane % 4;
  const int wm = (warp / 4) * 64, wn = (warp % 4) * 32;
  const int64_t grp = blockIdx.z / splits, split = blockIdx.z % splits, R = a.R, K = a.K, KB = K / kBK;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kLM, r0 = static_cast<int64_t>(blockIdx.x) * kLN;
  const int64_t xblocks = a.groups * KB, kb0 = split * KB / splits, kb1 = (split + 1) * KB / splits;
  const auto issue = [&](int64_t kb) {  // K block kb's x and weight rows into its stage
    uint8_t* st = smem + (kb % kStages) * kLStageBytes;
#pragma unroll 1  // (unrolled, its source addresses pushed the accumulators into spills)
    for (int i = 0; i < (kLM + kLN) * (kBK / 16) / kLThreads; ++i) {
      const int c = t + i * kLThreads, row = c / (kBK / 16), col = (c % (kBK / 16)) * 16;
      const bool is_x = row < kLM;
      const int64_t at = is_x ? n0 + row : r0 + (row - kLM);
      const bool valid = at < (is_x ? a.nrows : R);
      const int64_t v = valid ? at : 0;
      const uint8_t* src = is_x ? q + v * ldq + grp * K + kb * kBK + col : w.data + (grp * R + v) * w.cols + kb * kBK + col;
      cp_async16(st + row * kLLd + col, src, valid);
    }
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (kb0 + s < kb1) issue(kb0 + s);
    cp_async_commit();
  }
  float total[4][4][4] = {};
  for (int64_t kb = kb0; kb < kb1; ++kb) {
    cp_async_wait<kStages - 2>();  // this thread's copies of block kb have landed
    __syncthreads();               // everyone's; and stage (kb - 1) % kStages is free again
    if (kb + kStages - 1 < kb1) issue(kb + kStages - 1);
    cp_async_commit();
    const uint8_t* xs = smem + (kb % kStages) * kLStageBytes;
    const uint8_t* ws = xs + kLM * kLLd;
    float part[4][4][4] = {};
#pragma unroll 1  // (one k step's fragments live at a time: unrolled, ptxas hoisted them all and spilled)
    for (int kk = 0; kk < kBK; kk += 32) {
      uint32_t af[4][4], bf[4][2];
#pragma unroll
      for (int mi = 0; mi < 4; ++mi) {
        const uint8_t* ra = xs + (wm + mi * 16 + g) * kLLd + kk + 4 * tg;
        af[mi][0] = *reinterpret_cast<const uint32_t*>(ra);
        af[mi][1] = *reinterpret_cast<const uint32_t*>(ra + 8 * kLLd);
        af[mi][2] = *reinterpret_cast<const uint32_t*>(ra + 16);
        af[mi][3] = *reinterpret_cast<const uint32_t*>(ra + 8 * kLLd + 16);
      }
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const uint8_t* rb = ws + (wn + ni * 8 + g) * kLLd + kk + 4 * tg;
        bf[ni][0] = *reinterpret_cast<const uint32_t*>(rb);
        bf[ni][1] = *reinterpret_cast<const uint32_t*>(rb + 16);
      }
#pragma unroll
      for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) mma_e4m3(part[mi][ni], af[mi], bf[ni]);
    }
    // The warp's 32 weight rows lie in one 128-row scale block (r0 and wn are multiples of 32);
    // R % 64 == 0, so they are all past R or none is (then any valid row's scale: part is 0).
    const float sw = weight_scale(w, grp * R + (r0 + wn < R ? r0 + wn : 0), kb * kBK);
    promote<4>(a, sx, xblocks, grp * KB + kb, sw, n0 + wm, g, part, total);
  }
  store<4>(a, splits, split, partials, grp, n0 + wm, r0 + wn, g, tg, total);
#endif
}

}  // namespace

bool fp8_mma_built() { return true; }

Fp8Tiles fp8_mma_tiles(const LinearArgs& a, bool large_allowed) {
  return large_allowed && a.nrows >= kLM ? Fp8Tiles::Large : Fp8Tiles::Small;
}

int fp8_mma_splits(const LinearArgs& a, Fp8Tiles tiles, int multiprocessors) {
  const bool large = tiles == Fp8Tiles::Large;
  const int64_t bm = large ? kLM : kBM, bn = large ? kLN : kBN;
  const int64_t blocks = (a.R + bn - 1) / bn * ((a.nrows + bm - 1) / bm) * a.groups;
  // (a large tile's block is one per multiprocessor, a small one's two)
  return split_k_ways(blocks, (large ? 1 : 2) * static_cast<int64_t>(multiprocessors),
                      std::min(a.K / kBK / 2, a.K / 256));
}

gpuError_t act_quant_fp8(const float* x, int64_t ldx, int64_t N, int64_t cols, uint8_t* q, int64_t ldq, float* sx,
                         gpuStream_t s) {
  const int64_t warps = N * (cols / 128);
  if (warps <= 0) return gpuGetLastError();
  return launch(quant_kernel, static_cast<unsigned>((warps * kWarp + 255) / 256), 256, 0, s, x, ldx, N, cols / 128, q,
                ldq, sx);
}

gpuError_t linear_fp8_mma(const LinearArgs& a, const uint8_t* q, int64_t ldq, const float* sx, const WeightRef& w,
                          Fp8Tiles tiles, int splits, float* part, gpuStream_t s) {
  if (a.nrows == 0) return gpuGetLastError();
  if (splits < 1 || (splits > 1 && !part) || splits > a.K / kBK) return cudaErrorInvalidValue;
  gpuError_t e = gpuSuccess;
  if (tiles == Fp8Tiles::Large) {
    // (past the 48 KB default: opt in, on the current device)
    e = cudaFuncSetAttribute(fp8_large_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kLSmem);
    if (e != gpuSuccess) return e;
    const dim3 grid(static_cast<unsigned>((a.R + kLN - 1) / kLN), static_cast<unsigned>((a.nrows + kLM - 1) / kLM),
                    static_cast<unsigned>(a.groups * splits));
    e = launch(fp8_large_kernel, grid, kLThreads, kLSmem, s, a, q, ldq, sx, w, splits, part);
  } else {
    const dim3 grid(static_cast<unsigned>((a.R + kBN - 1) / kBN), static_cast<unsigned>((a.nrows + kBM - 1) / kBM),
                    static_cast<unsigned>(a.groups * splits));
    e = launch(fp8_kernel, grid, kThreads, 0, s, a, q, ldq, sx, w, splits, part);
  }
  return e != gpuSuccess || splits == 1 ? e : linear_split_sum(a, splits, part, s);
}

#else  // HIP: no FP8 matrix instructions on gfx90a

bool fp8_mma_built() { return false; }
gpuError_t act_quant_fp8(const float*, int64_t, int64_t, int64_t, uint8_t*, int64_t, float*, gpuStream_t) {
  return gpuErrorNotSupported;
}
Fp8Tiles fp8_mma_tiles(const LinearArgs&, bool) { return Fp8Tiles::Small; }
int fp8_mma_splits(const LinearArgs&, Fp8Tiles, int) { return 1; }
gpuError_t linear_fp8_mma(const LinearArgs&, const uint8_t*, int64_t, const float*, const WeightRef&, Fp8Tiles, int,
                          float*, gpuStream_t) {
  return gpuErrorNotSupported;
}
#endif

}  // namespace plumb::gpu::k
