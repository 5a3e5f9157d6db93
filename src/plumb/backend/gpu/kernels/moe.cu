// Routing and SwiGLU expert kernels (MODEL-SPEC 3.8): the same function as cpu/cpu_moe.cpp. Sums
// and products whose rounding the CPU fixes use the _rn intrinsics (no FMA contraction, which the
// CPU build does not do). The gate product is linear()'s (gpu_moe.cpp).
#include "plumb/backend/gpu/kernels/moe.h"

#include "plumb/backend/gpu/gpu_numerics.h"
#include "plumb/backend/gpu/kernels/launch.h"

namespace plumb::gpu::k {
namespace {

constexpr int kThreads = 256;  // a multiple of kWarp on both platforms

unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65536 ? b : 65536);  // grid-stride loops cover the rest
}

__device__ __forceinline__ float softplus(float x) { return x > 20.f ? x : log1p_cr(exp_cr(x)); }  // torch's threshold

// Is (v, i) ahead of (bv, bi) in the top-k order: larger value, ties to the lower id.
__device__ __forceinline__ bool ahead(float v, float i, float bv, float bi) { return v > bv || (v == bv && i < bi); }

// One block of kRouteThreads per token. Every expert is scored by its own thread (up to 256 at
// once: one warp scoring 8 experts a lane, each behind the last's correctly rounded exp / log1p /
// sqrt, was most of a 17 us launch at B = 1, PERF.md v21), the group limit by all threads, then
// warp 0 picks the K experts and weighs them.
constexpr int kRouteThreads = 256;  // a multiple of kWarp on both platforms
__global__ void __launch_bounds__(kRouteThreads) route_select_kernel(const float* logits, int64_t E, WeightRef bias,
                                                                    bool has_bias, bool sigmoid, int64_t G, int64_t TG,
                                                                    int64_t K, float route_scale, bool hashed,
                                                                    bool bf16, int32_t* experts, float* weights) {
  pdl_begin();
  PLUMB_DYNAMIC_SHARED(float, sh);  // route_select_shared_bytes
  float* score = sh;
  float* sel = sh + E;
  float* gscore = sel + E;
  int32_t* picks = reinterpret_cast<int32_t*>(gscore + G);
  unsigned char* taken = reinterpret_cast<unsigned char*>(picks + K);
  const int64_t n = blockIdx.x;
  const int tid = threadIdx.x, lane = tid % kWarp;
  int32_t* ex = experts + n * K;
  for (int64_t e = tid; e < E; e += kRouteThreads) {
    const float l = logits[n * E + e];
    float sc = sigmoid ? __fdiv_rn(1.f, __fadd_rn(1.f, exp_cr(-l))) : __fsqrt_rn(softplus(l));
    if (bf16) sc = round_bf16(sc);  // sigmoid of a bf16 tensor; + the f32 bias promotes to f32
    score[e] = sc;
    sel[e] = has_bias ? __fadd_rn(sc, weight_at(bias, e, 0)) : sc;  // the bias picks, it never weighs
    taken[e] = 0;
  }
  if (hashed)  // the host wrote the ids before the launch
    for (int64_t k = tid; k < K; k += kRouteThreads) picks[k] = ex[k];
  __syncthreads();
  float sum = 0.f;  // the picked scores in k order, in every lane of warp 0
  if (!hashed) {
    if (G > 1) {  // drop all but the TG best groups (score: sum of the group's best two)
      const int64_t per = E / G;
      for (int64_t g = tid; g < G; g += kRouteThreads) {
        const float* s = sel + g * per;
        int64_t a = 0;  // the first maximum, as std::max_element
        for (int64_t j = 1; j < per; ++j)
          if (s[a] < s[j]) a = j;
        float second = -INFINITY;
        for (int64_t j = 0; j < per; ++j)
          if (j != a && second < s[j]) second = s[j];
        gscore[g] = __fadd_rn(s[a], second);
      }
      __syncthreads();
      // A group's place in a stable descending sort = the groups strictly ahead of it.
      for (int64_t g = tid; g < G; g += kRouteThreads) {
        int64_t rank = 0;
        for (int64_t h = 0; h < G; ++h)
          if (gscore[h] > gscore[g] || (gscore[h] == gscore[g] && h < g)) ++rank;
        if (rank >= TG)
          for (int64_t j = 0; j < per; ++j) sel[g * per + j] = -INFINITY;
      }
      __syncthreads();
    }
    if (tid >= kWarp) return;
    // K rounds of a warp argmax over the experts not yet taken. Ids travel as floats (exact
    // below 2^24); the sentinel id loses every tie, so a -inf expert still beats "none".
    const float kNone = 16777216.f;
    for (int64_t k = 0; k < K; ++k) {
      float bv = -INFINITY, bi = kNone;
      for (int64_t e = lane; e < E; e += kWarp)  // ascending ids: strict > keeps the lower id
        if (!taken[e] && ahead(sel[e], static_cast<float>(e), bv, bi)) bv = sel[e], bi = static_cast<float>(e);
#pragma unroll
      for (int m = kWarp / 2; m > 0; m >>= 1) {
        const float ov = shfl_xor(bv, m), oi = shfl_xor(bi, m);
        if (ahead(ov, oi, bv, bi)) bv = ov, bi = oi;
      }
      const int64_t pick = bi < static_cast<float>(E) ? static_cast<int64_t>(bi) : -1;  // -1: NaN scores only
      if (pick >= 0 && pick % kWarp == lane) taken[pick] = 1;  // only this lane ever reads taken[pick]
      if (lane == 0) ex[k] = static_cast<int32_t>(pick);
      if (k % kWarp == lane) picks[k] = static_cast<int32_t>(pick);  // read below by this lane only
      sum = __fadd_rn(sum, pick >= 0 ? score[pick] : NAN);
    }
  } else {
    if (tid >= kWarp) return;
    for (int64_t k = 0; k < K; ++k) sum = __fadd_rn(sum, picks[k] >= 0 ? score[picks[k]] : NAN);
  }
  if (bf16) sum = round_bf16(sum);  // weights /= weights.sum(); weights *= route_scale, on bf16 tensors
  for (int64_t k = lane; k < K; k += kWarp) {
    const float q = __fdiv_rn(picks[k] >= 0 ? score[picks[k]] : NAN, sum);
    weights[n * K + k] = bf16 ? round_bf16(__fmul_rn(round_bf16(q), route_scale)) : __fmul_rn(q, route_scale);
  }
}

