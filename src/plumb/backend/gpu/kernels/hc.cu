// mHC kernels (MODEL-SPEC 3.2): the same function as cpu/cpu_hc.cpp. The per-token scalar tail
// runs one output per thread (each gate is its own chain of the CPU's operations) and Sinkhorn one
// matrix element per lane of one warp, each doing exactly the CPU's arithmetic for its value; every
// product/sum whose rounding the CPU fixes uses the _rn intrinsics so nvcc/hipcc cannot contract it
// into an FMA (the CPU build does not). The long reductions (fn . x, sum x^2) use a parallel order
// unless the caller asks for the CPU's (cpu_order.h).
#include "plumb/backend/gpu/kernels/hc.h"
#include "plumb/backend/gpu/kernels/launch.h"

#include "plumb/backend/gpu/gpu_numerics.h"
#include "plumb/backend/gpu/kernels/cpu_order.h"
#include "plumb/backend/gpu/kernels/elementwise.h"
#include "plumb/backend/gpu/kernels/norm_row.h"

namespace plumb::gpu::k {
namespace {

constexpr int kThreads = 256;  // a multiple of kWarp on both platforms
constexpr int kWarps = kThreads / kWarp;
constexpr int kMaxOut = static_cast<int>(kHcMaxOut);
// Fast order: pass 1 splits a token into at most kMaxSlices slices (hc_slices); pass 2's block
// (n, c) mixes columns [c * kDSlice, (c + 1) * kDSlice), kPer of them per thread.
constexpr int64_t kMaxSlices = 64;
constexpr int kGroup = 4;  // pass 1's tokens a block from kHcGroupFrom tokens (hc_partial_kernel)
constexpr int kPer = 4;
constexpr int64_t kDSlice = kPer * kThreads;
// Streams a thread of pass 2 or of hc_post holds in registers (more: a plain loop, same arithmetic).
// Loads that fill such register arrays take clamped, always valid indices instead of a condition:
// ptxas then issues them all before the first use (a predicated load does not batch).
constexpr int kTileHc = 4;
// With post and comb n_out = hc * (2 + hc) <= kMaxOut, so hc <= kSinkMaxHc and the hc x hc
// Sinkhorn matrix fits one warp (32 or 64 lanes).
constexpr int kSinkMaxHc = 5;
static_assert(kSinkMaxHc * (2 + kSinkMaxHc) <= kMaxOut && (kSinkMaxHc + 1) * (3 + kSinkMaxHc) > kMaxOut);
static_assert(kSinkMaxHc * kSinkMaxHc <= 32 && kThreads >= kWarp && kThreads > kMaxOut);

__device__ __forceinline__ float sigmoid(float x) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, exp_cr(-x))); }
__device__ __forceinline__ float max_of(float a, float b) { return a < b ? b : a; }  // std::max

// g[q] = v of lane first + q * stride for q < kSinkMaxHc (all of them, so that the shuffles go out
// together; those at q >= hc are not used).
__device__ __forceinline__ void gather(float v, int first, int stride, float (&g)[kSinkMaxHc]) {
#pragma unroll
  for (int q = 0; q < kSinkMaxHc; ++q) g[q] = shfl_from(v, first + q * stride);
}
// The CPU's s = 0; s += g[q] for q = 0 .. hc-1.
__device__ __forceinline__ float sum_in_order(const float (&g)[kSinkMaxHc], int hc) {
  float s = 0.f;
#pragma unroll
  for (int q = 0; q < kSinkMaxHc; ++q)
    if (q < hc) s = __fadd_rn(s, g[q]);
  return s;
}

// Sinkhorn on the hc x hc logits C (shared memory) by warp 0, every lane of which calls it
// (hc <= kSinkMaxHc): row softmax + eps, a column normalisation, then iters - 1 rounds of (row,
// column) normalisation; every divisor is sum + eps (cpu_hc.cpp). Lane l < hc*hc holds element
// (i, j) = (l / hc, l % hc) in a register, gathers its row or column by shuffles and forms the
// CPU's max / sum over it in index order, then its own element exactly as the CPU's serial loop
// does; lanes past hc*hc shadow lane 0. Writes the result to out[0, hc*hc).
__device__ void sinkhorn_warp(const float* C, int hc, int64_t iters, float eps, float* out) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int e = lane < hc * hc ? lane : 0, i = e / hc, j = e % hc, row0 = i * hc;
  float g[kSinkMaxHc];
  float v = C[e];
  gather(v, row0, 1, g);
  float mx = g[0];
