// linear() paths (b) and (c): tiled GEMMs for many rows of x (prefill), grid (R tiles, N tiles,
// groups). Weight tiles are decoded from the checkpoint format into shared memory per tile (never
// a full decoded copy in device memory), so each weight element is decoded ceil(N / 64) times.
//   (b) linear_simt: exact f32 products, f32 accumulation; 64x64x16 tiles, 256 threads, 4x4
//       outputs per thread. Expected ~15-25% of f32 SIMT peak (no double buffering, scalar
//       loads): this is the `reference` profile, valued for exactness, not speed.
//   (c) linear_mma: bf16 operands (x rounded to nearest even; the weight decoded to bf16, exact
//       for BF16, FP8 with ue8m0 scales and FP4; F32 weights and FP8 with f32 scales are rounded,
//       so gpu_linear.cpp sends those to the SIMT path unless forced), f32 accumulation.
//       CUDA sm_80+: mma.sync m16n8k16 bf16 (64x64x32 tiles, 4 warps of 32x32). Expected
//       ~20-35% of bf16 tensor peak: synchronous tile loads and per-element decode bound it.
//       HIP gfx90a: the MFMA builtin is not used (yet); a SIMT loop over the same bf16 tiles with
//       the same numerics (exact bf16 x bf16 products, f32 accumulation) runs instead.
#include "plumb/backend/cuda/kernels/linear.h"
#include "plumb/backend/cuda/kernels/linear_common.h"

namespace plumb::gpu::k {
namespace {

// ---- (b) SIMT f32

constexpr int kSBM = 64, kSBN = 64, kSBK = 16, kSThreads = 256;

template <WFormat F>
__global__ void __launch_bounds__(kSThreads) simt_kernel(LinearArgs a, WeightRef w) {
  __shared__ float xs[kSBK][kSBM + 1];  // k-major; +1: the transposing stores hit distinct banks
  __shared__ float ws[kSBK][kSBN + 1];
  const int t = threadIdx.x, tr = t / 16, tc = t % 16;
  const int64_t g = blockIdx.z, R = a.R, K = a.K;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kSBM, r0 = static_cast<int64_t>(blockIdx.x) * kSBN;
  const float* xg = a.x + g * K;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < K; k0 += kSBK) {
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kSBM * kSBK / kSThreads; ++i) {  // consecutive threads: consecutive k
      const int idx = t + i * kSThreads, m = idx / kSBK, kk = idx % kSBK;
      const int64_t n = n0 + m, k = k0 + kk;
      xs[kk][m] = (n < a.nrows && k < K) ? xg[n * a.ldx + k] : 0.f;
      const int64_t r = r0 + m;
      const float wv = (r < R && k < K) ? wload<F>(w, g * R + r, k) : 0.f;
      ws[kk][m] = a.round_w ? round_bf16(wv) : wv;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kSBK; ++kk) {
      float xv[4], wv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) xv[i] = xs[kk][tr + 16 * i], wv[i] = ws[kk][tc + 16 * i];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(xv[i], wv[j], acc[i][j]);
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t n = n0 + tr + 16 * i, r = r0 + tc + 16 * j;
      if (n < a.nrows && r < R) a.y[n * a.ldy + g * R + r] = a.round_bf16 ? round_bf16(acc[i][j]) : acc[i][j];
    }
}

// ---- (c) bf16 operands

constexpr int kMBM = 64, kMBN = 64, kMBK = 32, kMThreads = 128;
constexpr int kMLd = kMBK + 8;  // bf16 row stride 80 bytes: fragment loads hit 32 distinct banks

__device__ __forceinline__ uint16_t bf16_bits(float v) { return static_cast<uint16_t>(f32_bits(round_bf16(v)) >> 16); }

