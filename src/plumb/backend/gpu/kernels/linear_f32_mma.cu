// linear() path (f): f32 x times a BF16 weight (or an FP8 one with ue8m0 scales, each value made
// bf16 exactly as it is used) on the bf16 tensor cores with nothing rounded, for
// a few rows of x and a tall weight: the f32 head at decode batches (129,280 x 4,096, 1.06 GB),
// which the GEMV reads once per 8 x rows (4 x 740 us at batch 32, PERF.md v12) and this kernel once.
//
// Exact split: every finite f32 x is hi + mid + lo with hi = bf16(x), mid = bf16(x - hi),
// lo = x - hi - mid, each a bf16 value (8 + 8 + 8 significand bits; x - hi and (x - hi) - mid are
// exact in f32, and the last has at most 8 significant bits), so W x = W hi + W mid + W lo and
// each product of two bf16 values is exact in f32. The three products go into one f32
// accumulator per output (mma.sync m16n8k16, f32 accumulation): an f32 GEMM's result up to
// summation order, the op harness's f32 tolerance (not bitwise). Limits: a non-finite x, or one
// within half a bf16 ulp of FLT_MAX (hi rounds to inf), gives NaN (x - hi is inf - inf); parts
// below bf16's normal range (|x| < ~2^-110) may lose bits.
//
// Shape: weights are the MMA's A side (16 weight rows an m-tile), x rows the B side (8 an n-tile,
// NT n-tiles for up to 8 NT rows). A warp owns 32 weight rows (2 m-tiles) over all of K (or its
// split's range of K, when the weight's blocks are fewer than the multiprocessors); a block of 8
// warps 256 rows, and x's three parts for 32-column stages in shared memory (staged by the
// block f32_mma_chunk stages at a time, double-buffered: one barrier a chunk). The summation
// order within 16 columns is free, so each lane loads 16 contiguous bytes of a weight row
// (columns 8 tig .. 8 tig + 7 of a 32-column stage) and reads x at the same 8 columns: A's and
// B's k-slots stay paired (mma_bf16's layout: slots 2 tig, 2 tig + 1 <- columns 8 tig + {0, 1}
// (first MMA) or {4, 5} (second); slots 8 + 2 tig, 9 + 2 tig <- columns 8 tig + {2, 3} or
// {6, 7}). The weights of the stage f32_mma_depth - 1 ahead are loaded (streaming) before this
// stage's MMAs. CUDA sm_80+ only: elsewhere linear() never takes this path (f32_mma_built).
#include <algorithm>

#include "plumb/backend/gpu/gpu_numerics.h"
#include "plumb/backend/gpu/kernels/linear.h"
#include "plumb/backend/gpu/kernels/linear_common.h"
#include "plumb/backend/gpu/kernels/launch.h"