#pragma unroll
  for (int q = 1; q < kSinkMaxHc; ++q)
    if (q < hc) mx = max_of(mx, g[q]);
  const float ex = exp_cr(v - mx);
  gather(ex, row0, 1, g);
  v = __fadd_rn(__fdiv_rn(ex, sum_in_order(g, hc)), eps);
  gather(v, j, hc, g);
  v = __fdiv_rn(v, __fadd_rn(sum_in_order(g, hc), eps));
  for (int64_t it = 1; it < iters; ++it) {
    gather(v, row0, 1, g);
    v = __fdiv_rn(v, __fadd_rn(sum_in_order(g, hc), eps));
    gather(v, j, hc, g);
    v = __fdiv_rn(v, __fadd_rn(sum_in_order(g, hc), eps));
  }
  if (lane < hc * hc) out[lane] = v;
}

// The weights thread o's gate reads (o < used): scale[0] and base[o] for pre (o < hc), scale[1]
// for post (o < 2hc), scale[2] for the comb logits. Loaded before the reductions, so that their
// latency hides behind them.
struct Gate {
  float scale = 0.f, base = 0.f;
};
__device__ __forceinline__ Gate gate_weights(const WeightRef& base, const WeightRef& scale, int hc, int used) {
  const int o = static_cast<int>(threadIdx.x);
  if (o >= used) return {};
  return {weight_at(scale, o < hc ? 0 : (o < 2 * hc ? 1 : 2), 0), weight_at(base, o, 0)};
}

// The per-token tail after the reductions (all threads call it; block-uniform arguments; sums
// complete in shared memory): sums[k] = fn_k . x for k < n_out, sums[kMaxOut] = sum x^2; used =
// with_post ? n_out : hc and g = gate_weights(.., used). Thread o < used forms m_o and its gate
// with the CPU's operations for that output: pre lands in shared memory, and with `with_post`
// post of token n (global) and the comb logits (C, shared), then warp 0 runs Sinkhorn and writes
// comb. pre is complete on return; Sinkhorn needs no later barrier.
__device__ void mix_tail(const float* sums, int64_t n, int hc, int64_t W, Gate g, int used, int64_t iters,
                         float hc_eps, float norm_eps, bool with_post, float* pre, float* C, float* post, float* comb) {
  const int o = static_cast<int>(threadIdx.x);
  if (o < used) {
    const float ms = __fadd_rn(__fmul_rn(sums[kMaxOut], 1.0f / static_cast<float>(W)), norm_eps);
    const float r = __fdiv_rn(1.0f, __fsqrt_rn(ms));
    const float z = __fadd_rn(__fmul_rn(__fmul_rn(sums[o], r), g.scale), g.base);
    if (o < hc) pre[o] = __fadd_rn(sigmoid(z), hc_eps);
    else if (o < 2 * hc) post[n * hc + (o - hc)] = __fmul_rn(2.0f, sigmoid(z));
    else C[o - 2 * hc] = z;
  }
  __syncthreads();
  if (with_post && static_cast<int>(threadIdx.x) < kWarp) sinkhorn_warp(C, hc, iters, hc_eps, comb + n * hc * hc);
}

// y[n, d] = sum_i pre_i * X[n, i, d] for d in [d0, d1), streams added in order.
__device__ void mix_streams(const float* x, const float* pre, int hc, int64_t D, int64_t d0, int64_t d1, bool bf16_out,
                            float* y) {
  for (int64_t d = d0 + threadIdx.x; d < d1; d += blockDim.x) {
    float a = 0.f;
    for (int i = 0; i < hc; ++i) a = __fadd_rn(a, __fmul_rn(pre[i], x[i * D + d]));
    y[d] = bf16_out ? round_bf16(a) : a;
  }
}

