#pragma once
// The 64x64 (and 128x64) bf16-operand output tiles of linear path (c) (kernel-only header: .cu files only):
// linear_gemm.cu's GEMMs and sparse_attention_pv_mma.cu's P.V run them. Exact bf16 x bf16
// products, f32 accumulation; the accumulation order inside a k-tile is the matrix unit's.
#include <cstdint>
#include <type_traits>

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
// SimtTile (everywhere), MmaSyncTileOf (CUDA sm_80+), MfmaTile (HIP gfx90a); the kernel's kMatrix
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
// 4 warps of 32 as 2 x 2, each a (16 MI) x 32 corner of the tile: MI (m16) x 4 (n8) mma tiles.
// MI = 2: the 64x64 tile; MI = 4: 128 x rows over the same 64 weight rows (TallTile), each weight
// fragment feeding twice the mma tiles. The fragments come by ldmatrix_x4 (A: one per m16 tile,
// B: one per two n8 tiles), the words mma_bf16's layout asks for (linear_common.h).
template <int MI>
struct MmaSyncTileOf {
  int lane, wm, wn;
  float acc[MI][4][4];  // [m16 tile][n8 tile][fragment]
  __device__ __forceinline__ explicit MmaSyncTileOf(int t) {
    const int warp = t / 32;
    lane = t % 32;
    wm = (warp / 2) * 16 * MI, wn = (warp % 2) * 32;
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.f;
  }
  __device__ __forceinline__ void step(const BTile* xs, const BTile* ws) {
#pragma unroll
    for (int ks = 0; ks < kMBK; ks += 16) {
      // A of m16 tile mi: matrices (rows 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15) =
      // a0..a3; B of n8 tiles 2p, 2p + 1: (tile 2p, k 0-7), (2p, k 8-15), (2p + 1, ...) = b0 b1 b0 b1.
      uint32_t af[MI][4], bfr[4][2];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) ldmatrix_x4(af[mi], &xs[wm + 16 * mi + lane % 16][ks + 8 * (lane / 16)]);
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        uint32_t b[4];
        ldmatrix_x4(b, &ws[wn + 16 * p + 8 * (lane / 16) + lane % 8][ks + 8 * (lane / 8 % 2)]);
        bfr[2 * p][0] = b[0], bfr[2 * p][1] = b[1], bfr[2 * p + 1][0] = b[2], bfr[2 * p + 1][1] = b[3];
      }
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) mma_bf16(acc[mi][ni], af[mi], bfr[ni]);
    }
  }
  template <typename Store>
  __device__ __forceinline__ void store(int64_t n0, int64_t r0, Store&& st) const {
    const int gid = lane / 4, tig = lane % 4;
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
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
    const int gid = lane / 4;
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mi][ni][e] = __fmul_rn(acc[mi][ni][e], s[wm + 16 * mi + gid + 8 * (e / 2)]);
  }
};
using MatrixTile = MmaSyncTileOf<2>;

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

// A 128x64 output tile: x rows [0, 128) over one 64-row weight tile (the grouped experts'
// pipelined loop, linear_gemm.cu: each decoded weight k-tile serves twice the rows). Every output
// is summed as the 64x64 tile sums it (the same k-tiles in the same order, each element of D from
// its own row and column), so a row gives the same bits in either. kMatrix and a CUDA matrix unit:
// MmaSyncTileOf<4>; elsewhere two 64-row tiles of the kind, one above the other.
template <class T>
struct StackedTiles {
  T lo, hi;
  __device__ __forceinline__ explicit StackedTiles(int t) : lo(t), hi(t) {}
  __device__ __forceinline__ void step(const BTile* xs, const BTile* ws) {
    lo.step(xs, ws);
    hi.step(xs + kMBM, ws);
  }
  template <typename Store>
  __device__ __forceinline__ void store(int64_t n0, int64_t r0, Store&& st) const {
    lo.store(n0, r0, st);
    hi.store(n0 + kMBM, r0, st);
  }
};
constexpr int kTallRows = 2 * kMBM;
#ifdef PLUMB_MMA_BF16
template <bool kMatrix>
using TallTile = std::conditional_t<kMatrix, MmaSyncTileOf<4>, StackedTiles<SimtTile>>;
#else
template <bool kMatrix>
using TallTile = StackedTiles<std::conditional_t<kMatrix, MatrixTile, SimtTile>>;
#endif

}  // namespace plumb::gpu::k
