#pragma once
// Fast exact decoding of weight rows to f32 for the CPU ops (table lookups, one scale per block),
// so GEMMs can dequantize small row tiles on the fly instead of holding an f32 copy of the model.
#include <cstdint>

#include "plumb/format/weight_view.h"

namespace plumb::cpu {

// Rows [r0, r1) of a 2-D weight (or elements [r0, r1) of a 1-D one) into out, row-major f32.
// Same values as plumb::decode_rows.
void decode_weight_rows(const WeightView& w, int64_t r0, int64_t r1, float* out);

// Deterministic f32 dot product (fixed summation order, independent of call site). The order is
// a contract: the GPU backend reproduces it (kernels/cpu_order.h) when asked for bitwise results.
float dot(const float* a, const float* b, int64_t n);

}  // namespace plumb::cpu