namespace plumb::gpu::k {
namespace {

constexpr int kThreads = 256, kWarps = 8;  // CUDA: warps of 32
constexpr int kWarpRows = 32;              // weight rows of a warp: two 16-row m-tiles
constexpr int kBlockRows = kWarps * kWarpRows;
constexpr int kStage = 32;                 // K columns per stage
// Stages of weights a warp keeps in flight + 1 (the ring's slots): one stage (v14-v41) kept 32 KB
// of the head's weight in flight an SM; two give 64 KB. Alone, on the H100, two changed nothing
// (the head at B = 2 0.582 ms either way, ~59% of the copy rate: the per-stage barrier below was
// the bound, PERF.md v42); they keep the weights ahead once that barrier is gone.
// NT = 4 with BF16 weights keeps one: its 32 accumulators at 2 blocks an SM leave no registers
// for more (ptxas spills 24 bytes at 3, none at 2; FP8's smaller chunks spill 4 bytes at 3, 32 at 2).
constexpr int f32_mma_depth(int NT, WFormat F) { return NT == 4 && F == WFormat::BF16 ? 2 : 3; }
// Stages of x a block stages at once (a chunk), one barrier a chunk: the whole block, a thread 8
// values (C x 8 NT rows x 4 column groups = 256). With one stage a barrier (v14-v41) each of the
// head's 128 stages waited for warp 0's load of x under the weights' traffic: ~2.25 us a stage,
// DRAM 58% busy (ncu, B = 2, H100, PERF.md v42).
constexpr int f32_mma_chunk(int NT) { return 8 / NT; }

#ifdef PLUMB_CUDA  // (the kernel's body is CUDA's only)
constexpr int kColGroups = kStage / 8;  // 8-column groups of a stage (one per tig)

// x's three bf16 parts of one stage: [part][column group][x row][8 bf16]. Rows padded by 2 (32
// bytes), so the 8 lanes of a quarter warp (2 rows x 4 groups) hit distinct banks.
template <int NT>
struct XStage {
  uint4 v[3][kColGroups][NT * 8 + 2];
};

__device__ __forceinline__ uint32_t bf16_hi16(float v) { return f32_bits(v) >> 16; }  // v bf16-exact

// The three bf16 parts of 8 x values as three rows of 8 bf16 (module comment).
__device__ __forceinline__ void split8(const float (&x)[8], uint4 (&out)[3]) {
  uint32_t w[3][4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    uint32_t b[2][3];
#pragma unroll
    for (int e = 0; e < 2; ++e) bf16_parts(x[2 * i + e], b[e]);
#pragma unroll
    for (int p = 0; p < 3; ++p) w[p][i] = b[0][p] | (b[1][p] << 16);
  }
#pragma unroll
  for (int p = 0; p < 3; ++p) out[p] = make_uint4(w[p][0], w[p][1], w[p][2], w[p][3]);
}

// Thread t's share of staging a chunk: stage t / (32 NT) of it, x row t / 4 % (8 NT) (of the 8 NT
// a stage holds), column group t % 4. Columns past the split's end (a last, partial chunk) stay
// unstaged: no stage reads them.
template <int NT>
struct XStager {
  static constexpr int C = f32_mma_chunk(NT);
  float v[8];
  __device__ __forceinline__ static int stage() { return static_cast<int>(threadIdx.x) / (NT * 32); }
  __device__ __forceinline__ static int row() { return static_cast<int>(threadIdx.x) / kColGroups % (NT * 8); }
  __device__ __forceinline__ static int grp() { return static_cast<int>(threadIdx.x) % kColGroups; }
  // The chunk whose first column is k0 (of the split's k_end).
  __device__ __forceinline__ void load(const LinearArgs& a, int64_t k0, int64_t k_end) {
    const int64_t c = k0 + kStage * stage() + 8 * grp();
    if (row() < a.nrows && c < k_end) {
      const float4* p = reinterpret_cast<const float4*>(a.x + row() * a.ldx + blockIdx.y * a.K + c);
      const float4 u = p[0], w = p[1];
      v[0] = u.x, v[1] = u.y, v[2] = u.z, v[3] = u.w, v[4] = w.x, v[5] = w.y, v[6] = w.z, v[7] = w.w;
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = 0.f;
    }
  }
  __device__ __forceinline__ void store(XStage<NT> (&s)[C]) const {
    uint4 parts[3];
    split8(v, parts);
#pragma unroll
    for (int p = 0; p < 3; ++p) s[stage()].v[p][grp()][row()] = parts[p];
  }
};

// A lane's 8 weights of one stage's row (columns 8 tig .. 8 tig + 7). BF16: as stored, 16 bytes.
// FP8 with ue8m0 scales: the 8 e4m3 codes and their block's scale, made bf16 at the MMA, exactly
// (an e4m3 value times a power of two has at most 4 significant bits).
template <WFormat F>
struct WChunk;
template <>
struct WChunk<WFormat::BF16> {
  uint4 v;
  __device__ __forceinline__ void load(const WeightRef& w, int64_t row, int64_t col) {
    v = load_stream(w.data + 2 * (row * w.cols + col));
  }
  __device__ __forceinline__ uint4 bf16x8() const { return v; }
};
template <>
struct WChunk<WFormat::FP8> {
  uint2 v;
  float s;
  __device__ __forceinline__ void load(const WeightRef& w, int64_t row, int64_t col) {
    v = __ldcs(reinterpret_cast<const uint2*>(w.data + row * w.cols + col));
    s = weight_scale(w, row, col);
  }
  __device__ __forceinline__ uint4 bf16x8() const {
    float f[8];
#if PLUMB_FP8_CVT
    fp8x4_cvt(v.x, s, f);
    fp8x4_cvt(v.y, s, f + 4);
#else
#pragma unroll
    for (int e = 0; e < 8; ++e) f[e] = e4m3_to_f32(static_cast<uint8_t>((e < 4 ? v.x : v.y) >> (8 * (e % 4)))) * s;
#endif
    uint32_t p[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) p[e] = bf16_hi16(f[2 * e]) | (bf16_hi16(f[2 * e + 1]) << 16);
    return make_uint4(p[0], p[1], p[2], p[3]);
  }
};

#endif

// grid (ceil(R / kBlockRows), groups, splits); NT: x rows up to 8 NT (a.nrows <= 8 NT). 2 blocks
// per SM (<= 128 registers) up to 32 rows; 64 rows' 64 accumulators need more (1 block per SM).
// Split z takes stages [z * stages / splits, (z + 1) * stages / splits) and writes its unrounded
// sums to part[z] when splits > 1, else y.
template <int NT, WFormat F>
__global__ void __launch_bounds__(kThreads, NT >= 8 ? 1 : 2)
    f32_mma_kernel(LinearArgs a, WeightRef w, int splits, float* part) {
#ifdef PLUMB_MMA_BF16
  constexpr int C = f32_mma_chunk(NT);
  __shared__ XStage<NT> stage[2][C];  // two chunks: one read while the next is staged
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int g = lane / 4, tig = lane % 4;
  const int64_t R = a.R, K = a.K, group = blockIdx.y, split = blockIdx.z;
  const int64_t st0 = split * (K / kStage) / splits, stages = (split + 1) * (K / kStage) / splits - st0;
  const int64_t k0 = st0 * kStage;  // this split's first column
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kBlockRows + warp * kWarpRows;
  // Lane's weight rows: m-tile i, half h (rows g and g + 8); rows past R read row R - 1 (not stored).
  int64_t wrow[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t r = r0 + 16 * i + 8 * h + g;
      wrow[i][h] = group * R + (r < R ? r : R - 1);
    }
  const int64_t wcol = k0 + 8 * tig;  // the lane's first column of the split's first stage
  // A ring of D stages of weights in registers: stage st in ring[st % D], its loads issued D - 1
  // stages before its MMAs.
  constexpr int D = f32_mma_depth(NT, F);
  WChunk<F> ring[D][2][2];
  const auto load_stage = [&](WChunk<F>(&c)[2][2], int64_t st) {
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) c[i][h].load(w, wrow[i][h], wcol + st * kStage);
  };
#pragma unroll
  for (int d = 0; d + 1 < D; ++d)
    if (d < stages) load_stage(ring[d], d);
  pdl_wait();  // (the weights are no kernel's output; x is the previous kernel's)
  pdl_release();
  const int64_t k_end = k0 + stages * kStage;  // the split's end
  XStager<NT> xs;
  xs.load(a, k0, k_end);
  xs.store(stage[0]);
  __syncthreads();
  float acc[2][NT][4] = {};
  // One stage's MMAs: x's parts from s, the weights from cur (a slot of the ring).
  const auto mma_stage = [&](const XStage<NT>& s, const WChunk<F>(&cur)[2][2]) {
    uint4 wb[2][2];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) wb[i][h] = cur[i][h].bf16x8();
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int p = 0; p < 3; ++p) {
        const uint4 q = s.v[p][tig][8 * j + g];  // x row 8 j + g, columns 8 tig .. 8 tig + 7
        const uint32_t b0[2] = {q.x, q.y}, b1[2] = {q.z, q.w};
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const uint32_t a0[4] = {wb[i][0].x, wb[i][1].x, wb[i][0].y, wb[i][1].y};
          const uint32_t a1[4] = {wb[i][0].z, wb[i][1].z, wb[i][0].w, wb[i][1].w};
          mma_bf16(acc[i][j], a0, b0);
          mma_bf16(acc[i][j], a1, b1);
        }
      }
  };
