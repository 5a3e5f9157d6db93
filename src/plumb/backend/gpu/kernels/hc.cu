// mHC kernels (MODEL-SPEC 3.2): the same function as cpu/cpu_hc.cpp. The per-token scalar tail
// (sigmoids, Sinkhorn) runs serially in one thread in the CPU's order, and every product/sum whose
// rounding the CPU fixes uses the _rn intrinsics so nvcc/hipcc cannot contract it into an FMA (the
// CPU build does not). The long reductions (fn . x, sum x^2) use a parallel order unless the
// caller asks for the CPU's (cpu_order.h).
#include "plumb/backend/gpu/kernels/hc.h"

#include "plumb/backend/gpu/gpu_numerics.h"
#include "plumb/backend/gpu/kernels/cpu_order.h"

namespace plumb::gpu::k {
namespace {

constexpr int kThreads = 256;  // a multiple of kWarp on both platforms
constexpr int kWarps = kThreads / kWarp;
constexpr int kMaxOut = static_cast<int>(kHcMaxOut);

__device__ __forceinline__ float sigmoid(float x) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, exp_cr(-x))); }
__device__ __forceinline__ float max_of(float a, float b) { return a < b ? b : a; }  // std::max

__device__ void normalize_cols(float* C, int hc, float eps) {
  for (int j = 0; j < hc; ++j) {
    float s = 0.f;
    for (int i = 0; i < hc; ++i) s = __fadd_rn(s, C[i * hc + j]);
    for (int i = 0; i < hc; ++i) C[i * hc + j] = __fdiv_rn(C[i * hc + j], __fadd_rn(s, eps));
  }
}

// In place on hc x hc (one thread): row softmax + eps, a column normalisation, then iters - 1
// rounds of (row, column) normalisation; every divisor is sum + eps (cpu_hc.cpp).
__device__ void sinkhorn(float* C, int hc, int64_t iters, float eps) {
  for (int i = 0; i < hc; ++i) {
    float* row = C + i * hc;
    float mx = row[0];
    for (int j = 1; j < hc; ++j) mx = max_of(mx, row[j]);
    float s = 0.f;
    for (int j = 0; j < hc; ++j) {
      row[j] = exp_cr(row[j] - mx);
      s = __fadd_rn(s, row[j]);
    }
    for (int j = 0; j < hc; ++j) row[j] = __fadd_rn(__fdiv_rn(row[j], s), eps);
  }
  normalize_cols(C, hc, eps);
  for (int64_t it = 1; it < iters; ++it) {
    for (int i = 0; i < hc; ++i) {
      float* row = C + i * hc;
      float s = 0.f;
      for (int j = 0; j < hc; ++j) s = __fadd_rn(s, row[j]);
      for (int j = 0; j < hc; ++j) row[j] = __fdiv_rn(row[j], __fadd_rn(s, eps));
    }
    normalize_cols(C, hc, eps);
  }
}

