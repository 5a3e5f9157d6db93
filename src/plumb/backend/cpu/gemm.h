#pragma once
// The CPU GEMM used by linear() and the experts: y = x . w^T with the weight decoded to f32 in
// small row tiles on the fly (never a full f32 copy of a weight), f32 accumulation in a fixed
// order, parallel over weight rows.
#include <cstdint>

#include "plumb/backend/cpu/weight_decode.h"
#include "plumb/format/weight_view.h"
#include "plumb/util/thread_pool.h"

namespace plumb::cpu {

// For n in [0, N), r in [0, nrows): y[n*ldy + r] = dot(x + n*ldx, row row0 + r of w) over
// K = w.cols() values; bf16_weight rounds each decoded weight value to bf16 first; each dot sums
// in `order`.
void gemm_wt(ThreadPool& pool, const float* x, int64_t N, int64_t ldx, const WeightView& w, int64_t row0,
             int64_t nrows, float* y, int64_t ldy, bool bf16_weight, SumOrder order);

// FP8 e4m3 1x128 activation quantization round trip of each of N rows of K values, blocks
// starting at column 0 of the row (MODEL-SPEC 2.2).
void act_quant_fp8_rows(float* x, int64_t N, int64_t K);

}  // namespace plumb::cpu