__device__ __forceinline__ float fn_at(const WeightRef& fn, int k, int64_t i, int64_t W) {
  return fn.format == WFormat::F32 ? reinterpret_cast<const float*>(fn.data)[k * W + i] : weight_at(fn, k, i);
}

// The CPU's order, one block per token: group k of 8 lanes computes dot k as cpu::dot does
// (cpu_order.h); thread 0 first sums the squares in index order, as cpu_hc.cpp's loop.
__global__ void __launch_bounds__(kThreads)
    hc_mix_cpu_order_kernel(const float* X, int hc, int64_t D, WeightRef fn, WeightRef base, WeightRef scale, int n_out,
                            int64_t iters, float hc_eps, float norm_eps, bool bf16_out, float* y, float* post,
                            float* comb) {
  pdl_begin();
  __shared__ float sums[kMaxOut + 1], pre[kMaxOut], C[kMaxOut];
  const int64_t n = blockIdx.x, W = hc * D;
  const float* x = X + n * W;
  const bool with_post = post != nullptr;
  const int used = with_post ? n_out : hc;
  const Gate g = gate_weights(base, scale, hc, used);
  if (threadIdx.x == 0) {
    float ss = 0.f;
    for (int64_t i = 0; i < W; ++i) ss = __fadd_rn(ss, __fmul_rn(x[i], x[i]));
    sums[kMaxOut] = __fadd_rn(0.f, ss);  // as a one-partial sum from zero
  }
  const int grp = threadIdx.x / 8, sub = threadIdx.x % 8;
  for (int k0 = 0; k0 < n_out; k0 += kThreads / 8) {  // the same trip count in every lane
    const int k = k0 + grp;
    const float v = cpu_order_sum8([&](int64_t i) { return k < n_out ? __fmul_rn(fn_at(fn, k, i, W), x[i]) : 0.f; }, W, sub);
    if (sub == 0 && k < n_out) sums[k] = __fadd_rn(0.f, v);
  }
  __syncthreads();
  mix_tail(sums, n, hc, W, g, used, iters, hc_eps, norm_eps, with_post, pre, C, post, comb);
  mix_streams(x, pre, hc, D, 0, D, bf16_out, y + n * D);
}

// Lane 0's warp sums of acc[0, NK) into red_row[k] for k < n_out <= NK: no branch between the
// sums, so that their shuffles go out together (each sum is warp_sum, as ever).
template <int NK>
__device__ __forceinline__ void warp_sums_to(const float (&acc)[kMaxOut], int n_out, int lane, float* red_row) {
  float tot[NK];
#pragma unroll
  for (int k = 0; k < NK; ++k) tot[k] = warp_sum(acc[k]);
  if (lane == 0) {
#pragma unroll
    for (int k = 0; k < NK; ++k)
      if (k < n_out) red_row[k] = tot[k];
  }
}

// Pass 1's sums of one block for NK >= n_out dot products of each of its T tokens (x[t]: token
// t's streams), F32: fn stored as f32 (else decoded by weight_at). Every row index is clamped to a
// valid one and no load is predicated, so that ptxas issues an element's NK weight loads together
// (with `if (k < n_out)` around each it issued them one after another: ~10 us a launch for one
// token's 1.5 MB at B = 1, PERF.md v21); sums k >= n_out are formed on repeated rows and never
// stored. Each weight element loaded serves the T tokens; a token's own arithmetic (its elements
// per thread, in order) is the same for every T.
template <int NK, int T, bool F32>
__device__ __forceinline__ void hc_partial_sums(const float* const (&x)[T], int64_t i0, int64_t i1, int64_t W,
                                                const WeightRef& fn, int n_out, float (&acc)[T][kMaxOut],
                                                float (&ss)[T]) {
  const float* f32 = reinterpret_cast<const float*>(fn.data);
  for (int64_t i = i0 + threadIdx.x; i < i1; i += kThreads) {
    float v[T];
#pragma unroll
    for (int t = 0; t < T; ++t) v[t] = x[t][i];
    float w[NK];
#pragma unroll
    for (int k = 0; k < NK; ++k) {
      const int r = k < n_out ? k : n_out - 1;
      w[k] = F32 ? f32[r * W + i] : weight_at(fn, r, i);
    }
#pragma unroll
    for (int t = 0; t < T; ++t) {
      ss[t] += v[t] * v[t];
#pragma unroll
      for (int k = 0; k < NK; ++k) acc[t][k] += w[k] * v[t];
    }
  }
}

