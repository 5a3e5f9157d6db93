// linear() path (a): GEMV for few rows of x (decode). Memory-bound: the floor is weight bytes /
// HBM bandwidth (H200: ~4.2 TB/s copy rate; 33.5 MB of FP8 ~8 us, the 1.06 GB bf16 head ~250 us).
// Little's law: 4.2 TB/s x ~1 us loaded latency = ~4 MB in flight, ~32 KB per SM of 132. The
// previous kernel kept far less (121-128 registers holding 16 decoded floats per segment, <= 4 x
// 16 B per lane, x staged behind __syncthreads in 4096-column chunks): wo_b at 16%.
//
// A lane's batch: the raw loads of its warp's RPW rows at U warp steps (wraw16: the bytes and the
// scale's bits, undecoded: FP8 5 registers; a scale decoded at its load would stall the loop on
// each one). Then column by column, a quarter (4 columns) at a time: x by float4 loads, not staged
// (no barrier; the warps of an SM walk the same columns, so L1 hits), reused by the RPW rows (FP8,
// 4 rows, N 1: 1 B of x per weight byte, from L1); wdecode4 and fmaf (4 + 4 N floats live).
//
// v12 (issue 17): no ring. v10's ring (each block walking several tiles with 2 batches of raw
// loads in flight across them, the grid capped at the resident blocks) measured slower than one
// tile per block at B = 1, 8 and 32 on the H200 (docs/PERF.md v12), and its 48 instantiations
// doubled this file's device code. A block sums one tile; with act_fp8 (QX) its first batch of
// weight loads is issued before it stages x, so the staging runs under their latency.
//
// v13: a 1-row FP8 launch with whole segments (batch-1 decode's every FP8 GEMV) goes to
// gemv_row_kernel (linear_gemv_row.cu), the probe's shape: streaming weight loads, the scale's type a template
// argument, the x of a segment loaded before its rows' math. Same summation order, so the same
// bits as gemv_kernel (GpuOps.GemvRowsIndependentOfBatch compares them).
//
// FP8 decode: on CUDA sm_89+ the hardware conversion (fp8x4_cvt: cvt e4m3x2 -> f16x2, f16 -> f32,
// times the scale; exact, so the same floats): per weight 1/2 F2FP + 1 HADD2.F32-class convert +
// 1 FMUL on the float pipes, where the integer decode (HIP gfx90a, CUDA sm_80 / compute_80, or
// PLUMB_GPU_FP8_DECODE=int) costs ~3.5 integer ops on the half-rate integer pipe (~6-7 us for
// 33.5 M weights on 132 SMs, as much as the memory time).
//
// Split-K (few rows): S warps of a block share RPW rows, each summing a contiguous range of whole
// warp steps of K; partials added in shared memory in warp order (no atomics). plan_for: RPW 4
// (1 if even the widest split leaves the device short), S the smallest power of two giving 3/4 of
// target_blocks x kWarps warps (one wave at 2 blocks/SM): from the shape and the device only.
//
// A row's summation order depends on (R, K, groups, format, device) only, never on N or on how N
// is split into launches of <= 8: lane l of split s adds its segments s * P + l * 16 + m * kStep
// (m = 0, 1, ...) in column order, element by element, one fmaf chain per (row, x row); then
// warp_sum; then the S partials in warp order. RPW, U, N, the blocks per SM,
// the FP8 decode (exact either way) and the vector / element paths change which warp or load does
// what, not that order.
//
// act_fp8 (LinearArgs::quant_x, QX): the kernel takes x unquantized and each block stages its
// group's K columns of the launch's x rows in shared memory with the FP8 round trip applied
// (act_quant.h: a lane quantizes one 16-column segment, the 8 lanes of a 128-block share its amax
// by shuffles), instead of a quant_blocks launch writing a quantized copy first. The block's first
// batch of weight loads is issued before the staging, so its ~0.5-1 us run under their latency. x is then
// read from shared memory (swizzled: qx_offset) instead of through L1; the products and the order
// of every sum are the same, so the result is bitwise the separate launch's.
#include <cstdlib>
#include <cstring>

#include "plumb/backend/gpu/kernels/launch.h"
#include "plumb/backend/gpu/kernels/linear_gemv_shared.h"

