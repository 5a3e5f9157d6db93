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
//       HIP gfx90a: MFMA v_mfma_f32_16x16x16bf16_1k (same tiles, 2 wavefronts of 32x64). It has
//       never run on hardware here, so gpu_mfma_check.cpp checks it against the SIMT loop at
//       run time before first use and falls back to that loop on a mismatch. One documented
//       difference: MI200's bf16 MFMA flushes subnormal inputs and accumulator values to zero
//       (AMD, MIOpen "MI200 MFMA behavior specifics"), i.e. magnitudes below 2^-126 only.
//       Elsewhere (other HIP targets; and linear_mma_simt everywhere): a SIMT loop over the same
//       bf16 tiles with the same numerics (exact bf16 x bf16 products, f32 accumulation).
#include <type_traits>

#include "plumb/backend/gpu/kernels/linear.h"
#include "plumb/backend/gpu/kernels/cp_async.h"
#include "plumb/backend/gpu/kernels/linear_common.h"
#include "plumb/backend/gpu/kernels/mma_tile.h"
#include "plumb/backend/gpu/kernels/launch.h"

namespace plumb::gpu::k {
namespace {

// ---- (b) SIMT f32

constexpr int kSBM = 64, kSBN = 64, kSBK = 16, kSThreads = 256;

template <WFormat F>
__global__ void __launch_bounds__(kSThreads) simt_kernel(LinearArgs a, WeightRef w) {
  pdl_begin();
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

// ---- (c) bf16 operands (the tiles: mma_tile.h)

// A weight tile's 16 decoded values as bf16 at dst (16-byte aligned): FP4 and BF16 values are
// bf16 already (their top halves), FP8 ones are rounded (exact for ue8m0 scales; bf16_weight
// rounds f32-scaled ones there on purpose).
template <WFormat F>
__device__ __forceinline__ void store_segment(uint16_t* dst, const float* v) {
  uint32_t p[8];
#pragma unroll
  for (int j = 0; j < 8; ++j)
    p[j] = F == WFormat::FP8 ? bf16_bits(v[2 * j]) | (static_cast<uint32_t>(bf16_bits(v[2 * j + 1])) << 16)
                             : f32_bits(v[2 * j]) >> 16 | (f32_bits(v[2 * j + 1]) & 0xFFFF0000u);
  uint4* d = reinterpret_cast<uint4*>(dst);
  d[0] = make_uint4(p[0], p[1], p[2], p[3]);
  d[1] = make_uint4(p[4], p[5], p[6], p[7]);
}

// The weight column of loop column k < 3 wK: k itself where the loop runs over the weight's wK
// columns, k mod wK where it runs over x's three parts (path (g), LinearArgs::x_parts), without a
// 64-bit division.
__device__ __forceinline__ int64_t wcol(int64_t k, int64_t wK) {
  return k < wK ? k : (k < 2 * wK ? k - wK : k - 2 * wK);
}

// One 64x64 output tile of path (c): rows [n0, n0 + 64) of x (xg: row 0, ldx apart; rows from
// nrows on read as 0), weight rows wr0 + [r0, r0 + 64) (rows from R on read as 0), k-tiles of kMBK
// over K columns of x, the weight's column wcol(k, wK) against x's column k (K = wK, or 3 wK for
// path (g)); st(n, r, v) receives every accumulated value (bounds-checked by the caller). Both
// mma_kernel (one weight) and mma_grouped_kernel (a routed expert per row tile) run exactly this
// code, so a given (x row, weight row) pair gives the same bits through either.
// vec (FP8 / FP4 / BF16 weights, K % 16 == 0: vec_tiles, checked by the launcher): each thread
// loads one 16-element segment of the weight tile with wraw16 and decodes it with wdecode16
// (exactly weight_at's values, as wload's) instead of 16 element loads, each with its own scale
// load for FP8 / FP4; the bf16 operands in shared memory are the same bits either way. There, FP4
// and BF16 values, which bf16 holds exactly (FP4 x ue8m0: 2 significant bits, never finer than
// 2^-128), take the top half of their f32 bits (what rounding gives them), and with xbg (x already
// rounded to bf16 by bf16_rows, row stride ldxb) the x tile is a copy of 16-byte chunks: x is
// otherwise rounded again for every weight tile of the row (PERF.md v18). kBf16X: xbg is never null
// on the vec path (the grouped kernel's launcher checks), which keeps the f32 x load out of it.
template <WFormat F, bool kMatrix, bool kBf16X, typename Store>
__device__ __forceinline__ void mma_tile(BTile* xs, BTile* ws, const float* xg, int64_t ldx, const uint16_t* xbg,
                                         int64_t ldxb, int64_t nrows, const WeightRef& w, int64_t wr0, int64_t R,
                                         int64_t K, int64_t wK, int64_t n0, int64_t r0, bool vec, Store&& st) {
  using Tile = std::conditional_t<kMatrix, MatrixTile, SimtTile>;
  static_assert(kMBN * kMBK == 16 * kMThreads, "one 16-element weight segment per thread");
  constexpr bool kVecFormat = F == WFormat::FP8 || F == WFormat::FP4 || F == WFormat::BF16;
  const int t = threadIdx.x;
  Tile tile(t);
  for (int64_t k0 = 0; k0 < K; k0 += kMBK) {
    __syncthreads();
    if (kVecFormat && vec) {
      if (kBf16X || xbg) {  // 64 rows x 4 chunks of 8 bf16: two a thread (K % 16 == 0: a chunk is below K or past it)
#pragma unroll
        for (int i = 0; i < kMBM * kMBK / 8 / kMThreads; ++i) {
          const int c = t + i * kMThreads, m = c / (kMBK / 8), kc = 8 * (c % (kMBK / 8));
          const int64_t n = n0 + m, k = k0 + kc;
          *reinterpret_cast<uint4*>(&xs[m][kc]) =
              n < nrows && k < K ? *reinterpret_cast<const uint4*>(xbg + n * ldxb + k) : make_uint4(0u, 0u, 0u, 0u);
        }
      } else {
#pragma unroll 4
        for (int i = 0; i < kMBM * kMBK / kMThreads; ++i) {
          const int idx = t + i * kMThreads, m = idx / kMBK, kk = idx % kMBK;
          const int64_t n = n0 + m, k = k0 + kk;
          xs[m][kk] = bf16_bits((n < nrows && k < K) ? xg[n * ldx + k] : 0.f);
        }
      }
      const int m = t / 2, c = 16 * (t % 2);
      const int64_t r = r0 + m, k = k0 + c;
      float v[16];
      if (r < R && k < K) {  // K % 16 == 0: the whole segment lies below K
        wdecode16<F>(wraw16<F>(w, wr0 + r, wcol(k, wK)), w, v);
      } else {
#pragma unroll
        for (int j = 0; j < 16; ++j) v[j] = 0.f;
      }
      store_segment<F>(&ws[m][c], v);
    } else {
#pragma unroll 4
      for (int i = 0; i < kMBM * kMBK / kMThreads; ++i) {
        const int idx = t + i * kMThreads, m = idx / kMBK, kk = idx % kMBK;
        const int64_t n = n0 + m, r = r0 + m, k = k0 + kk;
        xs[m][kk] = bf16_bits((n < nrows && k < K) ? xg[n * ldx + k] : 0.f);
        ws[m][kk] = bf16_bits((r < R && k < K) ? wload<F>(w, wr0 + r, wcol(k, wK)) : 0.f);
      }
    }
    __syncthreads();
    tile.step(xs, ws);
  }
  tile.store(n0, r0, st);
}

// ---- (c) pipelined: the same tile and the same sums, with the next k-tiles' bytes in flight
// mma_tile waits on DRAM, then on a barrier, every 32-wide k-tile, with one k-tile's loads in
// flight a block (PERF.md v22). Here the x tile (bf16 rows) and the weight tile's stored bytes go
// global -> shared by cp.async (cp_async.h) kPStages - 1 k-tiles ahead; each k-tile's weight bytes
// are decoded from shared memory into one of two bf16 tiles while the matrix unit works on the
// other, with one barrier a k-tile. The block's weight rows' scales are read once, into shared
// memory. Every operand is the bits mma_tile's vec path puts in its tiles (the same decode,
// wdecode16, and the same store_segment), and Tile::step sees them in the same k order, so each
// output is bitwise mma_tile's (GpuOps.LinearBf16GemmPipelinedIsBitwise).
constexpr int kPStages = 4;
template <WFormat F>
constexpr bool kPipeFormat = F == WFormat::FP4 || F == WFormat::FP8 || F == WFormat::BF16;
template <WFormat F>  // stored bytes of a weight row's k-tile
constexpr int kRawRow = F == WFormat::FP4 ? kMBK / 2 : (F == WFormat::FP8 ? kMBK : 2 * kMBK);
template <WFormat F>  // a weight row's stored scales in shared memory (FP8: ue8m0 or f32 bits)
using ScaleBits = std::conditional_t<F == WFormat::FP8, uint32_t, uint8_t>;
template <WFormat F>
constexpr int kScaleCols = F == WFormat::FP8 ? 128 : 32;  // k columns a scale covers
template <int kRows>  // x tiles [stage][kRows] (BTile rows) of a tile of kRows x rows (kMBM or kTallRows)
constexpr int kPXsBytes = kPStages * kRows * kMLd * 2;
template <WFormat F>
constexpr int kPWrBytes = kPStages * kMBN * kRawRow<F>;    // weight bytes [stage][kMBN][kRawRow]
constexpr int kPWsBytes = 2 * kMBN * kMLd * 2;             // decoded weight tiles [2][kMBN]
// Without an opt-in: FP4 at K = 4,096 takes 43,008 bytes for 64 rows of x. The 128-row tiles (the
// grouped experts) opt in up to kPMaxSmemTall: 63,488 bytes there, 3 blocks a multiprocessor on
// sm_90 (227 KB), 1 on sm_86 / sm_89 (99 KB).
constexpr int64_t kPMaxSmem = 48 * 1024, kPMaxSmemTall = 96 * 1024;
static_assert(kPXsBytes<kMBM> % 16 == 0 && kPWsBytes % 16 == 0, "16-byte aligned sections");

template <WFormat F>
PLUMB_HD int64_t pipe_scales(int64_t K) {  // scales a weight row has
  return F == WFormat::BF16 ? 0 : (K + kScaleCols<F> - 1) / kScaleCols<F>;
}
template <WFormat F, int kRows = kMBM>
PLUMB_HD int64_t pipe_smem_bytes(int64_t K) {
  return kPXsBytes<kRows> + kPWrBytes<F> + kPWsBytes +
         kMBN * pipe_scales<F>(K) * static_cast<int64_t>(sizeof(ScaleBits<F>));
}

// The k-loop of mma_tile's vec path with bf16 x (xbg, row stride ldxb), for kPipeFormat weights,
// over kRows x rows (kMBM: MatrixTile / SimtTile; kTallRows: TallTile, mma_tile.h) and K columns
// of x against the weight's wK (mma_tile: wcol); the launcher
// checks pipe_ok (K % kMBK == 0, 16-byte aligned rows of x and of the weight, the shared memory)
// and gives the kernel pipe_smem_bytes<F, kRows>(K) of dynamic shared memory at smem.
template <WFormat F, bool kMatrix, int kRows, typename Store>
__device__ __forceinline__ void mma_tile_pipelined(uint8_t* smem, const uint16_t* xbg, int64_t ldxb, int64_t nrows,
                                                   const WeightRef& w, int64_t wr0, int64_t R, int64_t K, int64_t wK,
                                                   int64_t n0, int64_t r0, Store&& st) {
  using Tile = std::conditional_t<kRows == kMBM, std::conditional_t<kMatrix, MatrixTile, SimtTile>, TallTile<kMatrix>>;
  using SB = ScaleBits<F>;
  constexpr int kRaw = kRawRow<F>, kRowChunks = kRaw / 16, kChunks = kMBN * kRowChunks;
  BTile* const xs = reinterpret_cast<BTile*>(smem);
  uint8_t* const wr = smem + kPXsBytes<kRows>;
  BTile* const ws = reinterpret_cast<BTile*>(wr + kPWrBytes<F>);
  SB* const sc = reinterpret_cast<SB*>(wr + kPWrBytes<F> + kPWsBytes);
  const int t = threadIdx.x;
  const int64_t tiles = K / kMBK, nsc = pipe_scales<F>(wK);
  const auto issue = [&](int64_t kt) {  // k-tile kt's x rows and weight bytes into stage kt % kPStages
    if (kt >= tiles) return;
    const int64_t k0 = kt * kMBK;
    BTile* const xst = xs + (kt % kPStages) * kRows;
#pragma unroll
    for (int i = 0; i < kRows * kMBK / 8 / kMThreads; ++i) {  // 16-byte chunks of 8 bf16
      const int c = t + i * kMThreads, m = c / (kMBK / 8), kc = 8 * (c % (kMBK / 8));
      const bool valid = n0 + m < nrows;
      cp_async16(&xst[m][kc], xbg + (valid ? n0 + m : 0) * ldxb + k0 + kc, valid);
    }
    uint8_t* const wst = wr + (kt % kPStages) * kMBN * kRaw;
#pragma unroll
    for (int i = 0; i < (kChunks + kMThreads - 1) / kMThreads; ++i) {
      const int c = t + i * kMThreads, m = c / kRowChunks, cb = 16 * (c % kRowChunks);
      if (kChunks % kMThreads != 0 && c >= kChunks) break;
      const bool valid = r0 + m < R;
      const int64_t e = (wr0 + (valid ? r0 + m : 0)) * wK + wcol(k0, wK);  // the row's first element of the k-tile
      cp_async16(wst + m * kRaw + cb, w.data + e * kRaw / kMBK + cb, valid);  // (e * kRaw / kMBK: its byte)
    }
  };
  // Stage kt's weight bytes of this thread's segment (row t / 2, 16 columns) and their scale, then
  // their decode into ws[kt % 2]: the loop reads k-tile kt + 1's before its matrix step on kt and
  // decodes them after it, so the shared-memory loads' latency passes under the step.
  const int dm = t / 2, dc = 16 * (t % 2);
  const auto load_raw = [&](int64_t kt) {
    const uint8_t* src = wr + ((kt % kPStages) * kMBN + dm) * kRaw + dc * kRaw / kMBK;
    WRaw<F> raw;
    if constexpr (F == WFormat::FP4) {
      const uint2 v = *reinterpret_cast<const uint2*>(src);
      raw.v[0] = make_uint4(v.x, v.y, 0u, 0u);
    } else {
#pragma unroll
      for (int q = 0; q < kRaw / kMBK; ++q) raw.v[q] = reinterpret_cast<const uint4*>(src)[q];
    }
    raw.sbits = F == WFormat::BF16 ? 0u : sc[dm * nsc + (wcol(kt * kMBK, wK) + dc) / kScaleCols<F>];
    return raw;
  };
  const auto decode = [&](const WRaw<F>& raw, int64_t kt) {
    float v[16];
    wdecode16<F>(raw, w, v);
    store_segment<F>(&ws[(kt % 2) * kMBN + dm][dc], v);
  };

  // The block's weight rows' scales. FP4 rows of whole 16-byte chunks of scales, 16-byte aligned
  // (the experts'): copied with stage 0 (rows past R get zeros: code 0, a finite scale for their
  // zero bytes). Otherwise loaded here while the first stages' copies run, a warp a row at a time
  // (rows past R get 1.0): these loads wait one after another, ~13% of the grouped experts' time
  // when every format took this loop (PERF.md v27).
  bool scales_copied = false;
  if constexpr (F == WFormat::FP4) {
    scales_copied = reinterpret_cast<uintptr_t>(w.scale) % 16 == 0 && w.scale_cols == nsc && nsc % 16 == 0;
    if (scales_copied) {
      const int row_chunks = static_cast<int>(nsc / 16);
      for (int c = t; c < kMBN * row_chunks; c += kMThreads) {
        const int m = c / row_chunks, cb = 16 * (c % row_chunks);
        const bool valid = r0 + m < R;
        cp_async16(sc + m * nsc + cb, w.scale + (wr0 + (valid ? r0 + m : 0)) * nsc + cb, valid);
      }
    }
  }
#pragma unroll
  for (int s = 0; s < kPStages - 1; ++s) {
    issue(s);
    cp_async_commit();
  }
  if constexpr (F != WFormat::BF16) {
    if (!scales_copied) {
      const SB unit = F == WFormat::FP8 && w.scale_f32 ? SB(0x3F800000u) : SB(127u);
      for (int m = t / kWarp; m < kMBN; m += kMThreads / kWarp)
        for (int64_t j = t % kWarp; j < nsc; j += kWarp)
          sc[m * nsc + j] = r0 + m < R ? static_cast<SB>(wscale_bits<F>(w, wr0 + r0 + m, j * kScaleCols<F>)) : unit;
    }
  }
  cp_async_wait<kPStages - 2>();  // stage 0 (and the copied scales)
  __syncthreads();
  decode(load_raw(0), 0);
  Tile tile(t);
  for (int64_t kt = 0; kt < tiles; ++kt) {
    cp_async_wait<kPStages - 3>();  // this thread's copies of stage kt + 1
    __syncthreads();  // everyone's, and ws[kt % 2]; everyone is done with step kt - 1 (its stage is free)
    issue(kt + kPStages - 1);
    cp_async_commit();  // (empty past the last k-tile: the wait counts stay uniform)
    const WRaw<F> next = load_raw(kt + 1 < tiles ? kt + 1 : kt);  // (past the last: a harmless reread)
    tile.step(xs + (kt % kPStages) * kRows, ws + (kt % 2) * kMBN);
    if (kt + 1 < tiles) decode(next, kt + 1);
  }
  tile.store(n0, r0, st);
}

// kMatrix: the matrix-core tile where this target has one (MatrixTile), else the SIMT loop; the
// SIMT instance (kMatrix false) is the run-time fallback and the self-check's reference.
// pipe: mma_tile_pipelined (the launcher checked pipe_ok and gave its shared memory), else
// mma_tile (kMBTileBytes: xs, then ws).
constexpr int kMBTileBytes = (kMBM + kMBN) * kMLd * 2;

template <WFormat F, bool kMatrix>
__global__ void __launch_bounds__(kMThreads) mma_kernel(LinearArgs a, WeightRef w, bool vec, bool pipe) {
  pdl_begin();
  PLUMB_DYNAMIC_SHARED(uint8_t, smem);
  const int64_t g = blockIdx.z, R = a.R, K = a.K, KL = K * a.x_parts;  // (x_parts 3: one group)
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kMBM, r0 = static_cast<int64_t>(blockIdx.x) * kMBN;
  const auto st = [&](int64_t n, int64_t r, float v) {
    if (n < a.nrows && r < R) a.y[n * a.ldy + g * R + r] = a.round_bf16 ? round_bf16(v) : v;
  };
  if constexpr (kPipeFormat<F>)
    if (pipe)
      return mma_tile_pipelined<F, kMatrix, kMBM>(smem, a.xb + g * K, a.ldxb, a.nrows, w, g * R, R, KL, K, n0, r0, st);
  BTile* const xs = reinterpret_cast<BTile*>(smem);  // bf16 bits, row = x row, k contiguous
  mma_tile<F, kMatrix, false>(xs, xs + kMBM, a.x + g * K, a.ldx, a.xb ? a.xb + g * K : nullptr, a.ldxb, a.nrows, w, g * R,
                              R, KL, K, n0, r0, vec, st);
}

// Path (c) for many routed experts at once (the MoE prefill; GroupedGemmArgs in linear.h): block
// (x, y, z) = weight row tile x, row tile y + kMaxGridY * (z / projections) of the tile list (one
// expert's rows, at most kGroupedTileRows = 128 of them, starting at a multiple of 128 from that
// expert's first row), projection z % projections. The pipelined loop takes the 128 rows as one
// TallTile (each decoded weight k-tile serves them all: the decode was most of the kernel's
// instructions with 64, PERF.md v27); the other loop as two 64-row tiles. Blocks
// start in x order, so the weight tiles of one row tile run side by side: they share its x rows
// in L2, and the expert's next row tile finds its weight tiles there. (Up to v26 the row tiles
// were x: the blocks of a wave each read another expert's weights and another x tile, and a
// 4,096-token prefill's w1 / w3 launch moved ~10 GB from DRAM for ~2.3 GB of operands, PERF.md
// v27.) Why the values are bitwise the per-expert launch's: an
// output (n, r) is sum_k x[n][k] * w[r][k] accumulated by mma_tile over the same k-tiles in the
// same order, from the same bf16 operands; the matrix instruction (mma.sync m16n8k16 / MFMA
// 16x16x16) and the SIMT loop compute each element of D from its own A row and B column only, and
// the row tile puts every row at the same position in the tile as the per-expert launch does, so
// neither the other rows sharing the launch nor the other experts change any value; a 64-row half
// of the 128-row tile sums each of its rows as the 64-row tile at that expert's row does.
// CUDA: 3 blocks of 128 per SM, as many as the pipelined loop's 63.5 KB of shared memory at
// K = 4,096 lets in on sm_90: at most 168 registers.
constexpr int64_t kMaxGridY = 65535;  // (and z) blocks a grid may have in y
#if defined(PLUMB_CUDA)
#define PLUMB_GROUPED_BOUNDS __launch_bounds__(kMThreads, 3)
#else
#define PLUMB_GROUPED_BOUNDS __launch_bounds__(kMThreads)
#endif
template <WFormat F, bool kMatrix>
__global__ void PLUMB_GROUPED_BOUNDS mma_grouped_kernel(GroupedGemmArgs a) {
  pdl_begin();
  PLUMB_DYNAMIC_SHARED(uint8_t, smem);
  const int z = static_cast<int>(blockIdx.z % a.projections);
  const int64_t row_tile = blockIdx.y + kMaxGridY * static_cast<int64_t>(blockIdx.z / a.projections);
  if (row_tile >= a.tile_count) return;
  const int32_t* tl = a.tiles + 3 * row_tile;
  const int64_t e = tl[0], first = tl[1], rows = tl[2] - first;
  const WeightRef w = a.table[e * a.table_stride + (z ? a.which1 : a.which0)];
  float* const y = (z ? a.y1 : a.y0) + first * a.ldy;
  const int64_t R = a.R, r0 = static_cast<int64_t>(blockIdx.x) * kMBN;
  const auto st = [&](int64_t n, int64_t r, float v) {
    if (n < rows && r < R) y[n * a.ldy + r] = a.round_bf16 ? round_bf16(v) : v;
  };
  static_assert(kGroupedTileRows == kTallRows, "the grouped row tile is the tall tile");
  if constexpr (kPipeFormat<F>)
    if (a.pipe)
      return mma_tile_pipelined<F, kMatrix, kTallRows>(smem, a.xb + first * a.ldxb, a.ldxb, rows, w, 0, R, a.K, a.K,
                                                       0, r0, st);
  BTile* const xs = reinterpret_cast<BTile*>(smem);
  for (int64_t n0 = 0; n0 < rows; n0 += kMBM)
    mma_tile<F, kMatrix, true>(xs, xs + kMBM, a.x + first * a.ldx, a.ldx, a.xb ? a.xb + first * a.ldxb : nullptr, a.ldxb,
                               rows, w, 0, R, a.K, a.K, n0, r0, a.vec, st);
}

// bf16_rows (kParts 1) and bf16_parts_rows (3): thread per 8 elements of a row (cols % 8 == 0),
// their first kParts bf16_parts (part 0 is the rounding to bf16), one 16-byte store a part, part p
// at column p cols + c of the row's kParts cols.
template <int kParts>
__global__ void bf16_rows_kernel(const float* x, int64_t ldx, int64_t N, int64_t cols, uint16_t* xb) {
  pdl_begin();
  const int64_t chunks = cols / 8, total = N * chunks;
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < total;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = c / chunks, col = 8 * (c % chunks);
    const float* v = x + n * ldx + col;
    uint32_t w[kParts][4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t lo[3], hi[3];
      bf16_parts(v[2 * j], lo);
      bf16_parts(v[2 * j + 1], hi);
#pragma unroll
      for (int p = 0; p < kParts; ++p) w[p][j] = lo[p] | hi[p] << 16;
    }
#pragma unroll
    for (int p = 0; p < kParts; ++p)
      *reinterpret_cast<uint4*>(xb + (n * kParts + p) * cols + col) = make_uint4(w[p][0], w[p][1], w[p][2], w[p][3]);
  }
}

template <int kParts>
gpuError_t launch_bf16_rows(const float* x, int64_t ldx, int64_t N, int64_t cols, uint16_t* xb, gpuStream_t s) {
  if (cols % 8 != 0) return gpuErrorNotSupported;
  const int64_t total = N * (cols / 8);
  if (total <= 0) return gpuGetLastError();
  const int64_t blocks = (total + 255) / 256;
  return launch(bf16_rows_kernel<kParts>, static_cast<unsigned>(blocks < 65536 ? blocks : 65536), 256, 0, s, x, ldx, N,
                cols, xb);
}

// mma_tile's segment loads: 16-byte-aligned whole segments (K % 16 == 0 also for BF16, whose
// vec16_ok asks only K % 8, so that no segment crosses K).
bool vec_tiles(WFormat f, int64_t K) {
  return (f == WFormat::FP8 || f == WFormat::FP4 || f == WFormat::BF16) && vec16_ok(f, K) && K % 16 == 0;
}

dim3 grid_of(const LinearArgs& a, int bm, int bn) {
  return dim3(static_cast<unsigned>((a.R + bn - 1) / bn), static_cast<unsigned>((a.nrows + bm - 1) / bm),
              static_cast<unsigned>(a.groups));
}

}  // namespace

gpuError_t linear_simt(const LinearArgs& a, const WeightRef& w, gpuStream_t s) {
  if (a.nrows <= 0 || a.R <= 0 || a.groups <= 0) return gpuGetLastError();
  return dispatch_format(w.format, [&]<WFormat F>() {
    return launch(simt_kernel<F>, grid_of(a, kSBM, kSBN), kSThreads, 0, s, a, w);
  });
}

namespace {
// Whether path (c) takes mma_tile_pipelined: a kPipeFormat weight of rows of K (whole k-tiles),
// bf16 x rows, both 16-byte aligned, within kPMaxSmem; on CUDA only: HIP has no asynchronous copy
// (cp_async.h copies at once there), so the stages would only cost gfx90a's 64 KB of LDS a CU
// (one 43 KB block instead of six of 10 KB) and buy nothing.
#if defined(PLUMB_HIP)
constexpr bool kAsyncCopy = false;
#else
constexpr bool kAsyncCopy = true;
#endif
template <WFormat F, int kRows = kMBM>
bool pipe_ok(int64_t K, const void* wdata, const uint16_t* xb, int64_t ldxb) {
  const auto aligned16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if constexpr (kPipeFormat<F>)
    return kAsyncCopy && xb && K % kMBK == 0 && ldxb % 8 == 0 && aligned16(xb) && aligned16(wdata) &&
           pipe_smem_bytes<F, kRows>(K) <= (kRows == kMBM ? kPMaxSmem : kPMaxSmemTall);
  return false;
}

template <bool kMatrix>
gpuError_t launch_mma(const LinearArgs& a, const WeightRef& w, gpuStream_t s) {
  if (a.nrows <= 0 || a.R <= 0 || a.groups <= 0) return gpuGetLastError();
  if (a.x_parts != 1 && (a.x_parts != 3 || a.groups != 1 || !a.xb || !vec_tiles(w.format, a.K) || w.cols != a.K))
    return gpuErrorNotSupported;  // (path (g): x's parts in xb, one group, the segment tiles)
  return dispatch_format(w.format, [&]<WFormat F>() {
    const bool vec = vec_tiles(F, a.K) && w.cols == a.K, pipe = a.pipe && mma_pipelined(a, w);
    const int64_t smem = pipe ? pipe_smem_bytes<F>(a.K) : kMBTileBytes;
    return launch(mma_kernel<F, kMatrix>, grid_of(a, kMBM, kMBN), kMThreads, static_cast<std::size_t>(smem), s, a, w, vec,
                  pipe);
  });
}
}  // namespace

gpuError_t linear_mma(const LinearArgs& a, const WeightRef& w, gpuStream_t s) { return launch_mma<true>(a, w, s); }

namespace {
template <int kRows = kMBM>
bool pipe_ok_of(WFormat f, int64_t K, const void* wdata, const uint16_t* xb, int64_t ldxb) {
  switch (f) {
    case WFormat::F32: return false;
    case WFormat::BF16: return pipe_ok<WFormat::BF16, kRows>(K, wdata, xb, ldxb);
    case WFormat::FP8: return pipe_ok<WFormat::FP8, kRows>(K, wdata, xb, ldxb);
    case WFormat::FP4: return pipe_ok<WFormat::FP4, kRows>(K, wdata, xb, ldxb);
  }
  return false;
}
}  // namespace

bool mma_pipelined(const LinearArgs& a, const WeightRef& w) {
  return vec_tiles(w.format, a.K) && w.cols == a.K && pipe_ok_of(w.format, a.K, w.data, a.xb, a.ldxb);
}

// (a.aligned stands for every table weight's bytes: pipe_ok sees xb in their place)
bool mma_grouped_pipelined(const GroupedGemmArgs& a, WFormat format) {
  return a.aligned && vec_tiles(format, a.K) && pipe_ok_of<kTallRows>(format, a.K, a.xb, a.xb, a.ldxb);
}

bool mma_takes_bf16_x(WFormat f, int64_t K) { return vec_tiles(f, K); }

gpuError_t bf16_rows(const float* x, int64_t ldx, int64_t N, int64_t cols, uint16_t* xb, gpuStream_t s) {
  return launch_bf16_rows<1>(x, ldx, N, cols, xb, s);
}

gpuError_t bf16_parts_rows(const float* x, int64_t ldx, int64_t N, int64_t cols, uint16_t* xb, gpuStream_t s) {
  return launch_bf16_rows<3>(x, ldx, N, cols, xb, s);
}

gpuError_t linear_mma_simt(const LinearArgs& a, const WeightRef& w, gpuStream_t s) {
  return launch_mma<false>(a, w, s);
}

gpuError_t linear_mma_grouped(const GroupedGemmArgs& a, WFormat format, bool matrix, gpuStream_t s) {
  if (a.tile_count <= 0 || a.R <= 0 || a.projections <= 0) return gpuGetLastError();
  const int64_t weight_tiles = (a.R + kMBN - 1) / kMBN;
  if (weight_tiles > 0x7FFFFFFF || a.projections > 2 || a.tile_count > kMaxGridY * 32) return gpuErrorNotSupported;
  GroupedGemmArgs b = a;
  // x: weight row tiles (mma_grouped_kernel: why in that order); y and z: row tiles (kMaxGridY a
  // z step) and projections.
  const int64_t folds = (a.tile_count + kMaxGridY - 1) / kMaxGridY;
  const dim3 grid(static_cast<unsigned>(weight_tiles), static_cast<unsigned>(std::min(a.tile_count, kMaxGridY)),
                  static_cast<unsigned>(folds * a.projections));
  b.vec = vec_tiles(format, a.K);  // the table's weights are [R, K] (the host checks)
  if (b.vec && !b.xb) return gpuErrorNotSupported;  // its x tiles come from xb (mma_takes_bf16_x)
  return dispatch_format(format, [&]<WFormat F>() {
    b.pipe = a.pipe && mma_grouped_pipelined(a, F);
    const int64_t smem = b.pipe ? pipe_smem_bytes<F, kTallRows>(a.K) : kMBTileBytes;
    const auto kernel = matrix ? &mma_grouped_kernel<F, true> : &mma_grouped_kernel<F, false>;
#ifdef PLUMB_CUDA
    if (smem > 48 * 1024) {  // (past the default: opt in, on the current device)
      const gpuError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
      if (e != gpuSuccess) return e;
    }
#endif
    return launch(kernel, grid, kMThreads, static_cast<std::size_t>(smem), s, b);
  });
}

}  // namespace plumb::gpu::k