// Fast order, pass 1: grid (ceil(N / T), S); block (g, s) reduces elements [s * slice, (s + 1) *
// slice) of the streams of tokens g * T .. g * T + T - 1: all n_out dot products and sum x^2 in
// registers, warp sums, warps added in order. part[(n * S + s) * (kMaxOut + 1) + k] (k =
// kMaxOut: sum x^2). A token's reduction is spread over S blocks so that a decode step's few
// tokens fill the device; T > 1 (kGroup, from kHcGroupFrom tokens) reads each weight element once
// for T tokens: at T = 1 a 4,096-token prefill read fn (1.5 MB a token with post) 4,096 times
// from L2, 8.6 ms of its 158 (PERF.md v26). A token's sums are the same bits for every T (the
// same elements per thread and order, the same warp and block sums), so they do not depend on
// the batch (hc.h). A group past N repeats token N - 1 in its loads and stores nothing for it.
template <int NK, int T>
__global__ void __launch_bounds__(kThreads) hc_partial_kernel(const float* X, int hc, int64_t D, WeightRef fn, int n_out,
                                                              int64_t N, int64_t slice, float* part) {
  pdl_begin();
  __shared__ float red[T][kWarps][kMaxOut + 1];
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * T, s = blockIdx.y, S = gridDim.y, W = hc * D;
  const float* x[T];
#pragma unroll
  for (int t = 0; t < T; ++t) x[t] = X + (n0 + t < N ? n0 + t : N - 1) * W;
  const int64_t i1 = (s + 1) * slice < W ? (s + 1) * slice : W;
  float acc[T][kMaxOut], ss[T];
#pragma unroll
  for (int t = 0; t < T; ++t) {
    ss[t] = 0.f;
#pragma unroll
    for (int k = 0; k < kMaxOut; ++k) acc[t][k] = 0.f;
  }
  if (fn.format == WFormat::F32)
    hc_partial_sums<NK, T, true>(x, s * slice, i1, W, fn, n_out, acc, ss);
  else
    hc_partial_sums<NK, T, false>(x, s * slice, i1, W, fn, n_out, acc, ss);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
#pragma unroll
  for (int t = 0; t < T; ++t) {
    const float sst = warp_sum(ss[t]);
    if (lane == 0) red[t][warp][kMaxOut] = sst;
    warp_sums_to<NK>(acc[t], n_out, lane, red[t][warp]);  // n_out is uniform over the block: every lane shuffles
  }
  __syncthreads();
  const int k = static_cast<int>(threadIdx.x);
  if (k < n_out || k == kMaxOut) {
    for (int t = 0; t < T && n0 + t < N; ++t) {
      float tot = 0.f;
      for (int w = 0; w < kWarps; ++w) tot = __fadd_rn(tot, red[t][w][k]);
      part[((n0 + t) * S + s) * (kMaxOut + 1) + k] = tot;
    }
  }
}

// Sum k of token n: its S partials added in slice order, B loads out at once (hc_finish: all of
// them, 1 <= S <= kMaxSlices by hc_slices; fewer where registers are short).
template <int B>
__device__ __forceinline__ float token_sum(const float* part, int64_t n, int64_t S, int k) {
  static_assert(kMaxSlices % B == 0);
  const float* p = part + n * S * (kMaxOut + 1) + k;
  float t = 0.f;
#pragma unroll
  for (int s0 = 0; s0 < kMaxSlices; s0 += B) {
    if (s0 > 0 && s0 >= S) break;
    float v[B];
#pragma unroll
    for (int s = 0; s < B; ++s) v[s] = p[(s0 + s < S ? s0 + s : S - 1) * (kMaxOut + 1)];
#pragma unroll
    for (int s = 0; s < B; ++s)
      if (s0 + s < S) t = __fadd_rn(t, v[s]);
  }
  return t;
}