namespace plumb::gpu::k {
using namespace gemv;
namespace {

constexpr int kMaxN = 8;                 // x rows per launch
// Lambdas of the kernel body inlined like __forceinline__ functions (hipcc kept register arrays
// of raw loads in scratch memory when it called such a lambda out of line).
#define PLUMB_INLINE __attribute__((always_inline))

// Rows per warp of a full-size shape (plan_for may take 1): f32 segments are 4x FP8's registers.
template <WFormat F>
constexpr int rpw_for() { return F == WFormat::F32 ? 2 : 4; }
// FP8 / FP4 weights with one x row (lean): 3 blocks per SM (<= 85 registers), 4 raw loads a lane a
// batch, the form of a standalone probe (scripts/device/probes/gemv_probe.cu, docs/PERF.md v12)
// that ran wq_b's 33.6 MB in 12.8 us (59 registers, 4 blocks per SM). Here it measured 24.5 us
// (the 128-register form 24-29 us): what else costs is for the probe's feature-by-feature run.
template <WFormat F, int NB>
constexpr bool lean() { return (F == WFormat::FP8 || F == WFormat::FP4) && NB == 1; }
// Warp steps per batch (U): ~128 B of raw loads per lane over RPW rows in one batch (F32 2 x 64 B,
// BF16 4 x 32 B, FP8 8 x 16 B, FP4 8 x 8 B; lean: 4 loads); for N 4 / 8 counted as if 4 rows even
// with 1 (ptxas hoists x loads, and spills beyond).
template <WFormat F, int NB, int RPW>
constexpr int unroll() {
  constexpr int b = lean<F, NB>() ? 4 : F == WFormat::F32 ? 2 : F == WFormat::BF16 ? 4 : 8;
  constexpr int r = NB <= 2 ? RPW : 4, u = b / r > 1 ? b / r : 1;
  return u;
}
// Blocks per SM: lean 3 (<= 85 registers; 2 x rows spilled at 4 rows a warp), else N <= 2 2
// (<= 128), else 1 (<= 255).
template <WFormat F, int NB>
constexpr int min_blocks() { return lean<F, NB>() ? 3 : NB <= 2 ? 2 : 1; }

// One column position c0 (16 columns, whole, aligned) of the warp's rows, from loaded segments, a
// quarter (4 columns) at a time: the NB x rows' 4 values, then each row's 4 decoded weights
// (wdecode4; HW: the hardware FP8 decode; bf16-rounded if RW) into its N sums. Each (row, x row)
// sum still takes its 16 products in column order; 4 + 4 NB floats live, not 16 + 16 NB.
template <WFormat F, int NB, int RPW, bool RW, bool HW, bool QX>
__device__ __forceinline__ void column(const WRaw<F> (&g)[RPW], const WeightRef& w, const float* const (&xr)[NB],
                                       int64_t c0, float (&acc)[RPW][NB]) {
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    float4 xv[NB];
#pragma unroll
    for (int n = 0; n < NB; ++n) xv[n] = xload4<QX>(xr[n], c0, q);
#pragma unroll
    for (int j = 0; j < RPW; ++j) {
      float wv[4];
      wdecode4<F, HW>(g[j], w, q, wv);
      if constexpr (RW) {
#pragma unroll
        for (int e = 0; e < 4; ++e) wv[e] = round_bf16(wv[e]);
      }
#pragma unroll
      for (int n = 0; n < NB; ++n) acc[j][n] = fma4(wv, xv[n], acc[j][n]);
    }
  }
}

// The raw loads of a lane's batch: nu (<= U) segments of the RPW rows at c, c + kStep, ..., all
// whole (load_batch), and their math once they are in (sum_batch).
template <WFormat F, int RPW, int U>
__device__ __forceinline__ void load_batch(const WeightRef& w, const int64_t (&row)[RPW], int64_t c, int nu,
                                           WRaw<F> (&g)[U][RPW]) {
#pragma unroll
  for (int u = 0; u < U; ++u)
    if (u < nu) {
#pragma unroll
      for (int j = 0; j < RPW; ++j) g[u][j] = wraw16<F>(w, row[j], c + u * kStep);
    }
}
template <WFormat F, int NB, int RPW, int U, bool RW, bool HW, bool QX>
__device__ __forceinline__ void sum_batch(const WRaw<F> (&g)[U][RPW], const WeightRef& w, const float* const (&xr)[NB],
                                          int64_t c, int nu, float (&acc)[RPW][NB]) {
#pragma unroll
  for (int u = 0; u < U; ++u)
    if (u < nu) column<F, NB, RPW, RW, HW, QX>(g[u], w, xr, c + u * kStep, acc);
}

// The same segments element by element (K not keeping 16-byte alignment, x or f32 scales
// unaligned, or the row's last, partial segment): the same products in the same order.
template <WFormat F, int NB, int RPW, bool RW, bool QX>
__device__ __forceinline__ void batch_scalar(const WeightRef& w, const int64_t (&row)[RPW], const float* const (&xr)[NB],
                                             int64_t c, int nu, int64_t K, float (&acc)[RPW][NB]) {
#pragma unroll 1
  for (int u = 0; u < nu; ++u)
#pragma unroll 1
    for (int e = 0; e < kSeg; ++e) {
      const int64_t col = c + u * kStep + e;
      if (col >= K) return;  // only the last segment of a row can be partial
      float xv[NB];
#pragma unroll
      for (int n = 0; n < NB; ++n) xv[n] = xload1<QX>(xr[n], col);
#pragma unroll
      for (int j = 0; j < RPW; ++j) {
        float wv = wload<F>(w, row[j], col);
        if constexpr (RW) wv = round_bf16(wv);
#pragma unroll
        for (int n = 0; n < NB; ++n) acc[j][n] = fmaf(wv, xv[n], acc[j][n]);
      }
    }
}

// The block's tile (blockIdx.x: kWarps / splits row groups of RPW rows), each warp its row
// group's RPW rows over split s's columns (lane by lane as in the header), batch after batch (the
// raw loads of a batch, then its sums), then finish. QX: x staged quantized in xs by the whole
// block (every thread reaches the barrier), with the first batch's loads already out.
template <WFormat F, int NB, int RPW, bool RW, bool HW, bool QX>
__device__ __forceinline__ void gemv_rows(const LinearArgs& a, const WeightRef& w, int splits, bool vec_ok, bool x4,
                                          Partials<RPW, NB>& part, float* xs) {
  constexpr int U = unroll<F, NB, RPW>();
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, s = warp % splits;
  const int64_t g = blockIdx.y, R = a.R, K = a.K;
  const float* xr[NB];  // x rows past nrows read the last one (never stored)
#pragma unroll
  for (int n = 0; n < NB; ++n) {
    const int64_t xn = n < a.nrows ? n : a.nrows - 1;
    xr[n] = QX ? xs + xn * qx_row(K) : a.x + xn * a.ldx + g * K;
  }
  const int64_t per = ((K + kStep - 1) / kStep + splits - 1) / splits * kStep;  // columns of a split
  const int64_t ce = K < (s + 1) * per ? K : (s + 1) * per;
  const int64_t c0 = s * per + lane * kSeg;                                        // the lane's first column
  const int nseg = c0 < ce ? static_cast<int>((ce - c0 + kStep - 1) / kStep) : 0;  // its segments a row
  const int nb = (nseg + U - 1) / U;                                               // its batches
  const int64_t r0 = (static_cast<int64_t>(blockIdx.x) * (kWarps / splits) + warp / splits) * RPW;
  const bool live = r0 < R;
  int64_t row[RPW];  // rows past R read row R - 1, never stored
#pragma unroll
  for (int j = 0; j < RPW; ++j) row[j] = g * R + (r0 + j < R ? r0 + j : R - 1);
  const auto col_of = [&](int b) PLUMB_INLINE { return c0 + static_cast<int64_t>(b) * (U * kStep); };
  const auto nu_of = [&](int b) PLUMB_INLINE { return nseg - b * U < U ? nseg - b * U : U; };
  const auto vec = [&](int b) PLUMB_INLINE { return vec_ok && col_of(b) + (nu_of(b) - 1) * kStep + kSeg <= K; };

  float acc[RPW][NB] = {};
  WRaw<F> buf[U][RPW];
  if (live && nb > 0 && vec(0)) load_batch<F, RPW, U>(w, row, col_of(0), nu_of(0), buf);
  if constexpr (QX) {
    stage_quant_x(a, x4, xs);
    __syncthreads();
  }
  if (live) {
#pragma unroll 1
    for (int b = 0; b < nb; ++b) {
      const int64_t c = col_of(b);
      const int nu = nu_of(b);
      if (vec(b)) {
        if (b > 0) load_batch<F, RPW, U>(w, row, c, nu, buf);
        sum_batch<F, NB, RPW, U, RW, HW, QX>(buf, w, xr, c, nu, acc);
      } else {
        batch_scalar<F, NB, RPW, RW, QX>(w, row, xr, c, nu, K, acc);
      }
    }
  }
  finish<NB, RPW>(a, r0, lane, warp, splits, acc, part);
}

// Block: one tile of kWarps / splits row groups of RPW rows, each summed by `splits` consecutive
// warps. HW: the FP8 decode by the hardware conversion (PLUMB_FP8_CVT).
// QX: x quantized into dynamic shared memory first (no bf16 weight rounding: linear() keeps
// act_fp8 with bf16_weight on the separate launch).
template <WFormat F, int NB, int RPW, bool HW, bool QX>
__global__ void __launch_bounds__(kThreads, (min_blocks<F, NB>()))  // (parenthesized: a macro on HIP)
    gemv_kernel(LinearArgs a, WeightRef w, int splits, bool vec_ok, bool x4) {
  pdl_begin();
  __shared__ Partials<RPW, NB> part;
  if constexpr (QX) {
    PLUMB_DYNAMIC_SHARED(float4, qx_smem);
    gemv_rows<F, NB, RPW, false, HW, true>(a, w, splits, vec_ok, x4, part, reinterpret_cast<float*>(qx_smem));
  } else if (a.round_w) {  // a template argument: a run-time test per segment costs registers
    gemv_rows<F, NB, RPW, true, HW, false>(a, w, splits, vec_ok, x4, part, nullptr);
  } else {
    gemv_rows<F, NB, RPW, false, HW, false>(a, w, splits, vec_ok, x4, part, nullptr);
  }
}

// See the header: from the weight's shape and the device, never from N.
Plan plan_for(const LinearArgs& a, int64_t target_blocks) {
  const int64_t want = target_blocks * kWarps * 3 / 4, steps = (a.K + kStep - 1) / kStep;
  int max_splits = 1;
  while (max_splits * 2 <= kWarps && max_splits * 2 <= steps) max_splits *= 2;
  const auto warps = [&](int rpw, int s) { return (a.R + rpw - 1) / rpw * a.groups * s; };
  const int rpw = warps(4, max_splits) >= want ? 4 : 1;
  int s = 1;
  while (s < max_splits && warps(rpw, s) < want) s *= 2;
  return {rpw, s};
}

// Grid: one block per tile and group.
template <WFormat F, int NB, int RPW, bool HW, bool QX>
gpuError_t launch_gemv(const LinearArgs& a, const WeightRef& w, int splits, bool vec_ok, bool x4, gpuStream_t s) {
  const int64_t rows_per_tile = static_cast<int64_t>(kWarps / splits) * RPW, tiles = (a.R + rows_per_tile - 1) / rows_per_tile;
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(a.groups));
  const std::size_t smem = QX ? static_cast<std::size_t>(a.nrows * qx_row(a.K)) * sizeof(float) : 0;
#ifdef PLUMB_CUDA
  // The default limit (48 KB) counts the kernel's static part[] too: past it, opt in (<= kQxSmemMax).
  // (K = 4,096 at N = 3 stages exactly 48 KB of x: without part[] in the sum the launch failed.)
  constexpr std::size_t kStaticSmem = sizeof(Partials<RPW, NB>);
  if (smem > 0 && smem + kStaticSmem > 48 * 1024) {
    const gpuError_t e = cudaFuncSetAttribute(gemv_kernel<F, NB, RPW, HW, QX>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != gpuSuccess) return e;
  }
#endif
  return launch(gemv_kernel<F, NB, RPW, HW, QX>, grid, kThreads, smem, s, a, w, splits, vec_ok, x4);
}

