#pragma once
// Launchers of the routing and expert kernels (MODEL-SPEC 3.8); host side in gpu_moe.cpp. Kernel
// files include no plumb host headers: raw pointers and sizes in, the launch's error code out.
#include <cstdint>

#include "plumb/backend/gpu/gpu_compat.h"
#include "plumb/backend/gpu/weight_ref.h"

namespace plumb::gpu::k {

// Dynamic shared memory route_select needs per token (the host checks it against the device).
inline int64_t route_select_shared_bytes(int64_t E, int64_t G, int64_t K) { return (2 * E + G + K) * 4 + E; }

// Per token: scores from the logits (sigmoid or sqrt(softplus)), selection scores + bias; unless
// `hashed` (experts [N, K] already hold the tid2eid choice), group-limited top-K of the selection
// scores (ties to the lower id) into experts; then weights[k] = score[e_k] / sum * route_scale.
// bf16: scores, their sum, the quotients and the weights rounded to bf16 (RouteParams::round).
gpuError_t route_select(const float* logits, int64_t N, int64_t E, WeightRef bias, bool has_bias, bool sigmoid,
                        int64_t groups, int64_t topk_groups, int64_t K, float route_scale, bool hashed, bool bf16,
                        int32_t* experts, float* weights, gpuStream_t s);

// dst [M, D] = rows rows[i] of src [*, D].
gpuError_t gather_rows(const float* src, int64_t D, const int32_t* rows, int64_t M, float* dst, gpuStream_t s);

// h [M, I] = bf16?(row_weight[m] * silu(min(g, L)) * clamp(u, -L, L)); limit <= 0: no clamp;
// row_weight may be null (the shared expert, or a weight applied after w2); silu_bf16 rounds
// silu(.) to bf16 before the product (F.silu on a bf16 tensor).
gpuError_t swiglu(const float* g, const float* u, int64_t M, int64_t I, const float* row_weight, float limit,
                  bool silu_bf16, bool bf16_out, float* h, gpuStream_t s);

// acc[rows[i]] += t_i for i in [0, M), in order of i (equal rows must be consecutive), where
// t_i = ys[i] * row_weight[i] (row_weight null: ys[i]); bf16: acc = bf16(acc + bf16(t_i)), the
// V3 release's y[idx] += expert(x[idx]) * weight on a bf16 y (MoeParams::accumulate).
gpuError_t accumulate_rows(float* acc, const float* ys, const int32_t* rows, const float* row_weight, bool bf16,
                           int64_t M, int64_t D, gpuStream_t s);

// For each token n < N and d < D, in order of j < K: s = order[n*K + j]; if s lies in [s_lo, s_hi),
// acc[n][d] += t with t = ys[s - s_lo][d] * slot_weight[s] (slot_weight null: ys[..][d]) and
// accumulate_rows' arithmetic (bf16: acc = bf16(acc + bf16(t))). order lists each token's slots
// by ascending (expert id, k), so calls over consecutive slot ranges in expert order add exactly
// the terms accumulate_rows adds expert by expert, in the same order.
gpuError_t accumulate_slots(float* acc, const float* ys, const int32_t* order, const float* slot_weight, bool bf16,
                            int64_t N, int64_t K, int64_t D, int64_t s_lo, int64_t s_hi, gpuStream_t s);

// y = bf16?(a + b) over n values.
gpuError_t add_round(const float* a, const float* b, int64_t n, bool bf16_out, float* y, gpuStream_t s);

}  // namespace plumb::gpu::k