// Pass 2's tiled mix (hc <= kTileHc): column dc's stream values of token x into registers (the
// indices clamped, so that the loads issue together), pre into registers (0 past hc), and
// mix_streams' arithmetic on a column so held: sum_i pre_i X[i] in stream order, then the rounding.
__device__ __forceinline__ void load_column(const float* x, int hc, int64_t D, int64_t dc, float (&xv)[kTileHc]) {
#pragma unroll
  for (int i = 0; i < kTileHc; ++i) xv[i] = x[(i < hc ? i : hc - 1) * D + dc];
}
__device__ __forceinline__ void pre_regs(const float* pre, int hc, float (&pr)[kTileHc]) {
#pragma unroll
  for (int i = 0; i < kTileHc; ++i) pr[i] = i < hc ? pre[i] : 0.f;
}
__device__ __forceinline__ float mix_column(const float (&pr)[kTileHc], const float (&xv)[kTileHc], int hc,
                                            bool bf16_out) {
  float a = 0.f;
#pragma unroll
  for (int i = 0; i < kTileHc; ++i)
    if (i < hc) a = __fadd_rn(a, __fmul_rn(pr[i], xv[i]));
  return bf16_out ? round_bf16(a) : a;
}

// Fast order, pass 2: grid (N, Y); block (n, c) adds token n's S partials in order, runs the
// tail (post, comb and Sinkhorn by column block 0 only: the others need pre alone) and mixes the
// streams for its kDSlice columns. Every global load (partials, gate weights, this thread's X
// values) is issued before the first barrier.
__global__ void __launch_bounds__(kThreads)
    hc_finish_kernel(const float* X, int hc, int64_t D, WeightRef base, WeightRef scale, int n_out, int64_t S,
                     const float* part, int64_t iters, float hc_eps, float norm_eps, bool bf16_out, float* y,
                     float* post, float* comb) {
  pdl_begin();
  __shared__ float sums[kMaxOut + 1], pre[kMaxOut], C[kMaxOut];
  const int64_t n = blockIdx.x, c = blockIdx.y, W = hc * D;
  const bool with_post = post != nullptr && c == 0;
  const int used = with_post ? n_out : hc;
  const int k = static_cast<int>(threadIdx.x);
  const Gate g = gate_weights(base, scale, hc, used);
  const float* x = X + n * W;
  const int64_t d0 = c * kDSlice, d1 = d0 + kDSlice < D ? d0 + kDSlice : D;
  const bool tiled = hc >= 1 && hc <= kTileHc && d1 > d0;  // (else the clamped indices below are not valid)
  float xv[kPer][kTileHc];  // [r][i]: X[n, i, d0 + k + r * kThreads] where i < hc and that column < d1
  if (tiled) {
#pragma unroll
    for (int r = 0; r < kPer; ++r) {
      const int64_t d = d0 + k + r * kThreads;
      load_column(x, hc, D, d < d1 ? d : d1 - 1, xv[r]);
    }
  }
  if (k < used || k == kMaxOut) sums[k] = token_sum<kMaxSlices>(part, n, S, k);
  __syncthreads();
  mix_tail(sums, n, hc, W, g, used, iters, hc_eps, norm_eps, with_post, pre, C, post, comb);
  float* yn = y + n * D;
  if (!tiled) {
    mix_streams(x, pre, hc, D, d0, d1, bf16_out, yn);
    return;
  }
  // The values loaded above (kDSlice = kPer * kThreads: they are all of this block's columns).
  float pr[kTileHc];
  pre_regs(pre, hc, pr);
#pragma unroll
  for (int r = 0; r < kPer; ++r) {
    const int64_t d = d0 + k + r * kThreads;
    if (d < d1) yn[d] = mix_column(pr, xv[r], hc, bf16_out);
  }
}

