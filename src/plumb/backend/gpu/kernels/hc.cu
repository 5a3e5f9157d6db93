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

// Sinkhorn on hc x hc in shared memory, by hc threads of the block (all threads call it): row
// softmax + eps, a column normalisation, then iters - 1 rounds of (row, column) normalisation;
// every divisor is sum + eps (cpu_hc.cpp). Thread i owns row i in a row phase and column i in a
// column phase and does exactly the CPU's serial arithmetic on it, so the result is the CPU's.
__device__ void sinkhorn(float* C, int hc, int64_t iters, float eps) {
  const int t = static_cast<int>(threadIdx.x);
  auto normalize_col = [&] {
    if (t >= hc) return;
    float s = 0.f;
    for (int i = 0; i < hc; ++i) s = __fadd_rn(s, C[i * hc + t]);
    for (int i = 0; i < hc; ++i) C[i * hc + t] = __fdiv_rn(C[i * hc + t], __fadd_rn(s, eps));
  };
  if (t < hc) {
    float* row = C + t * hc;
    float mx = row[0];
    for (int j = 1; j < hc; ++j) mx = max_of(mx, row[j]);
    float s = 0.f;
    for (int j = 0; j < hc; ++j) {
      row[j] = exp_cr(row[j] - mx);
      s = __fadd_rn(s, row[j]);
    }
    for (int j = 0; j < hc; ++j) row[j] = __fadd_rn(__fdiv_rn(row[j], s), eps);
  }
  __syncthreads();
  normalize_col();
  __syncthreads();
  for (int64_t it = 1; it < iters; ++it) {
    if (t < hc) {
      float* row = C + t * hc;
      float s = 0.f;
      for (int j = 0; j < hc; ++j) s = __fadd_rn(s, row[j]);
      for (int j = 0; j < hc; ++j) row[j] = __fdiv_rn(row[j], __fadd_rn(s, eps));
    }
    __syncthreads();
    normalize_col();
    __syncthreads();
  }
}

// The per-token tail after the reductions (all threads call it; block-uniform arguments):
// sums[k] = fn_k . x for k < n_out, sums[kMaxOut] = sum x^2. Thread 0 forms m and the gates in
// the CPU's order; pre lands in shared memory, and with `with_post` post and comb of token n.
__device__ void mix_tail(const float* sums, int64_t n, int hc, int64_t W, WeightRef base, WeightRef scale, int n_out,
                         int64_t iters, float hc_eps, float norm_eps, bool with_post, float* pre, float* C, float* post,
                         float* comb) {
  if (threadIdx.x == 0) {
    const float ms = __fadd_rn(__fmul_rn(sums[kMaxOut], 1.0f / static_cast<float>(W)), norm_eps);
    const float r = __fdiv_rn(1.0f, __fsqrt_rn(ms));
    const int used = with_post ? n_out : hc;
    float m[kMaxOut];
    for (int k = 0; k < used; ++k) m[k] = __fmul_rn(sums[k], r);
    const float s0 = weight_at(scale, 0, 0);
    for (int i = 0; i < hc; ++i)
      pre[i] = __fadd_rn(sigmoid(__fadd_rn(__fmul_rn(m[i], s0), weight_at(base, i, 0))), hc_eps);
    if (with_post) {
      const float s1 = weight_at(scale, 1, 0), s2 = weight_at(scale, 2, 0);
      for (int i = 0; i < hc; ++i)
        post[n * hc + i] = __fmul_rn(2.0f, sigmoid(__fadd_rn(__fmul_rn(m[hc + i], s1), weight_at(base, hc + i, 0))));
      for (int k = 0; k < hc * hc; ++k)
        C[k] = __fadd_rn(__fmul_rn(m[2 * hc + k], s2), weight_at(base, 2 * hc + k, 0));
    }
  }
  __syncthreads();
  if (with_post) {
    sinkhorn(C, hc, iters, hc_eps);
    if (static_cast<int>(threadIdx.x) < hc * hc) comb[n * hc * hc + threadIdx.x] = C[threadIdx.x];
  }
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
  __shared__ float sums[kMaxOut + 1], pre[kMaxOut], C[kMaxOut];
  const int64_t n = blockIdx.x, W = hc * D;
  const float* x = X + n * W;
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
  mix_tail(sums, n, hc, W, base, scale, n_out, iters, hc_eps, norm_eps, post != nullptr, pre, C, post, comb);
  mix_streams(x, pre, hc, D, 0, D, bf16_out, y + n * D);
}