template <WFormat F, int NB, bool HW, bool QX>
gpuError_t launch_gemv(const LinearArgs& a, const WeightRef& w, Plan p, bool vec_ok, bool x4, gpuStream_t s) {
  if (p.rpw > 1) return launch_gemv<F, NB, rpw_for<F>(), HW, QX>(a, w, p.splits, vec_ok, x4, s);
  return launch_gemv<F, NB, 1, HW, QX>(a, w, p.splits, vec_ok, x4, s);
}

}  // namespace

namespace gemv {
// The FP8 decode: the hardware conversion where the device has one (the kernel falls back to the
// integer decode where it does not), unless PLUMB_GPU_FP8_DECODE=int asks for the integer decode
// (an A/B of the two in one process; both are exact, so the results are the same bits). Read at
// each call, so a test can switch it. HIP has the integer decode only.
#ifndef PLUMB_HIP
bool fp8_hw_decode() {
  const char* e = std::getenv("PLUMB_GPU_FP8_DECODE");
  return !(e && std::strcmp(e, "int") == 0);
}
#endif

Setup setup_for(const LinearArgs& a, const WeightRef& w, int64_t target_blocks) {
  // 16-byte loads need x's rows and group columns 4-float aligned and f32 scales 4-byte aligned
  // (x staged in shared memory, quant_x, is aligned whatever the input).
  const bool x_ok = reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && a.ldx % 4 == 0 && a.K % 4 == 0;
  const bool scale_ok = !(w.format == WFormat::FP8 && w.scale_f32) || reinterpret_cast<uintptr_t>(w.scale) % 4 == 0;
  return {plan_for(a, target_blocks), vec16_ok(w.format, a.K) && (x_ok || a.quant_x) && scale_ok, x_ok};
}
}  // namespace gemv

