#pragma once
// The 64x64 bf16-operand output tiles of linear path (c) (kernel-only header: .cu files only):
// linear_gemm.cu's GEMMs and sparse_attention_pv_mma.cu's P.V run them. Exact bf16 x bf16
// products, f32 accumulation; the accumulation order inside a k-tile is the matrix unit's.
#include <cstdint>

#include "plumb/backend/gpu/kernels/linear_common.h"

namespace plumb::gpu::k {

constexpr int kMBM = 64, kMBN = 64, kMBK = 32, kMThreads = 128;
constexpr int kMLd = kMBK + 8;  // bf16 row stride 80 bytes: fragment loads hit 32 distinct banks

__device__ __forceinline__ uint16_t bf16_bits(float v) { return static_cast<uint16_t>(f32_bits(round_bf16(v)) >> 16); }

// The compute part of one 64x64 output tile: step() adds one kMBK-wide k-tile of the shared bf16
// tiles (xs: x rows, ws: weight rows, k contiguous in both) to the accumulators; store() hands every
// (x row n, weight row r, value) of the tile at (n0, r0) to the kernel's bounds-checked store;
// scale_rows(s) multiplies every accumulator of tile row n by s[n] (the sparse attention's P.V
// rescales a head's sums when its running max moves).
// Three variants:
// SimtTile (everywhere), MmaSyncTile (CUDA sm_80+), MfmaTile (HIP gfx90a); the kernel's kMatrix
// parameter picks the matrix-core one where it was compiled, else SimtTile.
using BTile = uint16_t[kMLd];

struct SimtTile {
  int tr, tc;  // rows tr + 8i (i < 8), cols tc + 16j (j < 4)
  float acc[8][4];
  __device__ __forceinline__ explicit SimtTile(int t) : tr(t / 16), tc(t % 16) {
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;
  }
  __device__ __forceinline__ void step(const BTile* xs, const BTile* ws) {
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
  }
  template <typename Store>
  __device__ __forceinline__ void store(int64_t n0, int64_t r0, Store&& st) const {
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) st(n0 + tr + 8 * i, r0 + tc + 16 * j, acc[i][j]);
  }
  __device__ __forceinline__ void scale_rows(const float* s) {
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j] = __fmul_rn(acc[i][j], s[tr + 8 * i]);
  }
};

#ifdef PLUMB_MMA_BF16  // (linear_common.h: mma_bf16)
// 4 warps of 32, each a 32x32 corner of the tile: 2 (m16) x 4 (n8) mma tiles.
struct MmaSyncTile {
  int gid, tig, wm, wn;
  float acc[2][4][4];  // [m16 tile][n8 tile][fragment]
  __device__ __forceinline__ explicit MmaSyncTile(int t) {
    const int lane = t % 32, warp = t / 32;
    gid = lane / 4, tig = lane % 4;
    wm = (warp / 2) * 32, wn = (warp % 2) * 32;
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.f;
  }
  __device__ __forceinline__ void step(const BTile* xs, const BTile* ws) {
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
  }
  template <typename Store>
  __device__ __forceinline__ void store(int64_t n0, int64_t r0, Store&& st) const {
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const int64_t n = n0 + wm + 16 * mi + gid, r = r0 + wn + 8 * ni + 2 * tig;
        st(n, r, acc[mi][ni][0]);
        st(n, r + 1, acc[mi][ni][1]);
        st(n + 8, r, acc[mi][ni][2]);
        st(n + 8, r + 1, acc[mi][ni][3]);
      }
  }
  __device__ __forceinline__ void scale_rows(const float* s) {
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mi][ni][e] = __fmul_rn(acc[mi][ni][e], s[wm + 16 * mi + gid + 8 * (e / 2)]);
  }
};
using MatrixTile = MmaSyncTile;

#elif defined(PLUMB_HIP) && (defined(__HIP_DEVICE_COMPILE__) && defined(__gfx90a__) || defined(PLUMB_EMU))
#define PLUMB_MFMA_BF16 1
// v_mfma_f32_16x16x16bf16_1k (CDNA2 ISA, wave64): D (16x16 f32) = A (16x16 bf16) * B (16x16 bf16)
// + C, one block. Operand layouts, with lane = 0..63, i = lane % 16, q = lane / 16 (AMD Matrix
// Instruction Calculator, --architecture cdna2 --instruction v_mfma_f32_16x16x16bf16_1k
// --register-layout; element e of a 4 x bf16 operand is bits [16e%32 + 15 : 16e%32] of VGPR e/2):
//   A (row i, k):   lane i + 16 * (k / 4), element k % 4  -> lane holds A[i][4q .. 4q+3]
//   B (k, col j):   lane j + 16 * (k / 4), element k % 4  -> lane holds B[4q .. 4q+3][i]
//   C, D (row, col j): lane j + 16 * (row / 4), float row % 4 -> lane holds D[4q + e][i], e < 4.
// Here A = the x tile (row = x row) and B[k][j] = ws[j][k] (col = weight row); both keep k
// contiguous in shared memory, so each operand is one 8-byte load of 4 consecutive bf16.
// GCC-style vectors (the builtin's own operand types in clang; the HIP emulator's, under g++).
typedef short mfma_bf16x4 __attribute__((vector_size(8)));
typedef float mfma_f32x4 __attribute__((vector_size(16)));
static_assert(kWarp == 64 && kMThreads == 2 * kWarp, "MfmaTile assumes 2 wavefronts of 64");

// 2 wavefronts, each 32 rows x 64 cols of the tile: 2 (m16) x 4 (n16) MFMA tiles.
struct MfmaTile {
  int i, q, wm;
  mfma_f32x4 acc[2][4];  // [m16 tile][n16 tile], float e = row 4q + e, col i
  __device__ __forceinline__ explicit MfmaTile(int t) : i(t % 16), q((t % 64) / 16), wm((t / 64) * 32) {
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) acc[mi][ni] = mfma_f32x4{0.f, 0.f, 0.f, 0.f};
  }
  __device__ __forceinline__ void step(const BTile* xs, const BTile* ws) {
#pragma unroll
    for (int ks = 0; ks < kMBK; ks += 16) {
      mfma_bf16x4 af[2], bfr[4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) af[mi] = *reinterpret_cast<const mfma_bf16x4*>(&xs[wm + 16 * mi + i][ks + 4 * q]);
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) bfr[ni] = *reinterpret_cast<const mfma_bf16x4*>(&ws[16 * ni + i][ks + 4 * q]);
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
          acc[mi][ni] = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(af[mi], bfr[ni], acc[mi][ni], 0, 0, 0);
    }
  }
  template <typename Store>
  __device__ __forceinline__ void store(int64_t n0, int64_t r0, Store&& st) const {
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) st(n0 + wm + 16 * mi + 4 * q + e, r0 + 16 * ni + i, acc[mi][ni][e]);
  }
  __device__ __forceinline__ void scale_rows(const float* s) {
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mi][ni][e] = __fmul_rn(acc[mi][ni][e], s[wm + 16 * mi + 4 * q + e]);
  }
};
using MatrixTile = MfmaTile;

#else
using MatrixTile = SimtTile;
#endif

}  // namespace plumb::gpu::k