// Fast order, pass 1: grid (N, S); block (n, s) reduces elements [s * slice, (s + 1) * slice) of
// token n's streams: all n_out dot products and sum x^2 in registers, warp sums, warps added in
// order. part[(n * S + s) * (kMaxOut + 1) + k] (k = kMaxOut: sum x^2). A token's reduction is
// spread over S blocks so that a decode step's few tokens fill the device.
__global__ void __launch_bounds__(kThreads)
    hc_partial_kernel(const float* X, int hc, int64_t D, WeightRef fn, int n_out, int64_t slice, float* part) {
  __shared__ float red[kWarps][kMaxOut + 1];
  const int64_t n = blockIdx.x, s = blockIdx.y, S = gridDim.y, W = hc * D;
  const float* x = X + n * W;
  const int64_t i1 = (s + 1) * slice < W ? (s + 1) * slice : W;
  float acc[kMaxOut];
#pragma unroll
  for (int k = 0; k < kMaxOut; ++k) acc[k] = 0.f;
  float ss = 0.f;
  for (int64_t i = s * slice + threadIdx.x; i < i1; i += kThreads) {
    const float v = x[i];
    ss += v * v;
#pragma unroll
    for (int k = 0; k < kMaxOut; ++k)
      if (k < n_out) acc[k] += fn_at(fn, k, i, W) * v;
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
  __syncthreads();
  const int k = static_cast<int>(threadIdx.x);
  if (k < n_out || k == kMaxOut) {
    float t = 0.f;
    for (int w = 0; w < kWarps; ++w) t = __fadd_rn(t, red[w][k]);
    part[(n * S + s) * (kMaxOut + 1) + k] = t;
  }
}

// Fast order, pass 2: grid (N, Y); block (n, c) adds token n's S partials in order, runs the
// tail (post and comb by column block 0 only) and mixes the streams for its slice of D.
__global__ void __launch_bounds__(kThreads)
    hc_finish_kernel(const float* X, int hc, int64_t D, WeightRef base, WeightRef scale, int n_out, int64_t S,
                     const float* part, int64_t iters, float hc_eps, float norm_eps, bool bf16_out, int64_t dslice,
                     float* y, float* post, float* comb) {
  __shared__ float sums[kMaxOut + 1], pre[kMaxOut], C[kMaxOut];
  const int64_t n = blockIdx.x, c = blockIdx.y, W = hc * D;
  const int k = static_cast<int>(threadIdx.x);
  if (k < n_out || k == kMaxOut) {
    float t = 0.f;
#pragma unroll 16  // the loads go out together; the adds stay in slice order
    for (int64_t s = 0; s < S; ++s) t = __fadd_rn(t, part[(n * S + s) * (kMaxOut + 1) + k]);
    sums[k] = t;
  }
  __syncthreads();
  mix_tail(sums, n, hc, W, base, scale, n_out, iters, hc_eps, norm_eps, post != nullptr && c == 0, pre, C, post, comb);
  const int64_t d1 = (c + 1) * dslice < D ? (c + 1) * dslice : D;
  mix_streams(X + n * W, pre, hc, D, c * dslice, d1, bf16_out, y + n * D);
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

namespace {
// Pass 1's split of a token's hc*D elements into slices of kSlice: a decode step's few tokens
// then fill the device. It depends on the width only, never on N, so that a token's sums (and
// so its result) do not change with the batch it runs in.
constexpr int64_t kSlice = 512, kMaxSlices = 64, kDSlice = 1024;
int64_t hc_slices(int64_t W) {
  const int64_t s = (W + kSlice - 1) / kSlice;
  return s < 1 ? 1 : (s > kMaxSlices ? kMaxSlices : s);
}
}  // namespace

int64_t hc_mix_scratch_floats(int64_t N, int64_t hc, int64_t D) { return N * hc_slices(hc * D) * (kHcMaxOut + 1); }

gpuError_t hc_mix(const float* X, int64_t N, int64_t hc, int64_t D, WeightRef fn, WeightRef base, WeightRef scale,
                  int64_t sinkhorn_iters, float hc_eps, float norm_eps, bool bf16_out, bool cpu_order, float* y,
                  float* post, float* comb, float* scratch, gpuStream_t s) {
  const int64_t n_out = post ? hc * (2 + hc) : hc;
  if (N <= 0 || n_out > kHcMaxOut) return gpuGetLastError();
  const int h = static_cast<int>(hc), no = static_cast<int>(n_out);
  if (cpu_order) {
    hc_mix_cpu_order_kernel<<<static_cast<unsigned>(N), kThreads, 0, s>>>(X, h, D, fn, base, scale, no, sinkhorn_iters,
                                                                         hc_eps, norm_eps, bf16_out, y, post, comb);
    return gpuGetLastError();
  }
  const int64_t W = hc * D, S = hc_slices(W), slice = (W + S - 1) / S;
  hc_partial_kernel<<<dim3(static_cast<unsigned>(N), static_cast<unsigned>(S)), kThreads, 0, s>>>(X, h, D, fn, no, slice,
                                                                                                 scratch);
  const gpuError_t e = gpuGetLastError();
  if (e != gpuSuccess) return e;
  const int64_t Y = (D + kDSlice - 1) / kDSlice;
  hc_finish_kernel<<<dim3(static_cast<unsigned>(N), static_cast<unsigned>(Y > 0 ? Y : 1)), kThreads, 0, s>>>(
      X, h, D, base, scale, no, S, scratch, sinkhorn_iters, hc_eps, norm_eps, bf16_out, kDSlice, y, post, comb);
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