// Pass 2 with the rms_norm that follows hc_pre (hc_mix_norm): grid N, one token a block of T =
// norm_threads(D) threads (hc <= kTileHc, T > kMaxOut). Thread t forms the sums it owns as
// hc_finish does, then the tail, then mixes columns t + k T (k < PER) with hc_finish's mix_column;
// those are the elements norm_row_regs gives thread t of the norm's own launch (same T), so the norm
// (sum_squares_regs, norm_scale_regs) and its act_fp8 copy (act_fp8_row) run on the mixed values
// in registers: the same bits as hc_finish, then rms_norm. hc_pre's y is not stored (the norm is
// its one reader). Every global load (gate and norm weights, this thread's X values, the
// partials) is issued before the first barrier.
struct NormArgs {
  WeightRef w;
  bool weighted;  // a weight and not bf16 steps (rms_norm_rows)
  float eps;
  bool bf16_steps, round_out;
  float* y;  // [N, D]
  float* q;  // [N, D] the act_fp8 copy, or null
};
template <int PER>
__global__ void __launch_bounds__(1024, 1)
    hc_finish_norm_kernel(const float* X, int hc, int64_t D, WeightRef base, WeightRef scale, int n_out, int64_t S,
                          const float* part, int64_t iters, float hc_eps, float norm_eps, bool bf16_mix, float* post,
                          float* comb, NormArgs nm) {
  pdl_begin();
  __shared__ float sums[kMaxOut + 1], pre[kMaxOut], C[kMaxOut];
  __shared__ float scratch[1024 / 32], chunk[PER * 1024 / 32];  // block_sum's, act_fp8_row's
  const int64_t n = blockIdx.x, W = hc * D;
  const int t = static_cast<int>(threadIdx.x), T = static_cast<int>(blockDim.x), di = static_cast<int>(D);
  const bool with_post = post != nullptr;
  const int used = with_post ? n_out : hc;
  const Gate g = gate_weights(base, scale, hc, used);
  const float* x = X + n * W;
  float xv[PER][kTileHc];  // [k][i]: X[n, i, t + k T], the column clamped below D
#pragma unroll
  for (int k = 0; k < PER; ++k) load_column(x, hc, D, t + k * T < di ? t + k * T : di - 1, xv[k]);
  float wv[PER] = {};
  if (nm.weighted) norm_weights<PER>(nm.w, t, T, di, wv);
  if (t < used || t == kMaxOut) sums[t] = token_sum<16>(part, n, S, t);  // (1,024 threads: 64 registers)
  __syncthreads();
  mix_tail(sums, n, hc, W, g, used, iters, hc_eps, norm_eps, with_post, pre, C, post, comb);
  float pr[kTileHc];
  pre_regs(pre, hc, pr);
  float v[PER];  // hc_pre's y at this thread's columns (0 past D, as norm_row_regs loads it)
#pragma unroll
  for (int k = 0; k < PER; ++k) v[k] = t + k * T < di ? mix_column(pr, xv[k], hc, bf16_mix) : 0.f;
  const float ss = sum_squares_regs<PER>(v, di, nm.bf16_steps, scratch);
  float out[PER];
  norm_scale_regs<PER>(v, wv, ss, di, nm.weighted, nm.eps, nm.bf16_steps, nm.round_out, out);
  float* o = nm.y + n * D;
#pragma unroll
  for (int k = 0; k < PER; ++k)
    if (t + k * T < di) o[t + k * T] = out[k];
  if (nm.q) act_fp8_row<PER>(out, t, T, di, nm.q + n * D, chunk);
}

