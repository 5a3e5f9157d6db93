#pragma once
// A row's RMS norm in registers and its act_fp8 copy, device code shared by the norm kernels
// (elementwise.cu: rms_norm, norm_rope) and hc.cu's pass 2 with the norm after it: the same
// functions, so the same bits wherever a row is normed. Thread t of a block of T holds elements
// t + k T (k < PER). Included by kernel files only.
#include <cmath>
#include <cstdint>

#include "plumb/backend/gpu/gpu_numerics.h"
#include "plumb/backend/gpu/weight_ref.h"

namespace plumb::gpu::k {
namespace {

__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float maybe_round(float v, bool r) { return r ? round_bf16(v) : v; }

// Sum over the block (blockDim.x a multiple of kWarp, at most 1024 threads); every thread gets it.
__device__ inline float block_sum(float v, float* scratch /* >= 1024 / kWarp floats */) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float t = lane < warps ? scratch[lane] : 0.f;
  return warp_sum(t);
}

// The sum of squares of one row, the same value in every thread: in the CPU's order (one thread,
// in index order, like cpu_backend.cpp's loop) or in parallel (a block sum).
__device__ inline float row_sum_squares(const float* v, int64_t d, bool bf16_steps, bool cpu_order, float* scratch) {
  auto sq = [&](int64_t i) {
    const float p = mul_rn(v[i], v[i]);
    return bf16_steps ? round_bf16(p) : p;
  };
  if (!cpu_order) {
    float ss = 0.f;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) ss = add_rn(ss, sq(i));
    return block_sum(ss, scratch);
  }
  __syncthreads();  // scratch may still be read by a previous call
  if (threadIdx.x == 0) {
    // In index order; 16 loads issued before their adds (the add chain is the floor: d dependent
    // adds, ~4 cycles each).
    float ss = 0.f;
    int64_t i = 0;
    for (; i + 16 <= d; i += 16) {
      float t[16];
#pragma unroll
      for (int e = 0; e < 16; ++e) t[e] = sq(i + e);
#pragma unroll
      for (int e = 0; e < 16; ++e) ss = add_rn(ss, t[e]);
    }
    for (; i < d; ++i) ss = add_rn(ss, sq(i));
    scratch[0] = ss;
  }
  __syncthreads();
  return scratch[0];
}

// Whether a norm weight's elements can be read as words: F32 and BF16 store element (i / cols,
// i % cols) of the flat index i at (i / cols) * cols + i % cols = i, so for them (aligned) weight_at
// is a word load at i. FP8 / FP4 need (r, c) for the scale (weight_at, 64-bit division).
PLUMB_HD bool norm_weight_words(const WeightRef& w) {
  return (w.format == WFormat::F32 && reinterpret_cast<uintptr_t>(w.data) % 4 == 0) ||
         (w.format == WFormat::BF16 && reinterpret_cast<uintptr_t>(w.data) % 2 == 0);
}

// Thread t's weights, elements t + k T (k < PER) below d (1 past it), for norm_weight_words:
// PER independent word loads.
template <int PER>
__device__ __forceinline__ void norm_weights(const WeightRef& w, int t, int T, int d, float (&wv)[PER]) {
  if (w.format == WFormat::F32) {
    const float* p = reinterpret_cast<const float*>(w.data);
#pragma unroll
    for (int k = 0; k < PER; ++k) wv[k] = t + k * T < d ? p[t + k * T] : 1.f;
  } else {
    const uint16_t* p = reinterpret_cast<const uint16_t*>(w.data);
#pragma unroll
    for (int k = 0; k < PER; ++k) wv[k] = t + k * T < d ? bf16_to_f32(p[t + k * T]) : 1.f;
  }
}

// The amax of each kWarp consecutive elements of a row held in registers (thread t: elements
// t + k T, T a multiple of kWarp, so a warp's elements at one k are one such chunk, number
// k T / kWarp + warp): |v| with NaN ignored, from 0 (quant_kernel's and act_quant.h's), into
// chunk[k * warps + warp]; then a barrier, after which any thread may read any chunk.
template <int PER>
__device__ __forceinline__ void chunk_amax(const float (&v)[PER], int t, int T, float* chunk) {
  const int warps = T / kWarp, warp = t / kWarp;
#pragma unroll
  for (int k = 0; k < PER; ++k) {
    const float m = warp_max(fmaxf(0.f, fabsf(v[k])));
    if (t % kWarp == 0) chunk[k * warps + warp] = m;
  }
  __syncthreads();
}

