#pragma once
// Launchers of the mHC kernels (MODEL-SPEC 3.2); host side in gpu_hc.cpp. Kernel files include no
// plumb host headers: raw pointers and sizes in, the launch's error code out.
#include <cstdint>

#include "plumb/backend/gpu/gpu_compat.h"
#include "plumb/backend/gpu/weight_ref.h"

namespace plumb::gpu::k {

// Largest n_out (rows of fn) the mixes kernel keeps in registers: hc*(2+hc) for hc <= 5.
constexpr int64_t kHcMaxOut = 35;

// hc_pre (post, comb non-null) or hc_head (post = comb = nullptr, n_out = hc) for N tokens of
// X [N, hc, D]: m = (fn . x) / sqrt(mean(x^2) + norm_eps); pre = sigmoid(m*scale0 + base) + hc_eps;
// with post/comb also post = 2 sigmoid(...) and comb = Sinkhorn(...); y = sum_i pre_i X[i].
// scale and base are device weights ([3] or [1], [n_out]). cpu_order: the long sums in the CPU
// backend's order (bitwise its result), one block per token; fast: each token's sums split over
// several blocks (partials in `scratch`, hc_mix_scratch_floats(N, hc, D, slice) floats) so that a
// decode step's few tokens fill the device: slices of about `slice` (>= 1) of a token's hc * D
// elements (at most 64 of them). The split depends on the width only, never on N, so that a
// token's sums (and so its result) do not change with the batch it runs in.
// From this many tokens pass 1 takes 4 tokens a block (each weight element loaded once for the
// 4); a token's sums are the same bits either way (GpuOps.HcTokensInAGroupEqualAlone).
constexpr int64_t kHcGroupFrom = 64;
constexpr int64_t kHcSlice = 512;  // GpuBackend's (256, 64 blocks a token, bought nothing: PERF.md v19)
gpuError_t hc_mix(const float* X, int64_t N, int64_t hc, int64_t D, WeightRef fn, WeightRef base, WeightRef scale,
                  int64_t sinkhorn_iters, float hc_eps, float norm_eps, bool bf16_out, bool cpu_order, int64_t slice,
                  float* y, float* post, float* comb, float* scratch, gpuStream_t s);
int64_t hc_mix_scratch_floats(int64_t N, int64_t hc, int64_t D, int64_t slice);

// hc_mix's fast order (post and comb non-null: hc_pre) with the rms_norm of its y after it
// (norm_weight, eps, bf16_steps, round_out as k::rms_norm's) in two launches instead of three:
// pass 1 as hc_mix's, then pass 2 and the norm in one block a token. y: the norm's output [N, D];
// act_fp8 (or null): its act_fp8 copy, as k::rms_norm writes it. hc_pre's own y is not written.
// The same values as hc_mix then rms_norm (GpuOps.HcPreNormIsTheTwoOps). Where hc_mix_norm_ok
// (else gpuErrorNotSupported): at most kTileHc (4) streams, rms_norm's register widths
// (rms_norm_act_fp8_ok) of more than 35 threads (D > 140).
bool hc_mix_norm_ok(int64_t hc, int64_t D, const WeightRef* norm_weight, bool bf16_steps);
gpuError_t hc_mix_norm(const float* X, int64_t N, int64_t hc, int64_t D, WeightRef fn, WeightRef base, WeightRef scale,
                       int64_t sinkhorn_iters, float hc_eps, float hc_norm_eps, bool bf16_mix, int64_t slice,
                       float* post, float* comb, float* scratch, const WeightRef* norm_weight, float eps,
                       bool bf16_steps, bool round_out, float* y, float* act_fp8, gpuStream_t s);

// y[n, j, d] = post[n, j] * out[n, d] + sum_i comb[n, i, j] * X[n, i, d], then the rounding.
gpuError_t hc_post(const float* out, const float* X, const float* post, const float* comb, int64_t N, int64_t hc,
                   int64_t D, bool bf16_out, float* y, gpuStream_t s);

}  // namespace plumb::gpu::k