// y[n, j, d] = post_j * out[n, d] + sum_i C[i][j] * X[n, i, d] (C transposed: the sum runs over
// i), streams added in order. I: the index type of the element loop (32 bits where the total
// allows, which makes the divisions cheap; the offsets are formed in 64 bits).
template <class I>
__device__ __forceinline__ void hc_post_elements(const float* out, const float* X, const float* post,
                                                 const float* comb, I total, I hc, I D, bool bf16_out, float* y) {
  const int h = static_cast<int>(hc);
  for (I e = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x); e < total;
       e += static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x)) {
    const I d = e % D, nj = e / D, j = nj % hc, n = nj / hc;
    const float* x = X + static_cast<int64_t>(n) * h * static_cast<int64_t>(D) + static_cast<int64_t>(d);
    const float* C = comb + static_cast<int64_t>(n) * h * h + static_cast<int64_t>(j);
    float acc = 0.f;
    if (h <= kTileHc) {
      float cv[kTileHc], xv[kTileHc];  // the loads out at once, then the CPU's chain
#pragma unroll
      for (int i = 0; i < kTileHc; ++i) {
        const int ic = i < h ? i : h - 1;
        cv[i] = C[ic * h];
        xv[i] = x[static_cast<int64_t>(ic) * static_cast<int64_t>(D)];
      }
#pragma unroll
      for (int i = 0; i < kTileHc; ++i)
        if (i < h) acc = __fadd_rn(acc, __fmul_rn(cv[i], xv[i]));
    } else {
      for (int i = 0; i < h; ++i) acc = __fadd_rn(acc, __fmul_rn(C[i * h], x[static_cast<int64_t>(i) * D]));
    }
    const float v = __fadd_rn(__fmul_rn(post[static_cast<int64_t>(nj)], out[static_cast<int64_t>(n) * D + d]), acc);
    y[static_cast<int64_t>(e)] = bf16_out ? round_bf16(v) : v;
  }
}

__global__ void hc_post_kernel(const float* out, const float* X, const float* post, const float* comb, int64_t N,
                               int64_t hc, int64_t D, bool bf16_out, float* y) {
  pdl_begin();
  const int64_t total = N * hc * D;
  if (total <= INT32_MAX)  // e + the grid's stride (<= 2^24) stays below 2^32
    hc_post_elements<uint32_t>(out, X, post, comb, static_cast<uint32_t>(total), static_cast<uint32_t>(hc),
                               static_cast<uint32_t>(D), bf16_out, y);
  else
    hc_post_elements<int64_t>(out, X, post, comb, total, hc, D, bf16_out, y);
}

}  // namespace

namespace {
// Pass 1's split of a token's W = hc*D elements into slices of about `slice` (>= 1; hc.h).
int64_t hc_slices(int64_t W, int64_t slice) {
  const int64_t s = (W + slice - 1) / slice;
  return s < 1 ? 1 : (s > kMaxSlices ? kMaxSlices : s);
}

// Pass 1 of the fast order in S slices (hc_slices) into scratch.
gpuError_t launch_partial(const float* X, int64_t N, int h, int64_t D, const WeightRef& fn, int no, int64_t S,
                          float* scratch, gpuStream_t s) {
  const int64_t slice = (h * D + S - 1) / S;
  // NK: the fewest dot products a thread forms that cover n_out (hc = 4: 4 pre only, 24 with post);
  // T: tokens a block (kGroup from kHcGroupFrom tokens, up to 24 sums: T x NK accumulators a thread).
  const int T = N >= kHcGroupFrom && no <= 24 ? kGroup : 1;
  const auto partial = T > 1 ? (no <= 4 ? hc_partial_kernel<4, kGroup> : no <= 8 ? hc_partial_kernel<8, kGroup>
                                : no <= 15 ? hc_partial_kernel<15, kGroup> : hc_partial_kernel<24, kGroup>)
                       : no <= 4 ? hc_partial_kernel<4, 1> : no <= 8 ? hc_partial_kernel<8, 1>
                       : no <= 15 ? hc_partial_kernel<15, 1> : no <= 24 ? hc_partial_kernel<24, 1>
                                    : hc_partial_kernel<kMaxOut, 1>;
  return launch(partial, dim3(static_cast<unsigned>((N + T - 1) / T), static_cast<unsigned>(S)), kThreads, 0, s, X, h, D,
                fn, no, N, slice, scratch);
}
}  // namespace

int64_t hc_mix_scratch_floats(int64_t N, int64_t hc, int64_t D, int64_t slice) {
  return N * hc_slices(hc * D, slice) * (kHcMaxOut + 1);
}