namespace {
template <WFormat F, int NB, bool QX>
gpuError_t launch_gemv(const LinearArgs& a, const WeightRef& w, Plan p, bool vec_ok, bool x4, gpuStream_t s) {
#ifndef PLUMB_HIP
  if constexpr (F == WFormat::FP8)
    if (fp8_hw_decode()) return launch_gemv<F, NB, true, QX>(a, w, p, vec_ok, x4, s);
#endif
  return launch_gemv<F, NB, false, QX>(a, w, p, vec_ok, x4, s);
}

template <WFormat F, int NB>
gpuError_t launch_gemv(const LinearArgs& a, const WeightRef& w, Plan p, bool vec_ok, bool x4, gpuStream_t s) {
  return a.quant_x ? launch_gemv<F, NB, true>(a, w, p, vec_ok, x4, s) : launch_gemv<F, NB, false>(a, w, p, vec_ok, x4, s);
}

}  // namespace

bool gemv_quant_x_ok(const LinearArgs& a) {
  const int64_t rows = a.nrows < kMaxN ? a.nrows : kMaxN;
  return !a.round_w && a.K > 0 && rows * qx_row(a.K) * static_cast<int64_t>(sizeof(float)) <= kQxSmemMax;
}

gpuError_t linear_gemv(const LinearArgs& a, const WeightRef& w, int64_t target_blocks, gpuStream_t s) {
  if (a.nrows <= 0 || a.R <= 0 || a.groups <= 0) return gpuGetLastError();
  if (a.quant_x && !gemv_quant_x_ok(a)) return gpuErrorNotSupported;  // linear() checks first
  const Setup set = setup_for(a, w, target_blocks);
  const Plan p = set.plan;
  for (int64_t n0 = 0; n0 < a.nrows; n0 += kMaxN) {  // forced GEMV on many rows: 8 rows a launch
    LinearArgs b = a;
    b.x = a.x + n0 * a.ldx;
    b.y = a.y + n0 * a.ldy;
    b.nrows = a.nrows - n0 < kMaxN ? a.nrows - n0 : kMaxN;
    if (p.rpw == 4 && row_form(b, w, set.vec_ok)) {
      const GemvJob job{b, w};
      const gpuError_t e = launch_row_jobs({&job, 1}, {&set, 1}, s);
      if (e != gpuSuccess) return e;
      continue;
    }
    const gpuError_t e = dispatch_format(w.format, [&]<WFormat F>() {
      if (b.nrows == 1) return launch_gemv<F, 1>(b, w, p, set.vec_ok, set.x_ok, s);
      if (b.nrows == 2) return launch_gemv<F, 2>(b, w, p, set.vec_ok, set.x_ok, s);
      if (b.nrows <= 4) return launch_gemv<F, 4>(b, w, p, set.vec_ok, set.x_ok, s);
      return launch_gemv<F, 8>(b, w, p, set.vec_ok, set.x_ok, s);
    });
    if (e != gpuSuccess) return e;
  }
  return gpuGetLastError();
}

}  // namespace plumb::gpu::k