#pragma unroll 1
  for (int64_t s0 = 0; s0 < stages; s0 += D) {
#pragma unroll
    for (int d = 0; d < D; ++d) {  // d static: the ring's slots are registers
      const int64_t st = s0 + d;
      if (st >= stages) break;
      // stage st + D - 1 into the slot stage st - 1 left; at a chunk's first stage the next
      // chunk's x out before the MMAs, at its last stage that x staged (its buffer's last readers
      // passed the previous barrier)
      if (st + D - 1 < stages) load_stage(ring[(d + D - 1) % D], st + D - 1);
      const int64_t chunk = st / C;
      const int cs = static_cast<int>(st % C);
      const bool more = (chunk + 1) * C < stages;  // the same in every thread of the block
      if (more && cs == 0) xs.load(a, k0 + (chunk + 1) * C * kStage, k_end);
      mma_stage(stage[chunk & 1][cs], ring[d]);
      if (more && cs == C - 1) {
        xs.store(stage[(chunk + 1) & 1]);
        __syncthreads();
      }
    }
  }
  // acc[i][j][e]: weight row r0 + 16 i + g (+ 8 for e >= 2), x row 8 j + 2 tig + (e & 1).
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t r = r0 + 16 * i + g + 8 * (e >> 1), n = 8 * j + 2 * tig + (e & 1);
        if (r >= R || n >= a.nrows) continue;
        if (splits > 1)
          part[split_part_index(a, split, n, group * R + r)] = acc[i][j][e];
        else
          a.y[n * a.ldy + group * R + r] = a.round_bf16 ? round_bf16(acc[i][j][e]) : acc[i][j][e];
      }