// One block per token. Pass 1, the n_out dot products fn . x and sum x^2: in the CPU's order
// (group k of 8 lanes computes dot k as cpu::dot does, cpu_order.h; thread 0 first sums the
// squares in index order, as cpu_hc.cpp's loop), or fast: each
// thread reads its stream elements once and accumulates all sums in registers, warp sums, then
// the warp partials are added in warp order by one thread (deterministic for a launch shape).
__global__ void __launch_bounds__(kThreads)
    hc_mix_kernel(const float* X, int hc, int64_t D, WeightRef fn, WeightRef base, WeightRef scale, int n_out,
                  int64_t iters, float hc_eps, float norm_eps, bool bf16_out, bool cpu_order, float* y, float* post,
                  float* comb) {
  __shared__ float red[kWarps][kMaxOut + 1];  // fast: per warp; cpu order: row 0 holds the sums
  __shared__ float pre[kMaxOut], C[kMaxOut];
  const int64_t n = blockIdx.x, W = hc * D;
  const float* x = X + n * W;
  const float* f = fn.format == WFormat::F32 ? reinterpret_cast<const float*>(fn.data) : nullptr;
  auto fn_at = [&](int k, int64_t i) { return f ? f[k * W + i] : weight_at(fn, k, i); };
  if (cpu_order) {
    if (threadIdx.x == 0) {
      float ss = 0.f;
      for (int64_t i = 0; i < W; ++i) ss = __fadd_rn(ss, __fmul_rn(x[i], x[i]));
      red[0][kMaxOut] = ss;
    }
    const int grp = threadIdx.x / 8, sub = threadIdx.x % 8;
    for (int k0 = 0; k0 < n_out; k0 += kThreads / 8) {  // the same trip count in every lane
      const int k = k0 + grp;
      const float v = cpu_order_sum8([&](int64_t i) { return k < n_out ? __fmul_rn(fn_at(k, i), x[i]) : 0.f; }, W, sub);
      if (sub == 0 && k < n_out) red[0][k] = v;
    }
  } else {
    float acc[kMaxOut];
#pragma unroll
    for (int k = 0; k < kMaxOut; ++k) acc[k] = 0.f;
    float ss = 0.f;
    for (int64_t i = threadIdx.x; i < W; i += kThreads) {
      const float v = x[i];
      ss += v * v;
#pragma unroll
      for (int k = 0; k < kMaxOut; ++k)
        if (k < n_out) acc[k] += fn_at(k, i) * v;
    }
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    ss = warp_sum(ss);
    if (lane == 0) red[warp][kMaxOut] = ss;
#pragma unroll
    for (int k = 0; k < kMaxOut; ++k)
      if (k < n_out) {  // uniform over the block: the shuffles see every lane
        const float t = warp_sum(acc[k]);
        if (lane == 0) red[warp][k] = t;
      }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const int warps = cpu_order ? 1 : kWarps;
    float tss = 0.f;
    for (int w = 0; w < warps; ++w) tss = __fadd_rn(tss, red[w][kMaxOut]);
    const float ms = __fadd_rn(__fmul_rn(tss, 1.0f / static_cast<float>(W)), norm_eps);
    const float r = __fdiv_rn(1.0f, __fsqrt_rn(ms));
    float m[kMaxOut];
    for (int k = 0; k < n_out; ++k) {
      float t = 0.f;
      for (int w = 0; w < warps; ++w) t = __fadd_rn(t, red[w][k]);
      m[k] = __fmul_rn(t, r);
    }
    const float s0 = weight_at(scale, 0, 0);
    for (int i = 0; i < hc; ++i)
      pre[i] = __fadd_rn(sigmoid(__fadd_rn(__fmul_rn(m[i], s0), weight_at(base, i, 0))), hc_eps);
    if (post) {
      const float s1 = weight_at(scale, 1, 0), s2 = weight_at(scale, 2, 0);
      for (int i = 0; i < hc; ++i)
        post[n * hc + i] = __fmul_rn(2.0f, sigmoid(__fadd_rn(__fmul_rn(m[hc + i], s1), weight_at(base, hc + i, 0))));
      for (int k = 0; k < hc * hc; ++k)
        C[k] = __fadd_rn(__fmul_rn(m[2 * hc + k], s2), weight_at(base, 2 * hc + k, 0));
      sinkhorn(C, hc, iters, hc_eps);
      for (int k = 0; k < hc * hc; ++k) comb[n * hc * hc + k] = C[k];
    }
  }
  __syncthreads();
  // y = sum_i pre_i * X[i], streams added in order.
  for (int64_t d = threadIdx.x; d < D; d += kThreads) {
    float a = 0.f;
    for (int i = 0; i < hc; ++i) a = __fadd_rn(a, __fmul_rn(pre[i], x[i * D + d]));
    y[n * D + d] = bf16_out ? round_bf16(a) : a;
  }
}

__global__ void hc_post_kernel(const float* out, const float* X, const float* post, const float* comb, int64_t N,
                               int64_t hc, int64_t D, bool bf16_out, float* y) {
  const int64_t total = N * hc * D;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t d = e % D, j = (e / D) % hc, n = e / (D * hc);
    const float* x = X + n * hc * D;
    const float* C = comb + n * hc * hc;
    // X_new[j] = post_j * out + sum_i C[i][j] * X[i]  (C transposed: the sum runs over i)
    float acc = 0.f;
    for (int64_t i = 0; i < hc; ++i) acc = __fadd_rn(acc, __fmul_rn(C[i * hc + j], x[i * D + d]));
    const float v = __fadd_rn(__fmul_rn(post[n * hc + j], out[n * D + d]), acc);
    y[e] = bf16_out ? round_bf16(v) : v;
  }
}

}  // namespace

gpuError_t hc_mix(const float* X, int64_t N, int64_t hc, int64_t D, WeightRef fn, WeightRef base, WeightRef scale,
                  int64_t sinkhorn_iters, float hc_eps, float norm_eps, bool bf16_out, bool cpu_order, float* y,
                  float* post, float* comb, gpuStream_t s) {
  const int64_t n_out = post ? hc * (2 + hc) : hc;
  if (N > 0 && n_out <= kHcMaxOut)
    hc_mix_kernel<<<static_cast<unsigned>(N), kThreads, 0, s>>>(X, static_cast<int>(hc), D, fn, base, scale,
                                                              static_cast<int>(n_out), sinkhorn_iters, hc_eps, norm_eps,
                                                              bf16_out, cpu_order, y, post, comb);
  return gpuGetLastError();
}

gpuError_t hc_post(const float* out, const float* X, const float* post, const float* comb, int64_t N, int64_t hc,
                   int64_t D, bool bf16_out, float* y, gpuStream_t s) {
  const int64_t total = N * hc * D;
  if (total > 0) {
    const int64_t blocks = (total + kThreads - 1) / kThreads;
    hc_post_kernel<<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), kThreads, 0, s>>>(out, X, post, comb, N,
                                                                                              hc, D, bf16_out, y);
  }
  return gpuGetLastError();
}

}  // namespace plumb::gpu::k