__global__ void gather_rows_kernel(const float* src, int64_t D, const int32_t* rows, int64_t M, float* dst) {
  pdl_begin();
  const int64_t total = M * D;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[e] = src[static_cast<int64_t>(rows[e / D]) * D + e % D];
}

__global__ void swiglu_kernel(const float* g, const float* u, int64_t M, int64_t I, const float* row_weight,
                              float limit, bool silu_bf16, bool bf16_out, float* h) {
  pdl_begin();
  const int64_t total = M * I;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float gi = g[i], ui = u[i];
    if (limit > 0.f) {  // std::min(gi, L) and std::clamp(ui, -L, L)
      gi = limit < gi ? limit : gi;
      ui = ui < -limit ? -limit : (limit < ui ? limit : ui);
    }
    float silu = __fdiv_rn(gi, __fadd_rn(1.0f, exp_cr(-gi)));
    if (silu_bf16) silu = round_bf16(silu);
    float v = __fmul_rn(silu, ui);
    if (row_weight) v = __fmul_rn(row_weight[i / I], v);  // routing weight before w2 (and its act-quant)
    h[i] = bf16_out ? round_bf16(v) : v;
  }
}

// Thread per (row, column); the first row of a run of equal destination rows adds the whole run
// in order, so a token listed twice for one expert gets its terms in the CPU's order, race-free.
__global__ void accumulate_rows_kernel(float* acc, const float* ys, const int32_t* rows, const float* row_weight,
                                       bool bf16, int64_t M, int64_t D) {
  pdl_begin();
  const int64_t total = M * D;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e / D, d = e % D;
    const int32_t r = rows[i];
    if (i > 0 && rows[i - 1] == r) continue;
    float* a = acc + static_cast<int64_t>(r) * D + d;
    float v = *a;
    for (int64_t j = i; j < M && rows[j] == r; ++j) {
      const float t = row_weight ? __fmul_rn(ys[j * D + d], row_weight[j]) : ys[j * D + d];
      v = bf16 ? round_bf16(__fadd_rn(v, round_bf16(t))) : __fadd_rn(v, t);
    }
    *a = v;
  }
}