#else
  pdl_begin();  // (HIP, never launched there: f32_mma_built() is false; and nvcc's host pass)
#endif
}

template <int NT>
gpuError_t launch_nt(const LinearArgs& a, const WeightRef& w, int splits, float* part, gpuStream_t s) {
  const dim3 grid(static_cast<unsigned>((a.R + kBlockRows - 1) / kBlockRows), static_cast<unsigned>(a.groups),
                  static_cast<unsigned>(splits));
  return w.format == WFormat::FP8 ? launch(f32_mma_kernel<NT, WFormat::FP8>, grid, kThreads, 0, s, a, w, splits, part)
                                  : launch(f32_mma_kernel<NT, WFormat::BF16>, grid, kThreads, 0, s, a, w, splits, part);
}

}  // namespace

bool f32_mma_built() {
#ifdef PLUMB_CUDA
  return true;
#else
  return false;
#endif
}

bool f32_mma_ok(const LinearArgs& a, const WeightRef& w) {
  const bool weight_ok = w.format == WFormat::BF16 || (w.format == WFormat::FP8 && !w.scale_f32);
  return f32_mma_built() && weight_ok && !a.round_w && !a.quant_x &&
         a.nrows >= 1 && a.nrows <= kF32MmaMaxRows && a.K > 0 && a.K % kStage == 0 && w.cols == a.K &&
         reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && a.ldx % 4 == 0 && reinterpret_cast<uintptr_t>(w.data) % 16 == 0;
}

int64_t f32_mma_blocks(const LinearArgs& a) { return (a.R + kBlockRows - 1) / kBlockRows * a.groups; }

int f32_mma_splits(const LinearArgs& a, int multiprocessors) {
  return split_k_ways(f32_mma_blocks(a), multiprocessors, std::min(a.K / kStage / 4, a.K / 256));
}

gpuError_t linear_f32_mma(const LinearArgs& a, const WeightRef& w, int splits, float* part, gpuStream_t s) {
  if (a.R <= 0 || a.groups <= 0) return gpuGetLastError();
  if (!f32_mma_ok(a, w)) return gpuErrorNotSupported;
  if (splits < 1 || (splits > 1 && !part) || splits > a.K / kStage) return gpuErrorNotSupported;
  const gpuError_t e = a.nrows <= 8    ? launch_nt<1>(a, w, splits, part, s)
                       : a.nrows <= 16 ? launch_nt<2>(a, w, splits, part, s)
                       : a.nrows <= 32 ? launch_nt<4>(a, w, splits, part, s)
                                       : launch_nt<8>(a, w, splits, part, s);
  return e != gpuSuccess || splits == 1 ? e : linear_split_sum(a, splits, part, s);
}

}  // namespace plumb::gpu::k