gpuError_t hc_mix(const float* X, int64_t N, int64_t hc, int64_t D, WeightRef fn, WeightRef base, WeightRef scale,
                  int64_t sinkhorn_iters, float hc_eps, float norm_eps, bool bf16_out, bool cpu_order, int64_t slice_width,
                  float* y, float* post, float* comb, float* scratch, gpuStream_t s) {
  const int64_t n_out = post ? hc * (2 + hc) : hc;
  if (N <= 0 || n_out > kHcMaxOut) return gpuGetLastError();
  const int h = static_cast<int>(hc), no = static_cast<int>(n_out);
  if (cpu_order) {
    return launch(hc_mix_cpu_order_kernel, static_cast<unsigned>(N), kThreads, 0, s, X, h, D, fn, base, scale, no,
                  sinkhorn_iters, hc_eps, norm_eps, bf16_out, y, post, comb);
  }
  const int64_t S = hc_slices(hc * D, slice_width);
  const gpuError_t e = launch_partial(X, N, h, D, fn, no, S, scratch, s);
  if (e != gpuSuccess) return e;
  const int64_t Y = (D + kDSlice - 1) / kDSlice;
  return launch(hc_finish_kernel, dim3(static_cast<unsigned>(N), static_cast<unsigned>(Y > 0 ? Y : 1)), kThreads, 0, s,
                X, h, D, base, scale, no, S, scratch, sinkhorn_iters, hc_eps, norm_eps, bf16_out, y, post, comb);
}

bool hc_mix_norm_ok(int64_t hc, int64_t D, const WeightRef* norm_weight, bool bf16_steps) {
  return hc >= 1 && hc <= kTileHc && hc * (2 + hc) <= kHcMaxOut && rms_norm_act_fp8_ok(D, norm_weight, bf16_steps) &&
         norm_threads(D) > kMaxOut;
}

gpuError_t hc_mix_norm(const float* X, int64_t N, int64_t hc, int64_t D, WeightRef fn, WeightRef base, WeightRef scale,
                       int64_t sinkhorn_iters, float hc_eps, float hc_norm_eps, bool bf16_mix, int64_t slice_width,
                       float* post, float* comb, float* scratch, const WeightRef* norm_weight, float eps,
                       bool bf16_steps, bool round_out, float* y, float* act_fp8, gpuStream_t s) {
  if (N <= 0) return gpuGetLastError();
  if (!hc_mix_norm_ok(hc, D, norm_weight, bf16_steps)) return gpuErrorNotSupported;
  const int h = static_cast<int>(hc), no = static_cast<int>(post ? hc * (2 + hc) : hc);
  const int64_t S = hc_slices(hc * D, slice_width);
  const gpuError_t e = launch_partial(X, N, h, D, fn, no, S, scratch, s);
  if (e != gpuSuccess) return e;
  const unsigned threads = norm_threads(D);
  const NormArgs nm{norm_weight ? *norm_weight : WeightRef{}, norm_weight != nullptr && !bf16_steps, eps, bf16_steps,
                    round_out, y, act_fp8};
  // PER as rms_norm's kernel takes it (4 values a thread up to D = 4,096, else 8)
  const auto kernel = (D + threads - 1) / threads <= 4 ? &hc_finish_norm_kernel<4> : &hc_finish_norm_kernel<8>;
  return launch(kernel, static_cast<unsigned>(N), threads, 0, s, X, h, D, base, scale, no, S, scratch, sinkhorn_iters,
                hc_eps, hc_norm_eps, bf16_mix, post, comb, nm);
}

gpuError_t hc_post(const float* out, const float* X, const float* post, const float* comb, int64_t N, int64_t hc,
                   int64_t D, bool bf16_out, float* y, gpuStream_t s) {
  const int64_t total = N * hc * D;
  if (total <= 0) return gpuGetLastError();
  const int64_t blocks = (total + kThreads - 1) / kThreads;
  return launch(hc_post_kernel, static_cast<unsigned>(blocks < 65536 ? blocks : 65536), kThreads, 0, s, out, X, post,
                comb, N, hc, D, bf16_out, y);
}

}  // namespace plumb::gpu::k