// Thread per (token, column): the same term and sum expressions as accumulate_rows_kernel.
__global__ void accumulate_slots_kernel(float* acc, const float* ys, const int32_t* order, const float* slot_weight,
                                        bool bf16, int64_t N, int64_t K, int64_t D, int64_t s_lo, int64_t s_hi) {
  pdl_begin();
  const int64_t total = N * D;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = e / D, d = e % D;
    float* a = acc + e;
    float v = *a;
    for (int64_t j = 0; j < K; ++j) {
      const int64_t s = order[n * K + j];
      if (s < s_lo || s >= s_hi) continue;
      const float y = ys[(s - s_lo) * D + d];
      const float t = slot_weight ? __fmul_rn(y, slot_weight[s]) : y;
      v = bf16 ? round_bf16(__fadd_rn(v, round_bf16(t))) : __fadd_rn(v, t);
    }
    *a = v;
  }
}

__global__ void add_round_kernel(const float* a, const float* b, int64_t n, bool bf16_out, float* y) {
  pdl_begin();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = __fadd_rn(a[i], b[i]);
    y[i] = bf16_out ? round_bf16(v) : v;
  }
}

}  // namespace

gpuError_t route_select(const float* logits, int64_t N, int64_t E, WeightRef bias, bool has_bias, bool sigmoid,
                        int64_t groups, int64_t topk_groups, int64_t K, float route_scale, bool hashed, bool bf16,
                        int32_t* experts, float* weights, gpuStream_t s) {
  if (N <= 0) return gpuGetLastError();
  return launch(route_select_kernel, static_cast<unsigned>(N), kRouteThreads,
                static_cast<size_t>(route_select_shared_bytes(E, groups, K)), s, logits, E, bias, has_bias, sigmoid, groups,
                topk_groups, K, route_scale, hashed, bf16, experts, weights);
}

gpuError_t gather_rows(const float* src, int64_t D, const int32_t* rows, int64_t M, float* dst, gpuStream_t s) {
  return M * D > 0 ? launch(gather_rows_kernel, blocks_for(M * D), kThreads, 0, s, src, D, rows, M, dst)
                   : gpuGetLastError();
}

gpuError_t swiglu(const float* g, const float* u, int64_t M, int64_t I, const float* row_weight, float limit,
                  bool silu_bf16, bool bf16_out, float* h, gpuStream_t s) {
  if (M * I <= 0) return gpuGetLastError();
  return launch(swiglu_kernel, blocks_for(M * I), kThreads, 0, s, g, u, M, I, row_weight, limit, silu_bf16, bf16_out, h);
}

gpuError_t accumulate_rows(float* acc, const float* ys, const int32_t* rows, const float* row_weight, bool bf16,
                           int64_t M, int64_t D, gpuStream_t s) {
  if (M * D <= 0) return gpuGetLastError();
  return launch(accumulate_rows_kernel, blocks_for(M * D), kThreads, 0, s, acc, ys, rows, row_weight, bf16, M, D);
}

gpuError_t accumulate_slots(float* acc, const float* ys, const int32_t* order, const float* slot_weight, bool bf16,
                            int64_t N, int64_t K, int64_t D, int64_t s_lo, int64_t s_hi, gpuStream_t s) {
  if (N * D <= 0 || s_hi <= s_lo) return gpuGetLastError();
  return launch(accumulate_slots_kernel, blocks_for(N * D), kThreads, 0, s, acc, ys, order, slot_weight, bf16, N, K, D,
                s_lo, s_hi);
}

gpuError_t add_round(const float* a, const float* b, int64_t n, bool bf16_out, float* y, gpuStream_t s) {
  return n > 0 ? launch(add_round_kernel, blocks_for(n), kThreads, 0, s, a, b, n, bf16_out, y) : gpuGetLastError();
}

}  // namespace plumb::gpu::k