#if defined(PLUMB_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define PLUMB_MMA_BF16 1
// D = A (16x16, row) * B (16x8, col) + D, bf16 inputs, f32 accumulators (PTX ISA fragment layout
// for m16n8k16: groupID = lane / 4, tig = lane % 4; A regs {a0a1, a2a3, a4a5, a6a7} hold
// (g, 2tig..+1), (g+8, 2tig..+1), (g, 2tig+8..+9), (g+8, 2tig+8..+9); B regs hold k = 2tig..+1 and
// 2tig+8..+9 of column g; C holds (g, 2tig..+1) and (g+8, 2tig..+1); lower half = lower index).
__device__ __forceinline__ void mma_bf16(float* d, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif

template <WFormat F>
__global__ void __launch_bounds__(kMThreads) mma_kernel(LinearArgs a, WeightRef w) {
  __shared__ __align__(16) uint16_t xs[kMBM][kMLd];  // bf16 bits, row = x row, k contiguous
  __shared__ __align__(16) uint16_t ws[kMBN][kMLd];  // bf16 bits, row = weight row, k contiguous
  const int t = threadIdx.x;
  const int64_t g = blockIdx.z, R = a.R, K = a.K;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kMBM, r0 = static_cast<int64_t>(blockIdx.x) * kMBN;
  const float* xg = a.x + g * K;
#ifdef PLUMB_MMA_BF16
  const int lane = t % 32, warp = t / 32, gid = lane / 4, tig = lane % 4;
  const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;  // the warp's 32x32 corner of the tile
  float acc[2][4][4] = {};                               // [m16 tile][n8 tile][fragment]
#else
  const int tr = t / 16, tc = t % 16;  // SIMT: rows tr + 8i (i < 8), cols tc + 16j (j < 4)
  float acc[8][4] = {};
#endif
  for (int64_t k0 = 0; k0 < K; k0 += kMBK) {
    __syncthreads();
#pragma unroll 4
    for (int i = 0; i < kMBM * kMBK / kMThreads; ++i) {
      const int idx = t + i * kMThreads, m = idx / kMBK, kk = idx % kMBK;
      const int64_t n = n0 + m, r = r0 + m, k = k0 + kk;
      xs[m][kk] = bf16_bits((n < a.nrows && k < K) ? xg[n * a.ldx + k] : 0.f);
      ws[m][kk] = bf16_bits((r < R && k < K) ? wload<F>(w, g * R + r, k) : 0.f);
    }
    __syncthreads();
#ifdef PLUMB_MMA_BF16
#pragma unroll
    for (int ks = 0; ks < kMBK; ks += 16) {
      uint32_t af[2][4], bfr[4][2];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        const int row = wm + 16 * mi + gid, col = ks + 2 * tig;
        af[mi][0] = *reinterpret_cast<const uint32_t*>(&xs[row][col]);
        af[mi][1] = *reinterpret_cast<const uint32_t*>(&xs[row + 8][col]);
        af[mi][2] = *reinterpret_cast<const uint32_t*>(&xs[row][col + 8]);
        af[mi][3] = *reinterpret_cast<const uint32_t*>(&xs[row + 8][col + 8]);
      }
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const int row = wn + 8 * ni + gid, col = ks + 2 * tig;
        bfr[ni][0] = *reinterpret_cast<const uint32_t*>(&ws[row][col]);
        bfr[ni][1] = *reinterpret_cast<const uint32_t*>(&ws[row][col + 8]);
      }
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) mma_bf16(acc[mi][ni], af[mi], bfr[ni]);
    }
#else
#pragma unroll 4
    for (int kk = 0; kk < kMBK; ++kk) {
      float xv[8], wv[4];
#pragma unroll
      for (int i = 0; i < 8; ++i) xv[i] = bf16_to_f32(xs[tr + 8 * i][kk]);
#pragma unroll
      for (int j = 0; j < 4; ++j) wv[j] = bf16_to_f32(ws[tc + 16 * j][kk]);
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(xv[i], wv[j], acc[i][j]);
    }
#endif
  }
  auto store = [&](int64_t n, int64_t r, float v) {
    if (n < a.nrows && r < R) a.y[n * a.ldy + g * R + r] = a.round_bf16 ? round_bf16(v) : v;
  };
#ifdef PLUMB_MMA_BF16
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
      const int64_t n = n0 + wm + 16 * mi + gid, r = r0 + wn + 8 * ni + 2 * tig;
      store(n, r, acc[mi][ni][0]);
      store(n, r + 1, acc[mi][ni][1]);
      store(n + 8, r, acc[mi][ni][2]);
      store(n + 8, r + 1, acc[mi][ni][3]);
    }
#else
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) store(n0 + tr + 8 * i, r0 + tc + 16 * j, acc[i][j]);
#endif
}

dim3 grid_of(const LinearArgs& a, int bm, int bn) {
  return dim3(static_cast<unsigned>((a.R + bn - 1) / bn), static_cast<unsigned>((a.nrows + bm - 1) / bm),
              static_cast<unsigned>(a.groups));
}

}  // namespace

gpuError_t linear_simt(const LinearArgs& a, const WeightRef& w, gpuStream_t s) {
  if (a.nrows <= 0 || a.R <= 0 || a.groups <= 0) return gpuGetLastError();
  return dispatch_format(w.format, [&]<WFormat F>() {
    simt_kernel<F><<<grid_of(a, kSBM, kSBN), kSThreads, 0, s>>>(a, w);
    return gpuGetLastError();
  });
}

gpuError_t linear_mma(const LinearArgs& a, const WeightRef& w, gpuStream_t s) {
  if (a.nrows <= 0 || a.R <= 0 || a.groups <= 0) return gpuGetLastError();
  return dispatch_format(w.format, [&]<WFormat F>() {
    mma_kernel<F><<<grid_of(a, kMBM, kMBN), kMThreads, 0, s>>>(a, w);
    return gpuGetLastError();
  });
}

}  // namespace plumb::gpu::k