// The act_fp8 copy of a row that rms_norm_rows has in registers (thread t: elements t + k T,
// k < PER; those past d are 0): each 128-block's amax (128 / kWarp whole chunks of chunk_amax,
// their max), its ue8m0 scale, the FP8 round trip of each element below d into q.
template <int PER>
__device__ __forceinline__ void act_fp8_row(const float (&v)[PER], int t, int T, int d, float* q,
                                            float* chunk /* PER * T / kWarp */) {
  constexpr int kChunks = 128 / kWarp;
  chunk_amax<PER>(v, t, T, chunk);
#pragma unroll
  for (int k = 0; k < PER; ++k) {
    const int e = t + k * T;
    if (e >= d) continue;
    float m = 0.f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) m = fmaxf(m, chunk[e / 128 * kChunks + c]);
    const uint8_t code = ue8m0_scale_for(m, kFp8Max, kFp8MinAmax);
    q[e] = fp8_roundtrip_inv(v[k], ue8m0_to_f32(code), ue8m0_inverse(code));
  }
}

// Thread t's sum of the squares of its elements t + k T (k < PER, below d; T = blockDim.x) in that
// order (each square rounded to bf16 with bf16_steps), then block_sum: the fast order's sum of a
// row held in registers.
template <int PER>
__device__ __forceinline__ float sum_squares_regs(const float (&xv)[PER], int di, bool bf16_steps, float* scratch) {
  const int ti = threadIdx.x, Ti = blockDim.x;
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < PER; ++k)
    if (ti + k * Ti < di) {
      const float p = mul_rn(xv[k], xv[k]);
      ss = add_rn(ss, bf16_steps ? round_bf16(p) : p);
    }
  return block_sum(ss, scratch);
}

// The norm of a row held in registers (thread t: elements t + k T, 0 past d) from its sum of
// squares ss: y = bf16?(w * (x * inv)) per element (wv: the weights, read only when weighted).
template <int PER>
__device__ __forceinline__ void norm_scale_regs(const float (&xv)[PER], const float (&wv)[PER], float ss, int di,
                                                bool weighted, float eps, bool bf16_steps, bool round_out,
                                                float (&out)[PER]) {
  const float inv_d = 1.0f / static_cast<float>(di);
  if (bf16_steps) {
    const float var = round_bf16(add_rn(round_bf16(mul_rn(ss, inv_d)), eps));
    const float inv = round_bf16(1.0f / sqrtf(var));
#pragma unroll
    for (int k = 0; k < PER; ++k) out[k] = round_bf16(mul_rn(xv[k], inv));
  } else {
    const float inv = 1.0f / sqrtf(add_rn(mul_rn(ss, inv_d), eps));
#pragma unroll
    for (int k = 0; k < PER; ++k) {
      float p = mul_rn(xv[k], inv);
      if (weighted) p = mul_rn(wv[k], p);
      out[k] = maybe_round(p, round_out);
    }
  }
}

// Row v's norm (d <= PER * T values, T = blockDim.x) into thread t's registers: out[k] is element
// t + k T (0 past d). Thread t adds the squares of its elements in that order, then block_sum (or,
// in the CPU's order, thread 0 alone in index order: row_sum_squares); then y = bf16?(w * (x * inv))
// per element. Every load is issued at once, before the reduction (the serial CPU-order sum
// first: the loads would only wait for it), so a row costs one memory latency plus the
// reduction. A weight only when norm_weight_words.
template <int PER>
__device__ __forceinline__ void norm_row_regs(const float* v, int di, const WeightRef& w, bool weighted, float eps,
                                              bool bf16_steps, bool round_out, bool cpu_order, float* scratch,
                                              float (&out)[PER]) {
  const int ti = threadIdx.x, Ti = blockDim.x;
  float xv[PER], wv[PER] = {}, ss;
  if (!cpu_order) {  // every load first
#pragma unroll
    for (int k = 0; k < PER; ++k) xv[k] = ti + k * Ti < di ? v[ti + k * Ti] : 0.f;
    if (weighted) norm_weights<PER>(w, ti, Ti, di, wv);
    ss = sum_squares_regs<PER>(xv, di, bf16_steps, scratch);
  } else {  // the serial sum first (the loads would only wait for it)
    ss = row_sum_squares(v, di, bf16_steps, true, scratch);
#pragma unroll
    for (int k = 0; k < PER; ++k) xv[k] = ti + k * Ti < di ? v[ti + k * Ti] : 0.f;
    if (weighted) norm_weights<PER>(w, ti, Ti, di, wv);
  }
  norm_scale_regs<PER>(xv, wv, ss, di, weighted, eps, bf16_steps, round_out, out);
}

}  // namespace
}  // namespace plumb::gpu::k
